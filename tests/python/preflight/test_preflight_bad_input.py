"""Bad user input is a finding (exit 2) naming the key and the fix -- never an internal error (exit 1).

Each case here once ended in a traceback or passed silently (reviewer's attack list, 2026-11-30). Expected
values come from what Hydra composes (it accepts any value for these keys, `key=null` included) and from what
verl 0.8.0 then does with it (``verl/utils/dataset/rl_dataset.py``: rows without images keep the literal text
``<image>``; entries not ending in .parquet/.json/.jsonl raise 'Unsupported file format'; ``datasets`` expands
globs in ``data_files``).
"""

from __future__ import annotations

import json
import os

import pytest
from preflight_helpers import MODEL_30B, set_override

from vlgrpo.preflight import run_preflight
from vlgrpo.preflight.report import Report

EK = "actor_rollout_ref.rollout.engine_kwargs.vllm.max_model_len"


def _errors(report, code):
    return [f for f in report.findings if f.code == code and f.severity == "error"]


BAD_VALUES = [
    ("data.max_prompt_length", "null"),
    ("data.max_response_length", "2048.5"),
    ("trainer.nnodes", "null"),
    ("trainer.n_gpus_per_node", ""),  # `key=` composes to ''
    ("rollout.n_gpus_per_node", "0"),
    ("rollout.nnodes", "[1,2]"),
    ("actor_rollout_ref.rollout.n", "abc"),
    ("+" + EK, "abc"),
    ("data.image_key", "null"),  # verl would silently train without the images
    ("data.train_files", "null"),
    ("actor_rollout_ref.model.path", "''"),
]


def test_wrong_value_types_are_findings_not_a_crash(fixed_argv):
    """Every key in one launch (the check reports them all at once): each at its own argv position."""
    argv = list(fixed_argv)
    for key, _ in BAD_VALUES:
        argv = set_override(argv, key.lstrip("+"), None)
    argv += [f"{key}={value}" for key, value in BAD_VALUES]
    report = run_preflight(argv, check_data=False, model_path=MODEL_30B, devices_per_node=16)
    assert report.internal_error is None, report.internal_error
    assert report.exit_code == 2
    for key, value in BAD_VALUES:
        pos = argv.index(f"{key}={value}")
        hits = [f for f in report.errors if f.where.position == pos]
        assert hits and hits[0].where.key == key.lstrip("+") and hits[0].fix, (key, report.codes())


@pytest.mark.parametrize("value", ["abc", "[1,2]"])
def test_wrong_number_alone_is_a_finding_not_a_crash(fixed_argv, value):
    # alone, the schema pass reports it (number-as-string) and the rules must not then crash on it
    argv = set_override(fixed_argv, "data.max_prompt_length", value)
    report = run_preflight(argv, check_data=False, model_path=MODEL_30B, devices_per_node=16)
    assert report.internal_error is None, report.internal_error
    assert [f.where.key for f in report.errors] == ["data.max_prompt_length"]


@pytest.mark.parametrize(
    "value, says", [("${data.nope}", "data.nope"), ("${oc.env:VLGRPO_SURELY_UNSET_X}", "VLGRPO_SURELY_UNSET_X")]
)
def test_unresolvable_interpolation_is_a_finding(fixed_argv, monkeypatch, value, says):
    monkeypatch.delenv("VLGRPO_SURELY_UNSET_X", raising=False)
    argv = set_override(fixed_argv, "data.max_response_length", value)
    report = run_preflight(argv, check_data=False, model_path=MODEL_30B, devices_per_node=16)
    assert report.internal_error is None, report.internal_error
    (f,) = _errors(report, "verl.interpolation")
    assert says in f.what


