"""VLGRPO_PREFLIGHT=warn may pass over findings that cannot run code, never the others.

The real entrypoint (fully-async-grpo.sh, through the test harness) runs the real preflight
(``python3 -P -s -m vlgrpo preflight --argv-file F --waive``) on a copy of the shipped Qwen3-VL-30B-A3B metadata
folder; only verl itself is replaced (python3 -m verl... writes a marker and exits). Empty parquet files give
``data.unreadable`` errors, which cannot run code: with warn the launch goes on. An ``auto_map`` in the model's
config.json (verl 0.8.0's reward loop loads the tokenizer with trust_remote_code forced on) or a Python file in
the folder must stop it with exit 2 whatever VLGRPO_PREFLIGHT says.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
MODEL = REPO / "assets" / "models" / "qwen3-vl-30b-a3b-instruct"
pytestmark = pytest.mark.slow


def _launch(tmp: Path, preflight: str) -> tuple[subprocess.CompletedProcess, bool]:
    bin_dir = tmp / "bin"
    if not bin_dir.exists():
        bin_dir.mkdir()
        (bin_dir / "python3").write_text(f"""#!/bin/bash
args=("$@"); i=0
while [[ ${{args[i]-}} == -P || ${{args[i]-}} == -s ]]; do i=$((i + 1)); done
if [[ ${{args[i]-}} == -m && ${{args[i + 1]-}} == verl.* ]]; then : >{tmp / "verl-ran"}; exit 0; fi
exec {sys.executable} "$@"
""")
        (bin_dir / "python3").chmod(0o755)
        (tmp / "dev").mkdir()
        for i in range(8):
            (tmp / "dev" / f"davinci{i}").touch()
        (tmp / "ckpt").mkdir()
        (tmp / "train.parquet").touch()
        (tmp / "test.parquet").touch()
    (tmp / "verl-ran").unlink(missing_ok=True)
    env = {
        "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(tmp),
        "TEST_DEV_DIR": str(tmp / "dev"),
        "WANDB_MODE": "offline",
        "VLGRPO_PLATFORM": "npu",
        "VLGRPO_TRAINER_NNODES": "1",
        "VLGRPO_ROLLOUT_NNODES": "1",
        "VLGRPO_MODEL_PATH": str(tmp / "model"),
        "VLGRPO_TRAIN_FILE": str(tmp / "train.parquet"),
        "VLGRPO_VAL_FILE": str(tmp / "test.parquet"),
        "VLGRPO_CHECKPOINT_DIR": str(tmp / "ckpt"),
        "VLGRPO_PREFLIGHT": preflight,
    }
    proc = subprocess.run(
        ["bash", str(REPO / "tests/bats/helpers/run-entry.sh"), str(REPO / "entrypoints/fully-async-grpo.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp,
    )
    return proc, (tmp / "verl-ran").exists()


def test_warn_passes_over_findings_that_run_no_code(tmp_path):
    shutil.copytree(MODEL, tmp_path / "model")
    proc, ran = _launch(tmp_path, "warn")
    assert "ERROR [data.unreadable]" in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 0 and ran, proc.stderr[-3000:]
    # enforce (the default) stops on the same findings
    proc, ran = _launch(tmp_path, "enforce")
    assert proc.returncode == 2 and not ran


@pytest.mark.parametrize("poison", ["auto_map", "python_file"])
def test_warn_never_passes_over_code_loading(tmp_path, poison):
    shutil.copytree(MODEL, tmp_path / "model")
    if poison == "auto_map":
        cfg = json.loads((tmp_path / "model" / "config.json").read_text())
        cfg["auto_map"] = {"AutoConfig": "configuration_evil.EvilConfig"}
        (tmp_path / "model" / "config.json").write_text(json.dumps(cfg))
        code = "model.auto-map"
    else:
        (tmp_path / "model" / "tokenization_evil.py").write_text("import os\n")
        code = "model.python-file"
    proc, ran = _launch(tmp_path, "warn")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert not ran, "verl was started although the model folder asks to run its own code"
    assert f"ERROR [{code}]" in proc.stderr
    assert f"preflight: not waivable: [{code}]" in proc.stderr
    assert "cannot waive: code the launch would run" in proc.stderr
