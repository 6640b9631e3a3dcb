"""Check a built image's OCI labels and build manifest (tests/docker/run.sh step 4).

Environment: LABELS (``docker image inspect`` labels JSON), MANIFEST (/opt/vlgrpo/build-manifest.json),
REV (the git commit built), BASE (the base image reference passed as BASE_IMAGE), BASE_DIGEST (its pinned
digest, default "unresolved"), RESOLVED (what ``make image-*`` resolved at build time, space-separated, default
none), FLASH_ATTN (``<wheel url> <sha256>`` the GPU image must record and have installed, default: none). The
expected values are
computed independently of the image: versions from docker/pins.env and python/pyproject.toml, lock hashes
from the files in this checkout. Prints one line per check; exit 1 if any failed.
"""

import hashlib
import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
labels = json.loads(os.environ["LABELS"])
manifest = json.loads(os.environ["MANIFEST"])
pins = dict(
    line.split("=", 1)
    for line in (ROOT / "docker/pins.env").read_text().splitlines()
    if line and not line.startswith("#") and "=" in line
)
version = re.search(r'^version\s*=\s*"([^"]+)"', (ROOT / "python/pyproject.toml").read_text(), re.M).group(1)
lock = ROOT / pins["CI_LOCK"]

checks = {
    "label source": labels.get("org.opencontainers.image.source") == "local-ci",
    "label revision = git HEAD": labels.get("org.opencontainers.image.revision") == os.environ["REV"],
    "label version = pyproject": labels.get("org.opencontainers.image.version") == version,
    "label base.name = BASE_IMAGE": labels.get("org.opencontainers.image.base.name") == os.environ["BASE"],
    "label base.digest = BASE_DIGEST": labels.get("org.opencontainers.image.base.digest")
    == os.environ.get("BASE_DIGEST", "unresolved"),
    "manifest base = BASE_IMAGE, BASE_DIGEST": manifest["base"]
    == {"image": os.environ["BASE"], "digest": os.environ.get("BASE_DIGEST", "unresolved")},
    "manifest schema": manifest.get("schema") == "vlgrpo.build-manifest/1",
    "manifest revision": manifest["project"]["revision"] == os.environ["REV"],
    "manifest stand_in": manifest.get("stand_in") is True,
    "manifest verl source pypi, no cherry-pick claimed": manifest["verl"]["source"] == "pypi"
    and manifest["verl"]["cherry_pick_exercised"] is False
    and manifest["verl"]["applied_commits"] == [],
    "manifest pins = docker/pins.env": manifest["pins"] == pins,
    "manifest lock hash = this checkout's lock": manifest["locks"].get("stack.txt")
    == "sha256:" + hashlib.sha256(lock.read_bytes()).hexdigest(),
    "manifest transformers/ray/verl/veomni versions": all(
        manifest["packages"].get(k) == pins[v]
        for k, v in (
            ("transformers", "TRANSFORMERS_VERSION"),
            ("ray", "RAY_VERSION"),
            ("verl", "VERL_VERSION"),
            ("veomni", "VEOMNI_VERSION"),
        )
    ),
    "manifest torch = stand-in torch": manifest["packages"].get("torch", "").startswith(pins["CI_TORCH"]),
    "label and manifest resolved-at-build = RESOLVED": labels.get("io.vlgrpo.resolved-at-build")
    == " ".join(sorted(os.environ.get("RESOLVED", "").split()))
    and manifest.get("resolved_at_build") == sorted(os.environ.get("RESOLVED", "").split()),
}
if os.environ.get("FLASH_ATTN"):
    wheel, sha = os.environ["FLASH_ATTN"].split()
    checks["manifest flash_attn = the served wheel and its sha256"] = manifest.get("flash_attn") == {
        "wheel": wheel,
        "sha256": sha,
    }
    checks["flash-attn installed at the pinned version"] = (
        manifest["packages"].get("flash-attn") == pins["GPU_FLASH_ATTN"]
    )
for name, good in checks.items():
    print(f"{'ok  ' if good else 'FAIL'} {name}")
sys.exit(0 if all(checks.values()) else 1)