def test_group_override_with_package_is_accepted_and_a_bad_one_is_named(fixed_argv):
    # Hydra composes `actor@actor_rollout_ref.actor=dp_actor` (the defaults-list entry of ppo_trainer.yaml)
    ok = run_preflight(
        fixed_argv + ["actor@actor_rollout_ref.actor=dp_actor"],
        check_data=False,
        model_path=MODEL_30B,
        devices_per_node=16,
    )
    assert [f.line() for f in ok.errors] == []
    # a bad option of one group is pinned on that override only, not on every group override
    argv = fixed_argv + ["actor@actor_rollout_ref.actor=nope", "model_engine=dp"]
    bad = run_preflight(argv, check_data=False, model_path=MODEL_30B, devices_per_node=16)
    (f,) = _errors(bad, "schema.bad-group")
    assert f.where.position == len(argv) - 2 and "dp_actor" in f.what  # Hydra lists the options


def test_bool_word_fix_is_a_real_boolean(fixed_argv):
    argv = set_override(fixed_argv, "data.filter_overlong_prompts", "yes")
    report = run_preflight(argv, check_data=False, model_path=MODEL_30B, devices_per_node=16)
    (f,) = _errors(report, "schema.bool-as-string")
    assert "data.filter_overlong_prompts=True" in f.fix and "=yes" not in f.fix


def test_config_json_not_an_object_and_model_path_a_file(model_copy, tmp_path):
    from vlgrpo.preflight.model_dir import check_model_dir

    with open(os.path.join(model_copy, "config.json"), "w", encoding="utf-8") as fh:
        json.dump([1, 2], fh)
    report = Report()
    info = check_model_dir(model_copy, report)
    assert info["clean"] is False and "model.bad-json" in report.codes()
    (tmp_path / "weights.bin").write_text("x")
    report = Report()
    check_model_dir(str(tmp_path / "weights.bin"), report)
    (f,) = report.findings
    assert f.code == "model.missing" and "is a file" in f.what


def _rows(sample_data, n=3):
    import pyarrow.parquet as pq

    return pq.read_table(os.path.join(sample_data, "train.parquet")).to_pylist()[:n]


def _write(path, rows, drop=()):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from vlgrpo.data.geo3k import arrow_schema

    schema = arrow_schema()
    for name in drop:
        schema = schema.remove(schema.get_field_index(name))
    pq.write_table(
        pa.Table.from_pylist([{k: v for k, v in r.items() if k not in drop} for r in rows], schema=schema), path
    )
    return path


def test_image_placeholder_without_image_and_empty_file(fixed_argv, sample_data, tmp_path):
    rows = _rows(sample_data)
    rows[1]["images"] = []  # `<image>` stays in the prompt
    train = _write(str(tmp_path / "train.parquet"), rows)
    val = _write(str(tmp_path / "val.parquet"), [])
    argv = set_override(set_override(fixed_argv, "data.train_files", train), "data.val_files", val)
    report = run_preflight(argv, devices_per_node=16)
    assert report.internal_error is None
    (row,) = [f for f in _errors(report, "data.row") if f.where.file == train]
    assert row.where.row == 1 and "<image>" in row.what
    (empty,) = _errors(report, "data.empty")
    assert empty.where.file == val and empty.where.position == argv.index(f"data.val_files={val}")


def test_missing_images_column_folder_and_glob(fixed_argv, sample_data, tmp_path):
    train = _write(str(tmp_path / "noimages.parquet"), _rows(sample_data), drop=("images",))
    argv = set_override(set_override(fixed_argv, "data.train_files", train), "data.val_files", str(tmp_path))
    report = run_preflight(argv, devices_per_node=16)
    (col,) = [f for f in _errors(report, "data.columns") if f.where.file == train]
    assert "'images'" in col.what and col.where.key == "data.image_key"
    # a data.image_key override naming an absent column: the finding points at that override
    named = set_override(argv, "data.image_key", "pictures")
    (col,) = [f for f in _errors(run_preflight(named, devices_per_node=16), "data.columns") if f.where.file == train]
    assert "'pictures'" in col.what and col.where.position == named.index("data.image_key=pictures")
    (folder,) = _errors(report, "data.missing")
    assert "is a folder" in folder.what
    # a glob is what datasets.load_dataset expands: the matched files are checked, not refused
    glob_argv = set_override(fixed_argv, "data.val_files", os.path.join(sample_data, "te*.parquet"))
    ok = run_preflight(glob_argv, devices_per_node=16)
    assert [f.line() for f in ok.errors] == [] and ok.summary["data"]["val"]["rows"] == 15


