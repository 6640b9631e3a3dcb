"""Make the CI stand-in of the flash-attn release wheel: ``ci_wheel.py OUTDIR`` writes
``OUTDIR/flash_attn-<GPU_FLASH_ATTN>-py3-none-any.whl`` and prints its path.

tests/docker/run.sh step 3 serves it on loopback so ``make image-gpu`` can read its sha256 at build time (the value
``make pin-digests`` would write) and the GPU Dockerfile installs it with ``pip --require-hashes`` against that
value: the mechanics of the GitHub release asset, which CI cannot reach. The wheel holds metadata only (name
flash-attn, the pinned version, no module), so nothing in the image can import it as flash_attn. Deterministic
(fixed timestamps, sorted entries): the same bytes, the same sha256, on every run.
"""

import base64
import hashlib
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    pins = dict(
        line.split("=", 1)
        for line in (ROOT / "docker/pins.env").read_text().splitlines()
        if line and not line.startswith("#") and "=" in line
    )
    version = pins["GPU_FLASH_ATTN"]
    info = f"flash_attn-{version}.dist-info"
    files = {
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: flash-attn\nVersion: {version}\n"
        "Summary: vlgrpo CI stand-in of the flash-attn release wheel: metadata only, no module\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: vlgrpo-ci\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, text in files.items():
        data = text.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    out = Path(sys.argv[1]) / f"flash_attn-{version}-py3-none-any.whl"
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in sorted(files):
            zf.writestr(zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0)), files[name])
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
