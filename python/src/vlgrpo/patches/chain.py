"""Chaining to the ``sitecustomize`` that ours shadows (field case B18; stdlib only, run at interpreter start).

Python imports only the first ``sitecustomize`` on ``sys.path``. When ours is that one, :func:`chain_sitecustomize`
executes the next one (apport, conda, a vendor image's), or the one ``install-sitecustomize`` found in our place and
kept as :data:`KEPT_NAME` next to ours, so installing vlgrpo never switches another start-up hook off.
"""

import os
import sys

from vlgrpo.patches.state import STATE, strict

#: Name under which ``install-sitecustomize`` keeps a foreign ``sitecustomize.py`` it found in its place.
KEPT_NAME = "vlgrpo_orig_sitecustomize.py"
#: Marker in the first line of our shim (:func:`vlgrpo.patches.cli.shim_source`).
SHIM_MARKER = b"vlgrpo-sitecustomize-shim"


def _is_our_shim(path):
    try:
        with open(path, "rb") as fh:
            return SHIM_MARKER in fh.read(4096)
    except OSError:
        return False


def find_next_sitecustomize(own_file, search_path=None):
    """Return the path of the next ``sitecustomize.py`` on ``sys.path`` after the directory of ``own_file``.

    A ``vlgrpo_orig_sitecustomize.py`` next to ours (the file ``install-sitecustomize`` found in its place)
    comes first. Directories before ours are not searched (Python would have imported that one instead of ours);
    copies of our own shim are skipped. ``None`` when there is none. Paths are compared as absolute paths, and
    through symlinks (``realpath``) only when that finds no match, to keep start-up cheap.
    """
    search_path = sys.path if search_path is None else search_path
    own_dir = os.path.dirname(os.path.abspath(own_file))
    kept = os.path.join(own_dir, KEPT_NAME)  # a foreign one that install-sitecustomize moved aside
    if os.path.isfile(kept):
        return kept
    for resolve in (os.path.abspath, os.path.realpath):
        own = resolve(own_dir)
        entries = [resolve(e or os.getcwd()) for e in search_path if isinstance(e, str)]
        if own in entries:
            break
    else:
        return None
    for entry in entries[entries.index(own) + 1 :]:
        if entry == own:
            continue
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate) and not _is_our_shim(candidate):
            return candidate
    return None


def chain_sitecustomize(own_file):
    """Execute the ``sitecustomize`` that ours shadows (apport, conda, vendor images; field case B18).

    The chained file runs as module ``vlgrpo_chained_sitecustomize`` (also in ``sys.modules``). Its errors are
    reported like Python reports a failing ``sitecustomize`` (one line on stderr) and recorded; strict mode
    re-raises.
    """
    try:
        path = find_next_sitecustomize(own_file)
        if path is None:
            return None
        module = type(sys)("vlgrpo_chained_sitecustomize")
        module.__file__ = path
        sys.modules["vlgrpo_chained_sitecustomize"] = module
        with open(path, "rb") as fh:
            code = compile(fh.read(), path, "exec")
        STATE["chained_sitecustomize"] = path
        exec(code, module.__dict__)
        return path
    except Exception as exc:
        STATE["chain_error"] = f"{type(exc).__name__}: {exc}"
        if strict():
            raise
        try:
            sys.stderr.write(
                f"vlgrpo.patches: error in chained sitecustomize {STATE['chained_sitecustomize']}: "
                f"{type(exc).__name__}: {exc}\n"
            )
        except Exception:
            pass
        return None
