"""``make demo`` (scripts/demo.sh): the npu-async-grpo launch planned end to end on the shipped inputs.

What a newcomer checks in the plan, asserted against references that do not come from the demo's own
output: the sample parquet files read with pyarrow (row counts, problems carried over), the topology the
issue asks for (2 trainer + 2 rollout nodes x 16 NPUs) in the exact command, the preflight's own JSON report
on that printed command (token budget numbers shown = numbers the preflight computes), the patch registry
(every patch listed with its status), and a refused configuration (exit 2, the variable named). One full
demo run (~30-45 s on the 2-core CI machine) is shared by the module; the refused run stops at the
entrypoint (a few seconds).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parents[3]
DEMO = REPO / "scripts" / "demo.sh"
SAMPLE = REPO / "assets" / "geo3k-sample" / "hiyouga-geometry3k-format" / "data"
MODEL = REPO / "assets" / "models" / "qwen3-vl-30b-a3b-instruct"

pytestmark = pytest.mark.slow


def _env(**extra: str) -> dict[str, str]:
    """The caller's environment without any VLGRPO_* setting (a developer's own would change the plan),
    except the patch package's strict switch that `make test-python` sets."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLGRPO_") or k == "VLGRPO_PATCHES_STRICT"}
    env.update(extra)
    return env


