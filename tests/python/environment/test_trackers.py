"""The experiment trackers' settings (vlgrpo.trackers): the rules, in process.

References: the variables verl 0.8.0's loggers read are taken from the installed verl's own source
(verl/utils/tracking.py, parsed with ast), the folder rule from vlgrpo.pathrule's documented semantics (modes set
here), and a key file's contents from files written here.
"""

from __future__ import annotations

import ast
import importlib.util
import os
from pathlib import Path

import pytest

from vlgrpo import environment, trackers

KEY = "swan0123456789abcdef0123456789"


def _verl_env_reads() -> set[str]:
    """Every constant name verl 0.8.0's tracking.py reads with os.environ.get / os.environ[...]."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("verl is not installed here")
    src = Path(list(spec.submodule_search_locations)[0]) / "utils" / "tracking.py"
    names = set()
    for node in ast.walk(ast.parse(src.read_text())):
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("os.environ.get", "os.getenv") and node.args:
            if isinstance(node.args[0], ast.Constant):
                names.add(node.args[0].value)
        if isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ":
            if isinstance(node.slice, ast.Constant):
                names.add(node.slice.value)
    return names


def test_every_variable_the_settings_become_is_one_verls_loggers_read():
    reads = _verl_env_reads()
    assert {"TENSORBOARD_DIR", "MLFLOW_TRACKING_URI", "SWANLAB_API_KEY", "SWANLAB_LOG_DIR", "SWANLAB_MODE"} <= reads
    assert {s.target for s in trackers.SETTINGS} <= reads


def test_the_registry_has_each_setting_for_both_recipes_and_ray_node_and_each_target_as_a_set_row():
    for s in trackers.SETTINGS:
        row = next(r for r in environment.rows() if r.kind == "setting" and r.name == s.name)
        assert {"fa", "vo", "node", "trackers"} <= set(row.owners), row
        for owner in ("fa", "vo", "node"):
            target = environment.env_row(s.target, owner)
            assert target is not None and target.kind == "set", (s.target, owner, target)
    # and the rows owned by `trackers` are exactly the table's (the entrypoints send those values)
    assert {r.name for r in environment.settings("trackers")} == set(trackers.BY_NAME)


@pytest.fixture()
def folder(tmp_path):
    d = tmp_path / "tb"
    d.mkdir(mode=0o700)
    return d


def test_a_selected_logger_without_its_setting_is_refused_naming_it(folder):
    plan = trackers.plan("console,tensorboard,mlflow", {})
    assert [p[0] for p in plan.problems] == ["VLGRPO_TENSORBOARD_DIR", "VLGRPO_MLFLOW_TRACKING_URI"]
    why, fix = plan.problems[0][1:]
    assert "VLGRPO_LOGGER has tensorboard" in why and "throw-away working folder" in why
    assert fix.startswith("set VLGRPO_TENSORBOARD_DIR") and "drop tensorboard from VLGRPO_LOGGER" in fix
    assert plan.exports == {}
    ok = trackers.plan("[console,tensorboard]", {"VLGRPO_TENSORBOARD_DIR": str(folder)})
    assert ok.problems == [] and ok.exports == {"TENSORBOARD_DIR": str(folder)}


def test_a_setting_of_a_logger_not_selected_is_a_warning_and_not_exported(folder):
    plan = trackers.plan("console,wandb", {"VLGRPO_TENSORBOARD_DIR": str(folder), "WANDB_MODE": "offline"})
    assert plan.problems == [] and plan.exports == {}
    assert plan.notes == ["warning: VLGRPO_TENSORBOARD_DIR is set but VLGRPO_LOGGER has no tensorboard: it is not used"]
    # ray-node.sh does not know the recipe's loggers: every given setting is carried
    node = trackers.plan(
        "", {"VLGRPO_TENSORBOARD_DIR": str(folder), "VLGRPO_MLFLOW_TRACKING_URI": "http://m:5000"}, owner="node"
    )
    assert node.notes == [] and node.exports == {"TENSORBOARD_DIR": str(folder), "MLFLOW_TRACKING_URI": "http://m:5000"}


@pytest.mark.parametrize(
    "mode, passes", [(0o700, True), (0o755, True), (0o775, False), (0o777, False), (0o1777, False)]
)
def test_a_tracker_folder_must_pass_the_path_rule(tmp_path, mode, passes):
    d = tmp_path / "tb"
    d.mkdir()
    d.chmod(mode)
    plan = trackers.plan("tensorboard", {"VLGRPO_TENSORBOARD_DIR": str(d)})
    assert (plan.problems == []) is passes, plan.problems
    if not passes:
        assert plan.problems[0][0] == "VLGRPO_TENSORBOARD_DIR" and f"mode {mode:04o}" in plan.problems[0][1]


def test_a_link_to_a_folder_others_can_write_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    (tmp_path / "link").symlink_to(shared)
    plan = trackers.plan(
        "swanlab", {"VLGRPO_SWANLAB_LOG_DIR": str(tmp_path / "link"), "VLGRPO_SWANLAB_MODE": "offline"}
    )
    assert [p[0] for p in plan.problems] == ["VLGRPO_SWANLAB_LOG_DIR"] and "every user" in plan.problems[0][1]


def test_an_mlflow_file_store_must_pass_the_path_rule(tmp_path, folder):
    assert trackers.plan("mlflow", {"VLGRPO_MLFLOW_TRACKING_URI": f"file://{folder}"}).exports == {
        "MLFLOW_TRACKING_URI": f"file://{folder}"
    }
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    plan = trackers.plan("mlflow", {"VLGRPO_MLFLOW_TRACKING_URI": f"file:{open_dir}"})
    assert plan.problems and "the file store" in plan.problems[0][1]
    missing = trackers.plan("mlflow", {"VLGRPO_MLFLOW_TRACKING_URI": f"file://{tmp_path}/missing"})
    assert missing.problems and "does not exist" in missing.problems[0][1]


URIS = [
    ("http://mlflow:5000", True),
    ("https://mlflow.example.com/prefix/a-b_c.d", True),
    ("http://10.0.0.1", True),
    ("file:///mlruns", True),
    ("file:/mlruns", True),
    ("https://user:pw@mlflow", False),
    ("http://tok@mlflow", False),
    ("http://mlflow:0", False),
    ("http://mlflow:65536", False),
    ("http://010.0.0.1:5000", False),
    ("http://mlflow/?x=1", False),
    ("http://mlflow/#f", False),
    ("ftp://mlflow", False),
    ("sqlite:///a.db", False),
    ("databricks", False),
    ("file:relative", False),
    ("file://host/x", False),
    ("http://", False),
    ("http://ml flow", False),
    ("https://mlflow/${oc.env:X}", False),
]


@pytest.mark.parametrize("uri, ok", URIS)
def test_the_uri_type_takes_plain_http_urls_and_file_paths_only(uri, ok):
    row = environment.Row(["VLGRPO_MLFLOW_TRACKING_URI", "fa", "setting", "uri", "-", "-", "-", "case", "-"])
    try:
        environment.validate(row, uri)
        got = True
    except ValueError as exc:
        got = False
        if "@" in uri:
            assert "credentials" in str(exc) and "pw" not in str(exc)
    assert got is ok


def test_the_swanlab_key_file_is_read_and_checked_never_shown(tmp_path):
    good = tmp_path / "good"
    good.write_text(KEY + "\n")
    plan = trackers.plan("swanlab", {"VLGRPO_SWANLAB_API_KEY_FILE": str(good)})
    assert plan.problems == [] and plan.exports == {"SWANLAB_API_KEY": KEY}
    cases = {
        "two": ("a" * 30 + "\nsecret-ish-line\n", "more than one line"),
        "bad": ("not a key; secret-ish\n", "does not hold"),
        "big": ("a" * 5000, "larger than 4 KiB"),
    }
    for name, (text, why) in cases.items():
        (tmp_path / name).write_text(text)
        p = trackers.plan("swanlab", {"VLGRPO_SWANLAB_API_KEY_FILE": str(tmp_path / name)})
        assert p.exports == {} and p.problems[0][0] == "VLGRPO_SWANLAB_API_KEY_FILE" and why in p.problems[0][1], p
        assert "secret-ish" not in repr(p)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    p = trackers.plan("swanlab", {"VLGRPO_SWANLAB_API_KEY_FILE": str(fifo)})  # returns at once: never blocks
    assert "not a regular file" in p.problems[0][1]


def test_swanlab_in_cloud_mode_needs_the_key_a_dry_run_only_warns():
    plan = trackers.plan("console,swanlab", {})
    assert [p[0] for p in plan.problems] == ["VLGRPO_SWANLAB_API_KEY_FILE"] and "cloud mode" in plan.problems[0][1]
    dry = trackers.plan("console,swanlab", {}, dry_run=True)
    assert dry.problems == [] and dry.notes[0].startswith("warning: VLGRPO_LOGGER has swanlab in cloud mode")
    for mode in trackers.SWANLAB_KEYLESS:
        assert trackers.plan("swanlab", {"VLGRPO_SWANLAB_MODE": mode}).problems == []


def test_node_problems_name_what_a_node_lacks_and_never_carry_a_secret(folder):
    loggers = "console,wandb,tensorboard,mlflow"
    launch = {"TENSORBOARD_DIR": str(folder), "MLFLOW_TRACKING_URI": "http://m:5000", "WANDB_API_KEY": KEY}
    full = trackers.node_view(dict(launch))
    assert full["WANDB_API_KEY"] is True and KEY not in repr(full)
    assert trackers.node_problems(loggers, full, launch) == []
    bare = trackers.node_view({})
    got = trackers.node_problems(loggers, bare, launch)
    assert [v for v, _ in got] == ["WANDB_API_KEY", "TENSORBOARD_DIR", "MLFLOW_TRACKING_URI"]
    assert "VLGRPO_TENSORBOARD_DIR" in got[1][1] and "WANDB_API_KEY_FILE" in got[0][1]
    # a node in W&B offline mode needs no key; a node with another folder than the launch's is named
    other = trackers.node_view(
        {"WANDB_MODE": "offline", "TENSORBOARD_DIR": "/elsewhere", "MLFLOW_TRACKING_URI": "http://m:5000"}
    )
    got = trackers.node_problems(loggers, other, launch)
    assert [v for v, _ in got] == ["TENSORBOARD_DIR"] and "differs from the launch's" in got[0][1]
    assert "/elsewhere" not in got[0][1]
    assert trackers.node_problems("console", bare, launch) == []


def test_the_command_line_prints_one_record_per_line_and_exits_2_on_a_problem(folder, capsys, monkeypatch):
    import io
    import sys

    data = f"VLGRPO_TENSORBOARD_DIR={folder}\0VLGRPO_MLFLOW_TRACKING_URI=http://m:5000\0".encode()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert environment.main(["trackers", "--owner=fa", "--loggers=[console,tensorboard]"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "note\twarning: VLGRPO_MLFLOW_TRACKING_URI is set but VLGRPO_LOGGER has no mlflow: it is not used",
        f"export\tTENSORBOARD_DIR\t{folder}",
    ]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    assert environment.main(["trackers", "--owner=vo", "--loggers=mlflow"]) == 2
    assert capsys.readouterr().out.startswith("problem\tVLGRPO_MLFLOW_TRACKING_URI\tunset")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand a file to another uid")
def test_a_swanlab_key_file_another_user_can_replace_is_refused(tmp_path):
    # whoever can replace the key file sends the run's metrics to their own account (or a token of the run's
    # to the tracker): the file and the folders above it pass the one path rule
    tmp_path.chmod(0o755)
    theirs = tmp_path / "theirs"
    theirs.write_text(KEY + "\n")
    os.chown(theirs, 65534, 65534)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    (shared / "key").write_text(KEY + "\n")
    for path, why in ((theirs, "owned by"), (shared / "key", "can be written by every user")):
        p = trackers.plan("swanlab", {"VLGRPO_SWANLAB_API_KEY_FILE": str(path)})
        assert p.exports == {} and why in p.problems[0][1], p


@pytest.mark.parametrize("path", ["/proc/self/cwd", "/proc/self/root/tmp", "/dev/shm", "/sys/kernel"])
def test_kernel_and_device_folders_are_not_tracker_folders(path):
    p = trackers.plan("tensorboard", {"VLGRPO_TENSORBOARD_DIR": path})
    assert p.exports == {} and "kernel or device" in p.problems[0][1], p
    p = trackers.plan("swanlab", {"VLGRPO_SWANLAB_API_KEY_FILE": "/proc/self/environ"})
    assert p.exports == {} and "kernel or device file" in p.problems[0][1], p
