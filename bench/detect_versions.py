"""Run every vlgrpo patch detector on the real source of several transformers / verl releases.

Downloads the wheels with ``pip download --no-deps`` (or reads them from ``--wheels DIR``), reads the target files
straight out of each wheel (nothing is installed or imported from them) and runs the registry's detectors on the
functions found by :func:`vlgrpo.patches.source.find_function`. Prints a markdown table (for docs/patches.md).

Usage::

    python bench/detect_versions.py [--wheels DIR] \
        [--transformers 4.57.0 4.57.1 4.57.3 4.57.5 4.57.6 5.0.0 5.5.3] [--verl 0.7.0 0.7.1 0.8.0 0.9.0]

Verdicts: ``faulty`` (the patch would be applied), ``ok`` (not needed: code fixed or of another form), ``absent``
(no such file/function in that release: target absent).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import types
import zipfile
from pathlib import Path

from vlgrpo.patches import source
from vlgrpo.patches.fixes import npu_qwen3_vl_moe_train_routing as npu_routing
from vlgrpo.patches.fixes import qwen3_vl_moe_router_dtype as router_dtype
from vlgrpo.patches.fixes import qwen3_vl_text_rotary_device as text_rotary
from vlgrpo.patches.fixes import qwen3_vl_vision_pos_embed as pos_embed
from vlgrpo.patches.fixes import rollout_vision_placeholder_ban as rollout_ban

QV = "transformers/models/qwen3_vl/modeling_qwen3_vl.py"
QM = "transformers/models/qwen3_vl_moe/modeling_qwen3_vl_moe.py"
SERVER = "verl/workers/rollout/vllm_rollout/vllm_async_server.py"
CHECKS = {  # package -> [(patch id, file in the wheel, qualname, detector)]
    "transformers": [
        ("qwen3_vl.vision_pos_embed", QV, "Qwen3VLVisionModel.fast_pos_embed_interpolate", pos_embed.is_faulty),
        ("qwen3_vl.vision_pos_embed", QM, "Qwen3VLMoeVisionModel.fast_pos_embed_interpolate", pos_embed.is_faulty),
        ("qwen3_vl.text_rotary_device", QV, "Qwen3VLTextRotaryEmbedding.forward", text_rotary.is_faulty),
        ("qwen3_vl.text_rotary_device", QM, "Qwen3VLMoeTextRotaryEmbedding.forward", text_rotary.is_faulty),
        ("qwen3_vl_moe.router_dtype", QM, "Qwen3VLMoeTextSparseMoeBlock.forward", router_dtype.is_faulty),
        ("npu.qwen3_vl_moe.train_routing", QM, "Qwen3VLMoeTextSparseMoeBlock.forward", npu_routing.is_faulty),
    ],
    "verl": [
        (
            "qwen3_vl.vision_pos_embed",
            "verl/models/transformers/qwen3_vl.py",
            "fast_pos_embed_interpolate",
            pos_embed.is_faulty,
        ),
        (
            "qwen3_vl.vision_pos_embed",
            "verl/models/transformers/qwen3_5.py",
            "fast_pos_embed_interpolate",
            pos_embed.is_faulty,
        ),
        (
            "npu.qwen3_vl_moe.train_routing",
            "verl/models/transformers/npu_patch.py",
            "NPUQwen3VLMoeTextSparseMoeBlock.forward",
            npu_routing.is_faulty,
        ),
        ("rollout.vision_placeholder_ban", SERVER, "vLLMHttpServer.generate", "ban"),
    ],
}


def _ban_verdict(path: Path, node) -> tuple:
    """rollout_ban.is_faulty reads the module of the function: a stand-in module pointing at the wheel's file."""
    module = types.ModuleType("vlgrpo_detect_versions_server")
    module.__file__ = str(path)
    sys.modules[module.__name__] = module
    namespace: dict = {}
    exec(f"async def generate({', '.join(a.arg for a in node.args.args)}):\n    pass\n", namespace)
    namespace["generate"].__module__ = module.__name__
    try:
        return rollout_ban.is_faulty(namespace["generate"])
    finally:
        del sys.modules[module.__name__]


def verdicts(package: str, version: str, wheel: Path, scratch: Path) -> list:
    rows = []
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        for pid, rel, qualname, detector in CHECKS[package]:
            where = f"{rel.rsplit('/', 1)[-1]}: `{qualname}`"
            if rel not in names:
                rows.append((package, version, pid, where, "absent", "file not in this release"))
                continue
            text = zf.read(rel).decode("utf-8")
            try:
                node = source.find_function(text, qualname)
            except KeyError:
                rows.append((package, version, pid, where, "absent", "function not in this release"))
                continue
            if detector == "ban":
                path = scratch / f"{package}-{version}-{rel.replace('/', '_')}"
                path.write_text(text)
                faulty, reason = _ban_verdict(path, node)
            else:
                faulty, reason = detector(node)
            rows.append((package, version, pid, where, "faulty" if faulty else "ok", reason))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheels", type=Path, default=None, help="directory holding (or receiving) the wheels")
    ap.add_argument(
        "--transformers", nargs="*", default=["4.57.0", "4.57.1", "4.57.3", "4.57.5", "4.57.6", "5.0.0", "5.5.3"]
    )
    ap.add_argument("--verl", nargs="*", default=["0.7.0", "0.7.1", "0.8.0", "0.9.0"])
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="vlgrpo-detect-") as tmp:
        wheels = args.wheels or Path(tmp) / "wheels"
        wheels.mkdir(parents=True, exist_ok=True)
        rows = []
        for package, versions in (("transformers", args.transformers), ("verl", args.verl)):
            for version in versions:
                found = sorted(wheels.glob(f"{package}-{version}-*.whl"))
                if not found:
                    subprocess.run(
                        [
                            sys.executable,
                            "-m",
                            "pip",
                            "download",
                            "-q",
                            "--no-deps",
                            f"{package}=={version}",
                            "-d",
                            str(wheels),
                        ],
                        check=True,
                    )
                    found = sorted(wheels.glob(f"{package}-{version}-*.whl"))
                rows += verdicts(package, version, found[0], Path(tmp))
    print("| release | patch | function | verdict | detector's reason |")
    print("|---|---|---|---|---|")
    for package, version, pid, where, verdict, reason in rows:
        print(f"| {package} {version} | `{pid}` | {where} | **{verdict}** | {' '.join(reason.split())[:140]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
