"""``python -m vlgrpo patches ...`` as a user runs it (fresh interpreters)."""

from __future__ import annotations

import json

from patch_helpers import run_py

from vlgrpo.patches import registry, report

CLI = "import sys; from vlgrpo.__main__ import main; sys.exit(main(sys.argv[1:]))"


def _cli(*args, env=None, check=False, path=()):
    code = f"import sys; sys.argv = ['vlgrpo'] + {list(args)!r}; " + CLI.split("; ", 1)[1]
    return run_py(code, env=env, check=check, path=path)


def test_status_json_verify_in_a_plain_process():
    proc = _cli("patches", "status", "--verify", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    rows = {r["id"]: r for r in doc["patches"]}
    assert list(rows) == list(registry.IDS)
    assert doc["bootstrap"]["via"] == "status"  # no sitecustomize in this process: status installed the hooks
    # pinned stack (transformers 4.57.6, verl 0.8.0, no torch_npu): both transformers faults present
    assert rows["qwen3_vl.vision_pos_embed"]["status"] == "applied"
    assert rows["qwen3_vl_moe.router_dtype"]["status"] == "applied"
    assert rows["qwen3_vl.text_rotary_device"]["status"] == "applied"
    assert rows["npu.qwen3_vl_moe.train_routing"]["status"] == "not needed"
    npu_target = {t["target"]: t for t in rows["npu.qwen3_vl_moe.train_routing"]["targets"]}
    assert (
        "No module named 'torch_npu'"
        in npu_target["verl.models.transformers.npu_patch.NPUQwen3VLMoeTextSparseMoeBlock.forward"]["reason"]
    )
    assert all(r["verify"] == "ok" for r in rows.values()), {k: r["verify"] for k, r in rows.items()}


def test_status_text_and_exit_code_on_failure():
    code = (
        "import dataclasses, sys\nfrom vlgrpo.patches import registry, cli\n"
        "registry.PATCHES = tuple(dataclasses.replace(r, replacement='vlgrpo.patches.no_such_module:forward')"
        " if r.id == 'qwen3_vl_moe.router_dtype' else r for r in registry.PATCHES)\n"
        "sys.exit(cli.main(['status']))"
    )
    proc = run_py(code, check=False)
    assert proc.returncode == 2
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("qwen3_vl_moe.router_dtype"))
    assert " failed " in line and "no_such_module" in line


def test_verify_failure_counts_only_where_the_fix_is_live():
    """A self-test that raises fails an applied patch (exit 2) but not one that is not needed in this interpreter
    (e.g. a transformers 5.x block the 4.57.x-shaped self-test cannot build): there it is reported as n/a."""
    code = (
        "import dataclasses, json, sys\nfrom vlgrpo.patches import registry, cli\n"
        "registry.PATCHES = tuple(dataclasses.replace(r, verify='vlgrpo.patches.no_such_module:verify')"
        " if r.id == '{pid}' else r for r in registry.PATCHES)\n"
        "sys.exit(cli.main(['status', '--verify', '--json']))"
    )
    live = run_py(code.format(pid="qwen3_vl_moe.router_dtype"), check=False)  # applied on 4.57.6
    assert live.returncode == 2
    row = {r["id"]: r for r in json.loads(live.stdout)["patches"]}["qwen3_vl_moe.router_dtype"]
    assert row["status"] == "failed" and row["verify"].startswith("failed: ModuleNotFoundError")
    idle = run_py(code.format(pid="npu.qwen3_vl_moe.train_routing"), check=False)  # not needed without torch_npu
    assert idle.returncode == 0, idle.stdout + idle.stderr
    row = {r["id"]: r for r in json.loads(idle.stdout)["patches"]}["npu.qwen3_vl_moe.train_routing"]
    assert row["status"] == "not needed" and row["verify"].startswith("n/a (not needed;")


def test_status_disabled_switch_exit_zero():
    proc = _cli("patches", "status", "--json", "--no-import", env={"VLGRPO_PATCHES": "off"})
    assert proc.returncode == 0
    doc = json.loads(proc.stdout)
    assert {r["status"] for r in doc["patches"]} == {"disabled"}
    assert doc["bootstrap"]["enabled"] is False


def test_table_lists_every_patch_with_upstream_refs():
    proc = _cli("patches", "table")
    assert proc.returncode == 0
    table = proc.stdout
    assert table == report.markdown_table() + "\n"
    lines = table.splitlines()
    assert lines[0] == "| id | what it fixes | upstream | applies when |"
    for record in registry.PATCHES:
        row = next(ln for ln in lines if ln.startswith(f"| `{record.id}` |"))
        assert row.count(" | ") >= 3
    assert "verl-project/verl#4401" in table and "PR #6131" in table and "#5571" in table


def test_install_sitecustomize_bad_directory_is_named(tmp_path):
    missing = tmp_path / "nope"
    proc = _cli("patches", "install-sitecustomize", "--site-packages", str(missing))
    assert proc.returncode == 2
    assert str(missing) in proc.stderr and "--site-packages" in proc.stderr


def test_unknown_subcommand():
    proc = _cli("patches", "frobnicate")
    assert proc.returncode == 2 and "invalid choice" in proc.stderr


def test_table_rewrites_only_its_block_and_check_names_a_stale_one(tmp_path):
    doc = tmp_path / "doc.md"
    stale = (
        "# t\n<!-- BEGIN GENERATED: patches -->\nSTALE-BODY\n<!-- END GENERATED: patches -->\ntail\n"
        "<!-- BEGIN GENERATED: patches-summary -->\nSTALE-BODY\n<!-- END GENERATED: patches-summary -->\n"
    )
    doc.write_text(stale)
    for summary in ((), ("--summary",)):
        proc = _cli("patches", "table", *summary, "--check", "--file", str(doc))
        assert proc.returncode == 1 and "out of date" in proc.stderr and "make docs-patches" in proc.stderr
        assert doc.read_text() == stale  # --check writes nothing
    assert _cli("patches", "table", "--file", str(doc)).returncode == 0
    assert _cli("patches", "table", "--summary", "--readme", str(doc)).returncode == 0  # --readme: the old name
    text = doc.read_text()
    assert text.startswith("# t\n") and "\ntail\n" in text and "STALE-BODY" not in text
    assert f"<!-- BEGIN GENERATED: patches -->\n{report.markdown_table()}\n<!-- END" in text
    assert f"<!-- BEGIN GENERATED: patches-summary -->\n{report.markdown_summary()}\n<!-- END" in text
    assert _cli("patches", "table", "--check", "--file", str(doc)).returncode == 0


def test_table_without_markers_or_file_is_a_named_error(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("no markers\n")
    proc = _cli("patches", "table", "--summary", "--file", str(doc))
    assert proc.returncode == 2 and "<!-- BEGIN GENERATED: patches-summary -->" in proc.stderr
    proc = _cli("patches", "table", "--check")
    assert proc.returncode == 2 and "--file" in proc.stderr