def test_cli_bad_value_exit_2_no_traceback(fixed_argv, tmp_path, capsys):
    from vlgrpo.preflight import cli

    path = tmp_path / "argv"
    path.write_text("\n".join(set_override(fixed_argv, "data.max_prompt_length", "null")) + "\n")
    assert cli.main(["--argv-file", str(path), "--no-data", "--devices-per-node", "16"]) == 2
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err and "[schema.value-type]" in out.out


def test_hydra_settings_checked_backend_pinned_idle_devices_warned(fixed_argv):
    backend = "actor_rollout_ref.rollout.checkpoint_engine.backend"
    argv = set_override(fixed_argv, backend, "hccl") + ["hydra.nope=1", "hydra.run.dir=/tmp/vlgrpo-run"]
    report = run_preflight(argv, check_data=False, model_path=MODEL_30B, devices_per_node=32)
    # Hydra refuses an unknown hydra.* key at start-up (checked: compose raises "Could not override 'hydra.nope'")
    (h,) = [f for f in report.errors if f.where.override == "hydra.nope=1"]
    assert h.code == "schema.unknown-key" and h.where.position == len(argv) - 2
    assert not [f for f in report.errors if f.where.override == "hydra.run.dir=/tmp/vlgrpo-run"]
    (b,) = _errors(report, "rules.checkpoint-backend")
    assert b.where.position == argv.index(f"{backend}=hccl")
    idle = sorted(f.where.key for f in report.warnings if f.code == "rules.devices-unused")
    assert idle == ["rollout.n_gpus_per_node", "trainer.n_gpus_per_node"]  # 16 of 32 each


def test_cli_non_utf8_argv_file_and_zero_devices_are_exit_2(tmp_path, capsys):
    from vlgrpo.preflight import cli

    path = tmp_path / "argv"
    path.write_bytes(b"python3\n-m\n\xff\xfe\n")
    assert cli.main(["--argv-file", str(path)]) == 2  # was a UnicodeDecodeError traceback (exit 1)
    assert "not UTF-8" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:  # argparse's usage error: exit 2 before anything runs
        cli.main(["--devices-per-node", "0", "--", "data.max_prompt_length=1"])
    assert exc.value.code == 2 and "--devices-per-node" in capsys.readouterr().err


def test_key_set_after_its_deletion_and_group_path_are_explained(fixed_argv):
    argv = set_override(fixed_argv, "data.truncation", None)
    argv += ["~data.truncation", "data.truncation=error", "actor_rollout_ref/actor=dp_actor"]
    report = run_preflight(argv, check_data=False, model_path=MODEL_30B, devices_per_node=16)
    (gone,) = _errors(report, "schema.unknown-key")  # was: "does not exist (did you mean data.truncation?)"
    assert gone.where.position == len(argv) - 2 and "deleted by an earlier '~data.truncation'" in gone.what
    (group,) = _errors(report, "schema.bad-group")
    assert group.where.position == len(argv) - 1 and "actor@actor_rollout_ref.actor=dp_actor" in group.fix


def test_b09_rollout_response_length_override_needs_the_room_too(fixed_argv):
    # verl 0.8.0 vllm_async_server.py: max_tokens = min(rollout.response_length, ...), capped by max_model_len
    # - prompt; so rollout.response_length=16384 with max_model_len 10240 is silently clamped
    argv = set_override(fixed_argv, "actor_rollout_ref.rollout.max_model_len", "10240")
    argv += ["actor_rollout_ref.rollout.response_length=16384"]
    report = run_preflight(argv, check_data=False, model_path=MODEL_30B, devices_per_node=16)
    (f,) = _errors(report, "rules.max-model-len")
    assert "= 18432" in f.what and "response_length=16384" in f.what  # 2048 + 16384
    assert f.where.position == argv.index("actor_rollout_ref.rollout.max_model_len=10240")
