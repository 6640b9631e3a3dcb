"""Write the image's build manifest, ``/opt/vlgrpo/build-manifest.json`` (read by ``python -m vlgrpo doctor``).

Schema ``vlgrpo.build-manifest/1`` (all strings unless noted)::

    schema        "vlgrpo.build-manifest/1"
    project       {name, version, revision, source}            revision: git commit of the build context
    platform      "gpu" | "npu-a2" | "npu-a3"                  the image flavour (Makefile PLATFORM)
    stand_in      bool: built FROM the CI stand-in base (no accelerator stack; see README)
    base          {image, digest}                              digest "unresolved" until make pin-digests
    resolved_at_build [..]                                     what make image-* read from the network because the
                                                               locks left it unresolved: "base", "flash-attn"
    verl          {source: "git"|"pypi", version, tag, commit, applied_commits: [..], cherry_pick_exercised: bool}
    pins          {KEY: value}                                 docker/pins.env as built (every pinned version)
    locks         {path: "sha256:<hex>"}                       every lock/constraints file the build installed from
    python        {version, executable}
    packages      {canonical-name: version}                    every installed distribution (importlib.metadata)
    sitecustomize {shim, base_sitecustomize, base_sitecustomize_target, kept_as, pth_dir}
    flash_attn    {wheel, sha256} | null                       GPU image only

Standard library only. Usage: ``python3 build_manifest.py OUT --pins pins.env --lock FILE... --sitecustomize JSON``
with the remaining facts in environment variables set from build args (VLGRPO_*; see the Dockerfiles).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata as md
import json
import os
import re
import sys


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_env_file(path: str) -> dict[str, str]:
    pins = {}
    for line in open(path, encoding="utf-8"):
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            pins[key] = value
    return pins


def sha256(path: str) -> str:
    with open(path, "rb") as fh:
        return "sha256:" + hashlib.sha256(fh.read()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--pins", required=True)
    ap.add_argument("--lock", action="append", default=[], help="lock/constraints file installed from (repeatable)")
    ap.add_argument("--sitecustomize", required=True, help="JSON written by place-sitecustomize.sh")
    args = ap.parse_args(argv)
    env = os.environ.get
    pins = read_env_file(args.pins)
    verl_source = env("VLGRPO_VERL_SOURCE", "git")
    fixes = env("VLGRPO_VERL_FIX_COMMITS", "").split()
    manifest = {
        "schema": "vlgrpo.build-manifest/1",
        "project": {
            "name": "vlgrpo",
            "version": env("VLGRPO_VERSION", "unknown"),
            "revision": env("VLGRPO_REVISION", "unknown"),
            "source": env("VLGRPO_SOURCE_URL", "unknown"),
        },
        "platform": env("VLGRPO_PLATFORM", "unknown"),
        "stand_in": env("VLGRPO_STAND_IN", "0") == "1",
        "base": {"image": env("VLGRPO_BASE_IMAGE", "unknown"), "digest": env("VLGRPO_BASE_DIGEST") or "unresolved"},
        "resolved_at_build": sorted(env("VLGRPO_RESOLVED_AT_BUILD").split()),
        "verl": {
            "source": verl_source,
            "version": pins.get("VERL_VERSION"),
            "tag": pins.get("VERL_TAG"),
            "commit": pins.get("VERL_COMMIT") if verl_source == "git" else None,
            "applied_commits": fixes if verl_source == "git" else [],
            "cherry_pick_exercised": verl_source == "git",
        },
        "pins": pins,
        "locks": {os.path.basename(p): sha256(p) for p in args.lock},
        "python": {"version": sys.version.split()[0], "executable": sys.executable},
        "packages": dict(
            sorted({canon(d.metadata["Name"]): d.version for d in md.distributions() if d.metadata["Name"]}.items())
        ),
        "sitecustomize": json.load(open(args.sitecustomize, encoding="utf-8")),
        "flash_attn": (
            {"wheel": env("VLGRPO_FLASH_ATTN_WHEEL"), "sha256": env("VLGRPO_FLASH_ATTN_SHA256")}
            if env("VLGRPO_FLASH_ATTN_WHEEL")
            else None
        ),
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=2, sort_keys=False)
        fh.write("\n")
    print(f"build manifest: {args.out} ({len(manifest['packages'])} packages, {len(manifest['locks'])} locks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
