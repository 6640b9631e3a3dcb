"""``python -m vlgrpo patches <status|table|index|install-sitecustomize>``.

status                 every patch for *this* interpreter: applied / not needed / target absent / disabled /
                       failed, with the reason. ``--verify`` also runs each fix on tiny CPU inputs against a
                       reference; ``--json`` prints machine-readable rows (see :func:`vlgrpo.patches.status`);
                       ``--no-import`` reports only what this process already imported. Exit 0, or 2 if any patch
                       failed or a verify failed.
table                  the markdown patch table of docs/patches.md, generated from the registry (``--file FILE``
                       rewrites the block between ``<!-- BEGIN/END GENERATED: patches -->`` in FILE); ``--summary``
                       the README's short table (block ``patches-summary``); ``--check`` exits 1 when the block
                       is stale instead of writing it.
index                  the start-up index ``vlgrpo/patches/index.py`` (ids, hooked modules) generated from the
                       registry (``--write`` rewrites the file).
install-sitecustomize  copy the sitecustomize shim (and a ``.pth`` fallback) into a site-packages directory
                       (default: ``sysconfig.get_paths()["purelib"]`` of this interpreter); used by the images.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import sysconfig

SHIM_NAME = "sitecustomize.py"
PTH_NAME = "vlgrpo-patches.pth"
# A .pth line starting with "import" is executed by site.py even when another sitecustomize shadows ours (B18).
# Silent when vlgrpo is no longer importable (uninstalled; pip does not own this file): no traceback at every start.
PTH_LINE = (
    'import sys; exec("try:\\n    import vlgrpo.patches.bootstrap as _b\\nexcept ImportError:\\n    _b = None\\n'
    "if _b is not None:\\n    _b.install(via='pth')\", {})\n"
)


def shim_source() -> str:
    """The sitecustomize shim installed into images (same text as ``python/sitecustomize.py``)."""
    return (
        "# vlgrpo-sitecustomize-shim: installed by `python -m vlgrpo patches install-sitecustomize`.\n"
        "# Loads vlgrpo's runtime patches (stdlib-only post-import hooks), then runs the sitecustomize that this\n"
        "# file shadows, if any. Never raises into the interpreter (VLGRPO_PATCHES_STRICT=1 re-raises).\n"
        "try:\n"
        "    from vlgrpo.patches import bootstrap as _vlgrpo_bootstrap, chain as _vlgrpo_chain\n"
        "except ImportError:  # vlgrpo gone: still run the sitecustomize install-sitecustomize moved aside\n"
        "    _vlgrpo_bootstrap = None\n"
        "    import os as _os\n"
        "    _kept = _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), 'vlgrpo_orig_sitecustomize.py')\n"
        "    if _os.path.isfile(_kept):\n"
        "        with open(_kept, 'rb') as _fh:\n"
        "            _code = compile(_fh.read(), _kept, 'exec')\n"
        "        exec(_code, {'__name__': 'vlgrpo_chained_sitecustomize', '__file__': _kept})\n"
        "if _vlgrpo_bootstrap is not None:\n"
        "    try:\n"
        "        _vlgrpo_bootstrap.install(via='sitecustomize')\n"
        "    finally:  # the shadowed sitecustomize runs even when strict mode re-raised an install error\n"
        "        _vlgrpo_chain.chain_sitecustomize(__file__)\n"
    )


def _status(args) -> int:
    import vlgrpo.patches as patches

    rows = patches.status(verify=args.verify, import_targets=not args.no_import)
    state = patches.bootstrap_state()
    bad = [r for r in rows if r["status"] == "failed" or (r["verify"] or "").startswith("failed")]
    if args.json:
        print(json.dumps({"bootstrap": state, "patches": rows}, indent=2, default=str))
    else:
        print(
            f"bootstrap: installed via {state['via']}"
            + ("" if state["enabled"] else " (VLGRPO_PATCHES=off)")
            + (f"; chained sitecustomize {state['chained_sitecustomize']}" if state["chained_sitecustomize"] else "")
        )
        for r in rows:
            verify = f"  [verify: {r['verify']}]" if r["verify"] else ""
            print(f"{r['id']:<34} {r['status']:<14} {r['reason']}{verify}")
    return 2 if bad else 0


def _table(args) -> int:
    from vlgrpo.patches import report

    try:
        table = report.markdown_summary() if args.summary else report.markdown_table()
    except KeyError as exc:
        print(f"vlgrpo patches table: {exc.args[0]}", file=sys.stderr)
        return 2
    if not args.file:
        if args.check:
            print("vlgrpo patches table: --check needs --file FILE", file=sys.stderr)
            return 2
        print(table)
        return 0
    region = "patches-summary" if args.summary else "patches"
    begin, end = f"<!-- BEGIN GENERATED: {region} -->", f"<!-- END GENERATED: {region} -->"
    try:
        with open(args.file, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        print(f"vlgrpo patches table: --file {args.file}: {exc}", file=sys.stderr)
        return 2
    if begin not in text or end not in text.split(begin, 1)[1]:
        print(
            f"vlgrpo patches table: --file {args.file} lacks the markers {begin} ... {end}; add them where "
            "the table belongs",
            file=sys.stderr,
        )
        return 2
    head, rest = text.split(begin, 1)
    tail = rest.split(end, 1)[1]
    new = f"{head}{begin}\n{table}\n{end}{tail}"
    if new == text:
        return 0
    if args.check:
        print(
            f"vlgrpo patches table: the {region} block of {args.file} is out of date; run make docs-patches",
            file=sys.stderr,
        )
        return 1
    with open(args.file, "w", encoding="utf-8") as fh:
        fh.write(new)
    print(f"updated the {region} block in {args.file}")
    return 0


def _index(args) -> int:
    from vlgrpo.patches import registry

    text = registry.index_source()
    if not args.write:
        print(text, end="")
        return 0
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "index.py")
    with open(path, encoding="utf-8") as fh:
        old = fh.read()
    if old != text:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        print(f"updated {path}")
    return 0


def install_sitecustomize(site_packages: str | None = None, pth: bool = True) -> dict:
    """Write the shim (and the ``.pth`` fallback) into ``site_packages``.

    An existing foreign ``sitecustomize.py`` in that directory is kept as ``vlgrpo_orig_sitecustomize.py`` next to
    it and chained (it would otherwise be overwritten). Returns ``{"sitecustomize": path, "pth": path|None,
    "kept": path|None, "shadowed_by": path|None}``; ``shadowed_by`` names a ``sitecustomize.py`` that comes
    earlier on ``sys.path`` (then only the ``.pth`` loads the patches, and ours is not the one imported).

    Raises:
        FileNotFoundError: ``site_packages`` is not a directory.
    """
    target = site_packages or sysconfig.get_paths()["purelib"]
    if not os.path.isdir(target):
        raise FileNotFoundError(f"--site-packages {target!r} is not a directory; pass an existing site-packages")
    shim = os.path.join(target, SHIM_NAME)
    kept = None
    if os.path.exists(shim):
        with open(shim, encoding="utf-8", errors="replace") as fh:
            if "vlgrpo-sitecustomize-shim" not in fh.read(4096):
                kept = os.path.join(target, "vlgrpo_orig_sitecustomize.py")
                os.replace(shim, kept)
    source = shim_source()
    with open(shim, "w", encoding="utf-8") as fh:
        fh.write(source)
    try:  # a byte-code cache next to it, so start-up does not compile the shim (pip does this for packages)
        import py_compile

        py_compile.compile(shim, doraise=True)
    except (OSError, py_compile.PyCompileError):
        pass
    pth_path = None
    if pth:
        pth_path = os.path.join(target, PTH_NAME)
        with open(pth_path, "w", encoding="utf-8") as fh:
            fh.write(PTH_LINE)
    shadowed_by = None
    real_target = os.path.realpath(target)
    for entry in sys.path:
        real = os.path.realpath(entry or os.getcwd())
        if real == real_target:
            break
        if os.path.isfile(os.path.join(real, SHIM_NAME)):
            shadowed_by = os.path.join(real, SHIM_NAME)
            break
    return {"sitecustomize": shim, "pth": pth_path, "kept": kept, "shadowed_by": shadowed_by}


def _install(args) -> int:
    try:
        res = install_sitecustomize(args.site_packages, pth=not args.no_pth)
    except (FileNotFoundError, OSError) as exc:
        print(f"vlgrpo patches install-sitecustomize: {exc}", file=sys.stderr)
        return 2
    print(f"installed {res['sitecustomize']}" + (f" and {res['pth']}" if res["pth"] else ""))
    if res["kept"]:
        print(f"kept the previous sitecustomize as {res['kept']} (chained)")
    if res["shadowed_by"]:
        print(
            f"note: {res['shadowed_by']} comes earlier on sys.path and shadows ours; "
            f"the patches still load through {PTH_NAME}",
            file=sys.stderr,
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vlgrpo patches", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("status", help="patch status for this interpreter")
    p.add_argument("--verify", action="store_true", help="run each fix on tiny inputs against a reference")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--no-import", action="store_true", help="do not import the target modules first")
    p.set_defaults(func=_status)
    p = sub.add_parser("table", help="markdown patch table (docs/patches.md) or its short summary (README.md)")
    p.add_argument(
        "--summary", action="store_true", help="the short table (id and title) of the README instead of the full one"
    )
    p.add_argument(
        "--file",
        "--readme",
        dest="file",
        metavar="FILE",
        default=None,
        help="rewrite the block between <!-- BEGIN/END GENERATED: patches --> (with --summary: "
        "patches-summary) in FILE instead of printing",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="with --file: exit 1 if the block differs from what would be generated; write nothing",
    )
    p.set_defaults(func=_table)
    p = sub.add_parser("index", help="the start-up index (vlgrpo/patches/index.py) generated from the registry")
    p.add_argument("--write", action="store_true", help="rewrite index.py next to this module instead of printing")
    p.set_defaults(func=_index)
    p = sub.add_parser("install-sitecustomize", help="install the sitecustomize shim into site-packages")
    p.add_argument(
        "--site-packages", metavar="DIR", default=None, help="target directory (default: this interpreter's purelib)"
    )
    p.add_argument("--no-pth", action="store_true", help=f"do not write the {PTH_NAME} fallback")
    p.set_defaults(func=_install)
    args = parser.parse_args(argv)
    return int(args.func(args))