def _run_demo(out: Path, **extra: str) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    proc = subprocess.run(
        [str(DEMO), "--python", sys.executable, "--out", str(out)],
        env=_env(**extra),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return proc, time.monotonic() - t0


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("demo")
    proc, took = _run_demo(out)
    text = proc.stdout
    lines = text.splitlines()
    start = lines.index(next(ln for ln in lines if ln.startswith("# command (")))
    nargs = int(re.match(r"# command \((\d+) arguments", lines[start]).group(1))
    argv = lines[start + 1 : start + 1 + nargs]
    return {"proc": proc, "took": took, "text": text, "lines": lines, "argv": argv, "out": out}


def test_demo_ends_ready_within_three_minutes(demo: dict) -> None:
    proc = demo["proc"]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert demo["lines"][-1].startswith("verdict: READY -- "), demo["lines"][-1]
    assert "nothing started" in demo["lines"][-1]
    assert demo["took"] < 180, f"make demo took {demo['took']:.0f} s after setup (the bar: under 3 minutes)"


def test_steps_report_progress_and_the_plan_has_every_section(demo: dict) -> None:
    text = demo["text"]
    for step in range(1, 5):
        assert re.search(rf"^\[{step}/4\] ", text, re.M), f"step {step}/4 not announced"
    assert len(re.findall(r"-> done in \d+s", text)) == 3
    for header in ("== command (", "== topology ==", "== token budget", "== patches"):
        assert header in text, header


def test_command_is_the_fully_async_launch_for_two_plus_two_a3_nodes(demo: dict) -> None:
    argv = demo["argv"]
    assert argv[:3] == ["python3", "-m", "verl.experimental.fully_async_policy.fully_async_main"]
    for expected in (
        "trainer.nnodes=2",
        "trainer.n_gpus_per_node=16",
        "rollout.nnodes=2",
        "rollout.n_gpus_per_node=16",
        f"actor_rollout_ref.model.path={MODEL}",
        "data.truncation=error",
        "data.filter_overlong_prompts=True",
        "data.trust_remote_code=False",
    ):
        assert expected in argv, expected
    # one Hydra argument per line: no line carries two overrides or whitespace
    assert all(" " not in a for a in argv), [a for a in argv if " " in a]
    assert "trainer 2 node(s) x 16 + rollout 2 node(s) x 16 = 64 npu devices" in demo["text"]


def test_data_is_the_sample_converted_by_the_project_converter(demo: dict) -> None:
    argv = dict(a.split("=", 1) for a in demo["argv"][3:])
    for key, src in (
        ("data.train_files", "train-00000-of-00001.parquet"),
        ("data.val_files", "test-00000-of-00001.parquet"),
    ):
        path = Path(argv[key])
        assert path.parent == demo["out"] / "geo3k"
        converted = pq.read_table(path).to_pylist()
        source = pq.read_table(SAMPLE / src).to_pylist()
        assert len(converted) == len(source) > 0
        # verl's geo3k format: the source answer is the ground truth, the problem is in the prompt
        assert [r["reward_model"]["ground_truth"] for r in converted] == [r["answer"] for r in source]
        for row, src_row in zip(converted, source):
            assert src_row["problem"].replace("<image>", "").strip()[:40] in row["prompt"][0]["content"]
            assert row["data_source"] == "hiyouga/geometry3k"


def test_token_budget_shown_is_the_preflight_report_of_the_printed_command(demo: dict, tmp_path: Path) -> None:
    argv_file = tmp_path / "argv.txt"
    argv_file.write_text("\n".join(demo["argv"]) + "\n")
    # the demo is a dry run: its preflight plans (--purpose plan), as the entrypoint's dry run calls it
    proc = subprocess.run(
        [sys.executable, "-m", "vlgrpo", "preflight", "--purpose", "plan", "--json", "--argv-file", str(argv_file)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads(proc.stdout)["summary"]
    budget = summary["token_budget"]
    assert (
        f"token budget: max_prompt_length {budget['max_prompt_length']} + max_response_length "
        f"{budget['max_response_length']} = {budget['needed']} <= max_model_len {budget['max_model_len']}"
        in demo["text"]
    )
    shown = 0
    for split, info in summary["data"].items():
        if not isinstance(info, dict) or "rows" not in info:
            continue
        largest = info["largest_prompt"]
        line = (
            f"data {split}: {info['rows']} rows, largest prompt {largest['tokens']} tokens "
            f"({largest['image_tokens']} image tokens, row {largest['row']}) vs max_prompt_length "
            f"{info['max_prompt_length']}; over budget: {info['over_budget']}"
        )
        assert line in demo["text"], line
        assert 0 < largest["image_tokens"] < largest["tokens"] <= info["max_prompt_length"]
        shown += 1
    assert shown == 2  # train and val


def test_every_registered_patch_is_listed_with_its_status(demo: dict) -> None:
    from vlgrpo.patches import registry

    section = demo["text"].split("== patches", 1)[1].split("verdict:", 1)[0]
    ids = [rec["id"] if isinstance(rec, dict) else rec.id for rec in registry.PATCHES]
    assert ids
    for pid in ids:
        m = re.search(
            rf"^  {re.escape(pid)}\s+(applied|not needed|target absent|disabled|failed)\s+verify (\w+)", section, re.M
        )
        assert m, f"{pid} missing from the plan's patch section"
        assert m.group(1) != "failed" and m.group(2) == "ok", m.group(0)


def test_refused_configuration_names_the_variable_and_exits_2(tmp_path: Path) -> None:
    proc, _ = _run_demo(tmp_path / "refused", VLGRPO_MAX_MODEL_LEN="4096")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    # the entrypoint's one-line error names the variable, the value and the needed minimum (2048 + 8192)
    assert any("VLGRPO_MAX_MODEL_LEN" in ln and "4096" in ln and "10240" in ln for ln in proc.stdout.splitlines()), (
        proc.stdout
    )
    assert proc.stdout.splitlines()[-1].startswith("verdict: NOT READY -- ")
    assert "== command (" not in proc.stdout  # nothing planned, nothing started


def test_a_real_launch_is_refused_by_the_demo(tmp_path: Path) -> None:
    proc, _ = _run_demo(tmp_path / "real", VLGRPO_DRY_RUN="false")
    assert proc.returncode == 2
    assert "the demo only plans" in proc.stdout


def test_readme_excerpt_of_the_plan_is_what_the_demo_prints(demo: dict) -> None:
    """README.md quotes the plan (counts, token numbers, topology, patch lines): every line it shows in full must
    be a line of this run's plan, so the quoted numbers cannot go stale. Of the patch rows the README shortens
    with '...', the id, status and verify columns are compared; other shortened lines, step timings and the
    verdict's wall time are left out."""
    readme = (REPO / "README.md").read_text()
    block = readme.split("4. the plan, ending where a cluster run would `exec` verl:\n\n```text\n", 1)[1]
    block = block.split("\n```", 1)[0]
    printed = [ln.strip() for ln in demo["lines"]]
    checked = 0
    for line in (ln.strip() for ln in block.splitlines()):
        if not line or "done in" in line:
            continue
        if line.startswith("verdict:"):
            line = re.sub(r" \(\d+s\)$", "", line)
            assert any(re.sub(r" \(\d+s\)$", "", p) == line for p in printed), f"README verdict is stale: {line}"
        elif "..." in line:
            if line.startswith(("qwen3_vl", "npu.", "rollout.")):  # patch rows: same id, status and verify result
                row = re.compile(r"^(\S+)\s+(.+?)\s+(verify \S+)")
                cols = row.match(line).groups()
                assert any((m := row.match(p)) and m.groups() == cols for p in printed), (
                    f"README patch row is stale: {line}"
                )
            continue
        else:
            assert line in printed, f"README shows a plan line the demo does not print: {line}"
        checked += 1
    assert checked >= 15, checked
