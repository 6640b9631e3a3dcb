"""The registry's pass types (PYTHONWARNINGS, BASH_ENV, RAY_JOB_CONFIG_JSON_ENV_VAR, TMPDIR, HOME, PYTHONPATH, cache
folders): one implementation, vlgrpo.environment.check_value, for the inherited environment (the entrypoints'
``check-values``) and for a Ray job's runtime_env env_vars (attack review findings 3, 4, 5, 7)."""

import json
import os
import subprocess
import sys

import pytest

from vlgrpo import environment


#: the recipes build these for their children (set rows); ray-node.sh still passes them, checked
BUILT = frozenset(("HOME", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"))


def _row(name):
    row = environment.env_row(name, "node" if name in BUILT else "fa")
    assert row is not None and row.type, name
    return row


@pytest.mark.parametrize(
    "value",
    [
        "ignore::this.X",
        "all:0:antigravity.x:0:0",
        "ignore:: this.X",
        "default,ignore::os.X",
        "ignore\n,ignore::this.X",
        "ignore:x:a.b:c:1",
    ],
)
def test_warnings_refuses_what_cpython_would_import(value, tmp_path):
    assert environment.check_value(_row("PYTHONWARNINGS"), value)


@pytest.mark.parametrize(
    "value", ["ignore::DeprecationWarning", "default::UserWarning,ignore", "once", "", "ignore:some.text.with.dots"]
)
def test_warnings_passes_builtin_categories(value):
    assert environment.check_value(_row("PYTHONWARNINGS"), value) == ""


def test_warnings_rule_matches_the_interpreter(tmp_path):
    """Independent reference: run CPython with each value and a canary module on its path; the check refuses
    exactly the values for which the interpreter imported it."""
    (tmp_path / "vgcanary.py").write_text(
        "import os\nopen(os.environ['CANARY'], 'a').write('x')\nclass W(Warning): pass\n"
    )
    for value in [
        "ignore::vgcanary.W",
        "ignore:: vgcanary.W ",
        "ignore,ignore::vgcanary.W",
        "ignore::UserWarning",
        "ignore:vgcanary.W",
        "ignore::W:vgcanary",
    ]:
        canary = tmp_path / "ran"
        if canary.exists():
            canary.unlink()
        env = dict(os.environ, PYTHONWARNINGS=value, PYTHONPATH=str(tmp_path), CANARY=str(canary))
        subprocess.run([sys.executable, "-c", "pass"], env=env, capture_output=True, check=True)
        assert bool(environment.check_value(_row("PYTHONWARNINGS"), value)) == canary.exists(), value


@pytest.mark.parametrize(
    "name, value",
    [
        ("PYTHONWARNINGS", "ignore\r"),
        ("BASH_ENV", "/opt/vlgrpo/image/cann-env.sh\n"),
        ("RAY_JOB_CONFIG_JSON_ENV_VAR", "{}\n"),
        ("TMPDIR", "/tmp\t"),
        ("HOME", "/root\x7f"),
        ("PYTHONPATH", "/usr/lib\n"),
    ],
)
def test_control_characters_refused_in_every_checked_value(name, value):
    assert "control character" in environment.check_value(_row(name), value)


def test_bash_env_only_the_image_file():
    row = _row("BASH_ENV")
    assert environment.check_value(row, "/opt/vlgrpo/image/cann-env.sh") == ""
    assert "names a file every bash" in environment.check_value(row, "/ckpt/evil.sh")


def test_folders_in_the_checkpoint_folder_or_writable_by_all_are_refused(tmp_path):
    ck = tmp_path / "ckpt"
    (ck / "tmp").mkdir(parents=True)
    (tmp_path / "own").mkdir()
    (tmp_path / "open").mkdir(mode=0o777)
    os.chmod(tmp_path / "open", 0o777)
    (tmp_path / "sticky").mkdir()
    os.chmod(tmp_path / "sticky", 0o1777)
    os.symlink(ck / "tmp", tmp_path / "link")
    protect = (os.path.realpath(ck),)
    for name in (
        "TMPDIR",
        "HOME",
        "TRITON_CACHE_DIR",
        "TORCHINDUCTOR_CACHE_DIR",
        "TRITON_HOME",
        "VERL_FILE_LOGGER_ROOT",
    ):
        row = _row(name)
        check = lambda v, r=row: environment.check_value(r, v, protect=protect)
        assert "checkpoint folder" in check(str(ck / "tmp")), name
        assert "checkpoint folder" in check(str(tmp_path / "link")), name
        assert "checkpoint folder" in check(str(ck)), name
        assert "every user can write" in check(str(tmp_path / "open")), name
        assert check(str(tmp_path / "own")) == "", name
        if name == "TMPDIR":  # a root-owned sticky folder like /tmp (the tests run as root)
            assert check(str(tmp_path / "sticky")) == "", name
        else:  # the one path rule: a sticky folder only above the path, never the path itself
            assert "can be written by every user (mode 1777)" in check(str(tmp_path / "sticky")), name
    assert "not an existing folder" in environment.check_value(_row("TMPDIR"), "/nonexistent")
    assert environment.check_value(_row("HOME"), "/nonexistent") == ""  # HOME of a system user
    path = _row("PYTHONPATH")
    assert environment.check_value(path, f"{tmp_path / 'own'}:/usr/lib", protect=protect) == ""
    for bad in (f"{tmp_path / 'own'}:", f":{tmp_path / 'own'}", f"{tmp_path / 'own'}::/usr/lib"):
        assert "empty entry" in environment.check_value(path, bad, protect=protect), bad
    assert "checkpoint folder" in environment.check_value(path, f"/usr/lib:{ck}/x", protect=protect)


def test_folders_another_user_controls_are_refused_for_code_and_home_paths(tmp_path):
    """Attack review: PATH, LD_LIBRARY_PATH, PYTHONPATH, HOME and the caches accepted /tmp itself and a 0755 folder
    of another uid. The one path rule applies to every entry (an entry that does not exist: to the folder that would
    hold it)."""
    other = tmp_path / "other"
    other.mkdir()
    os.chown(other, 65534, 65534)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "bin").mkdir()
    inside = tmp_path / "rootsub"
    inside.mkdir()
    (inside / "sub").mkdir()
    os.chown(inside, 65534, 65534)  # a folder of mine inside another user's folder: they can rename it
    for name in ("PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "HOME", "TRITON_CACHE_DIR"):
        row = _row(name)
        assert "owned by uid 65534" in environment.check_value(row, str(other)), name
        assert "owned by uid 65534" in environment.check_value(row, str(inside / "sub")), name
        assert "can be written by every user (mode 1777)" in environment.check_value(row, "/tmp"), name
        assert "another user could create it" in environment.check_value(row, "/tmp/not-there-yet"), name
        assert environment.check_value(row, str(tmp_path / "mine" / "bin")) == "", name
        assert environment.check_value(row, str(tmp_path / "mine" / "later")) == "", name
    # a file entry of a path-shaped name (a program or library named by a *_PATH variable): its owner too
    prog = tmp_path / "mine" / "ptxas"
    prog.write_text("")
    os.chown(prog, 65534, 65534)
    assert "owned by uid 65534" in environment.check_value(environment.UNLISTED, str(prog), name="TRITON_PTXAS_PATH")


@pytest.mark.parametrize(
    "env_vars, fragment",
    [
        ({"PYTHONWARNINGS": "ignore::this.X"}, "dotted warning category"),
        ({"BASH_ENV": "/ckpt/evil.sh"}, "names a file every bash"),
        ({"PYTHONWARNINGS": "ignore\n,ignore::this.X"}, "control character"),
        ({"NCCL_DEBUG": 1}, "not a string"),
        ({"RAY_JOB_CONFIG_JSON_ENV_VAR": json.dumps({"runtime_env": {"pip": ["x"]}})}, "'pip'"),
        ({"HOME": "/root"}, "the launch sets it itself"),
        ({"TRITON_CACHE_DIR": "/root/.triton"}, "the launch sets it itself"),
        ({"PYTHONSAFEPATH": "0"}, "the launch sets it to '1'"),
    ],
)
def test_ray_job_env_vars_get_the_row_type_checks(env_vars, fragment, tmp_path):
    ck = os.path.realpath(tmp_path)
    env_vars = {k: v.replace("@CKPT@", ck) if isinstance(v, str) else v for k, v in env_vars.items()}
    problems = environment.check_ray_job_config(json.dumps({"runtime_env": {"env_vars": env_vars}}), protect=(ck,))
    assert problems and any(fragment in p[1] for p in problems), problems


def test_check_values_names_each_variable_that_fails_its_row():
    records = [
        "PYTHONWARNINGS=ignore::this.X",
        "TMPDIR=/nonexistent",
        "NCCL_DEBUG=WARN",
        "BASH_ENV=/opt/vlgrpo/image/cann-env.sh",
    ]
    assert [p[0] for p in environment.check_values(records, "fa")] == ["PYTHONWARNINGS", "TMPDIR"]
    assert environment.check_values(["PYTHONWARNINGS=ignore::DeprecationWarning"]) == []
    assert [p[0] for p in environment.check_values(["PYTHONWARNINGS=error"])] == ["PYTHONWARNINGS"]


def test_every_pass_type_in_the_registry_is_one_check_value_knows():
    for row in environment.rows():
        if row.kind in ("pass", "pass-on-request") and row.type:
            assert row.type in environment.PASS_TYPES, row
            environment.check_value(row, "")  # raises for an unknown type


@pytest.mark.parametrize(
    "name, value, ok",
    [
        # Ray 2.48.0's core settings (src/ray/common/ray_config_def.h) a slow or large cluster tunes: numbers, bools
        ("RAY_raylet_start_wait_time_s", "120", True),
        ("RAY_gcs_rpc_server_reconnect_timeout_s", "300", True),
        ("RAY_grpc_keepalive_time_ms", "10000", True),
        ("RAY_task_oom_retries", "3", True),
        ("RAY_object_store_full_delay_ms", "0.5", True),
        ("RAY_record_ref_creation_sites", "true", True),
        ("RAY_worker_register_timeout_seconds", "-1", True),
        # core settings whose text value reaches code or storage: modules imported in every worker, spilling
        ("RAY_preload_python_modules", "antigravity", False),
        ("RAY_object_spilling_config", '{"type":"smart_open","params":{"uri":"s3://x"}}', False),
        ("RAY_raylet_start_wait_time_s", "120; touch /tmp/x", False),
        ("RAY_raylet_start_wait_time_s", "1e9", False),
        ("RAY_raylet_start_wait_time_s", "", False),
        ("RAY_raylet_start_wait_time_s", "\u0663", False),  # ARABIC-INDIC DIGIT THREE: str.isdigit() is True
        # Ray's upper-case names are read as folders, hosts and switches, never by ray_config_def.h
        ("RAY_LOG_DIR", "5", False),
        ("RAY_SESSION_DIR", "/tmp/x", False),
        ("RAY_Debug", "1", False),
    ],
)
def test_an_unlisted_ray_name_passes_on_request_only_as_a_numeric_core_setting(name, value, ok):
    row = environment.env_row(name, "fa")
    assert (row.name, row.kind, row.type) == ("RAY_*", "pass-on-request", "rayconfig")
    why = environment.check_value(row, value, name=name)
    assert (why == "") is ok, why
    # inherited without VLGRPO_PASS_ENV it never reaches a child: the row is pass-on-request
    assert environment.check_values([f"{name}={value}"], "fa", (name,)) == ([] if ok else [(name, why, row.fix)])


def test_cpython_variables_that_move_the_import_system_are_refused_or_dropped():
    """CPython 3.11's documented PYTHON* variables (Doc/using/cmdline.rst) that point the import system, its .pyc
    files or its paths at a folder: refused; and any PYTHON* name without a row is dropped, not passable."""
    for name in ("PYTHONHOME", "PYTHONUSERBASE", "PYTHONPYCACHEPREFIX", "PYTHONPLATLIBDIR", "PYTHONSTARTUP"):
        assert environment.env_row(name, "fa").kind == "refused", name
    for name in ("PYTHONEXECUTABLE", "PYTHONCASEOK", "PYTHONSOMETHINGNEW"):
        assert environment.env_row(name, "fa").kind == "drop", name
    assert environment.env_row("PYTHONPATH", "fa").kind == "pass-on-request"


# ---- the pattern rows (NCCL_*, HCCL_*, ASCEND_*, ...): what a name does, read from its words ------------------

# names the attack review passed through a pattern row, and new ones of the same kind in the pinned libraries
# (NCCL 2.27's plugin names, its verbs library, the bootstrap root, the RAS listener; CANN's operator folders)
LOADS = [
    "NCCL_ENV_PLUGIN",
    "NCCL_GIN_PLUGIN",
    "NCCL_RMA_PLUGIN",
    "NCCL_IBVERBS_LIB",
    "NCCL_NET_SO",
    "HCCL_PLUGIN_LIB",
    "TORCH_NCCL_PLUGIN",
    "VLLM_ASCEND_SOME_LIB",
    "NVIDIA_NCCL_PLUGIN",
]
PEERS = ["NCCL_COMM_ID", "NCCL_RAS_ADDR", "HCCL_SERVER_ADDR", "ASCEND_PROFILER_URL"]
PATHS = [
    "ASCEND_OPP_PATH",
    "ASCEND_AICPU_PATH",
    "ASCEND_HOME_PATH",
    "ASCEND_TOOLKIT_HOME",
    "HCCL_WHITELIST_FILE",
    "NCCL_SOME_DIR",
    "ASCEND_CACHE_PATH",
]
# settings of the same libraries whose words could be mistaken for a file or a peer: they pass as given
PLAIN = {
    "NCCL_SOCKET_IFNAME": "eth0",
    "NCCL_IB_HCA": "mlx5_0",
    "NCCL_DEBUG": "INFO",
    "HCCL_IF_IP": "10.0.0.2",
    "HCCL_CONNECT_TIMEOUT": "1800",
    "NCCL_PROXY_APPEND_BATCH_SIZE": "16",
    "NCCL_GRAPH_MIXING_SUPPORT": "0",
    "HCCL_HOST_SOCKET_PORT_RANGE": "60000-60050",
    "ASCEND_MODULE_LOG_LEVEL": "SLOG=1",
    "ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3",
    "NVIDIA_VISIBLE_DEVICES": "all",
    "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
    "VLLM_ASCEND_ENABLE_NZ": "0",
    "NCCL_IB_DISABLE": "1",
}


@pytest.mark.parametrize("name", LOADS + PEERS)
def test_a_library_or_peer_under_a_pattern_passes_only_when_named(name):
    row = environment.env_row(name, "fa")
    assert "*" in row.name and row.type == "shaped", row
    why = environment.check_values([f"{name}=x"], owner="fa")
    assert [n for n, _, _ in why] == [name]
    assert "VLGRPO_PASS_ENV" in why[0][1] and "VLGRPO_PASS_ENV" in why[0][2]
    assert environment.check_values([f"{name}=x"], owner="fa", pass_env=(name,)) == []


@pytest.mark.parametrize("name", PATHS)
def test_a_path_under_a_pattern_gets_the_folder_rules(name, tmp_path):
    good = tmp_path / "opp"
    good.mkdir()
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    planted = good / "whitelist"
    planted.write_text("x")
    planted.chmod(0o666)
    ok = environment.check_values([f"{name}={good}"], owner="fa", protect=(str(tmp_path / "ckpt"),))
    assert ok == []
    for value, words in [
        (str(shared), "every user can write"),
        ("opp", "not an absolute path"),
        (f":{good}", "working directory"),
        (str(tmp_path / "ckpt" / "x"), "checkpoint folder"),
        (str(planted), "a file every user can write"),
    ]:
        why = environment.check_values([f"{name}={value}"], owner="fa", protect=(str(tmp_path / "ckpt"),))
        assert len(why) == 1 and words in why[0][1], (value, why)


@pytest.mark.parametrize("name, value", sorted(PLAIN.items()))
def test_the_libraries_plain_settings_pass(name, value):
    assert environment.check_values([f"{name}={value}"], owner="fa") == []


def test_an_exact_row_wins_over_the_shape():
    # NCCL_NET_PLUGIN has its own pass-on-request row (no value check once named)
    row = environment.env_row("NCCL_NET_PLUGIN", "fa")
    assert row.name == "NCCL_NET_PLUGIN" and row.kind == "pass-on-request"


def test_an_empty_entry_is_the_working_directory_for_the_loader_and_the_shell(tmp_path):
    """Independent reference for the ``dirs`` rule of LD_LIBRARY_PATH and PATH: glibc's loader tries a library
    name relative to the working directory for an empty LD_LIBRARY_PATH entry, and sh runs a program of the
    working directory for an empty PATH entry; the check refuses both values."""
    out = subprocess.run(
        ["/bin/true"],
        env={"LD_LIBRARY_PATH": "/nonexistent-vg:", "LD_DEBUG": "libs"},
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert "trying file=libc.so.6" in out.stderr  # relative: the working directory
    assert environment.check_values(["LD_LIBRARY_PATH=/nonexistent-vg:"])
    prog = tmp_path / "vgplanted"
    prog.write_text("#!/bin/sh\necho planted\n")
    prog.chmod(0o755)
    out = subprocess.run(
        ["/bin/sh", "-c", "vgplanted"], env={"PATH": "/usr/bin::/bin"}, capture_output=True, text=True, cwd=tmp_path
    )
    assert out.stdout.strip() == "planted"
    assert environment.check_values(["PATH=/usr/bin::/bin"])
    assert environment.check_values(["PATH=/usr/local/bin:/usr/bin:/bin", "LD_LIBRARY_PATH=/usr/lib"]) == []


def test_a_requested_name_without_a_row_gets_the_path_rule(tmp_path):
    (tmp_path / "open").mkdir()
    (tmp_path / "open").chmod(0o777)
    assert environment.env_row("MYTOOL_HOME", "fa") is None
    why = environment.check_values([f"MYTOOL_HOME={tmp_path / 'open'}"], pass_env=("MYTOOL_HOME",))
    assert len(why) == 1 and "every user can write" in why[0][1] and "VLGRPO_PASS_ENV" in why[0][2]
    assert environment.check_values([f"MYTOOL_HOME={tmp_path}"], pass_env=("MYTOOL_HOME",)) == []
    # requested, a library or peer name passes (the request is the operator's choice); not requested, no row: dropped
    assert (
        environment.check_values(
            ["MYTOOL_PLUGIN=x", "MYTOOL_ADDR=10.0.0.1:1"], pass_env=("MYTOOL_PLUGIN", "MYTOOL_ADDR")
        )
        == []
    )
    assert environment.check_values([f"MYTOOL_HOME={tmp_path / 'open'}"]) == []


@pytest.mark.parametrize(
    "value, says",
    [
        # a URL: some reader may send the job (or its key) there
        ("http://attacker.example:8080", "holds a URL"),
        ("s3://bucket/prefix", "holds a URL"),
        ("file:///etc/passwd", "holds a URL"),
        ("redis://10.0.0.9:6379", "holds a URL"),
        # a command line or shell syntax: some reader may run it
        ("|id >/tmp/x %s", "holds spaces or shell syntax"),
        ("a;touch /tmp/x", "holds spaces or shell syntax"),
        ("$(id)", "holds spaces or shell syntax"),
        ("`id`", "holds spaces or shell syntax"),
        ("python3 -c pass", "holds spaces or shell syntax"),
        # a path by its value, also in a name whose words say nothing (OMPI_MCA_plm_rsh_agent: a program)
        ("relative/tool.so", "not an absolute path"),
        ("{open}/tool.so", "every user"),
        ("/usr/lib:{open}", "every user"),
    ],
)
def test_a_requested_name_without_a_row_passes_only_a_plain_value(value, says, tmp_path):
    (tmp_path / "open").mkdir()
    (tmp_path / "open").chmod(0o777)
    value = value.format(open=tmp_path / "open")
    for name in ("OMPI_MCA_plm_rsh_agent", "MY_READER_SETTING", "KINETO_CONFIG"):
        assert environment.env_row(name, "fa") is None, name
        why = environment.check_values([f"{name}={value}"], pass_env=(name,))
        assert len(why) == 1 and why[0][0] == name and says in why[0][1], (name, value, why)
        assert "VLGRPO_PASS_ENV" in why[0][2], why
        # a Ray job's runtime_env env_vars get the same rule
        job = json.dumps({"runtime_env": {"env_vars": {name: value}}})
        got = environment.check_ray_job_config(job, "fa", pass_env=(name,))
        # (a '$' is refused there before the value rule: Ray expands $NAME in env_vars)
        assert any(says in why or ("'$'" in why and "$" in value) for _, why, _ in got), (name, value, got)


@pytest.mark.parametrize(
    "value", ["1", "true", "eth0,eth1", "expandable_segments:True", "a=1,b=2", "-3.5e-2", "/usr/lib", "x.y-z_1"]
)
def test_a_requested_name_without_a_row_keeps_its_plain_values(value):
    assert environment.check_values([f"MY_READER_SETTING={value}"], pass_env=("MY_READER_SETTING",)) == []


# ---- the W&B server and entity (WANDB_BASE_URL, WANDB_ENTITY) -------------------------------------------------


@pytest.mark.parametrize(
    "value, ok",
    [
        ("https://api.wandb.ai", True),
        ("http://wandb.example.com:8080", True),
        ("https://wandb.example.com/", True),
        ("http://10.0.0.5:8080/w", True),
        ("", True),
        ("https://user:pw@wandb.example.com", False),
        ("https://wandb.example.com/?x=1", False),
        ("https://wandb.example.com/#f", False),
        ("file:///tmp/wandb", False),
        ("ftp://wandb.example.com", False),
        ("wandb.example.com", False),
        ("https://wandb.example.com:99999", False),
        ("https://-bad.example", False),
    ],
)
def test_the_wandb_server_is_an_http_url_without_credentials(value, ok):
    """The same URLs the registry's ``uri`` setting type takes in its http(s) form (validate is the reference),
    never a file: store; a refusal never quotes the value."""
    why = environment.check_value(_row("WANDB_BASE_URL"), value)
    assert (why == "") is ok, (value, why)
    if value and value.startswith("http"):
        uri_ok = True
        try:
            environment.validate(
                environment.Row(["X", "fa", "setting", "uri"] + ["-"] * (len(environment.COLUMNS) - 4)), value
            )
        except ValueError:
            uri_ok = False
        assert uri_ok is ok, value
    assert "pw" not in why and "wandb.example" not in why


@pytest.mark.parametrize(
    "value, ok",
    [
        ("my-team", True),
        ("user_1", True),
        ("a.b", True),
        ("A" * 128, True),
        ("", True),
        ("-team", False),
        ("team name", False),
        ("a/b", False),
        ("A" * 129, False),
        ("tëam", False),
        ("x;rm", False),
    ],
)
def test_the_wandb_entity_is_a_plain_name(value, ok):
    why = environment.check_value(_row("WANDB_ENTITY"), value)
    assert (why == "") is ok, (value, why)


def test_a_bad_wandb_server_or_entity_is_named_with_its_fix_by_check_values():
    problems = environment.check_values(
        ["WANDB_BASE_URL=https://u:p@w.example", "WANDB_ENTITY=a b"], pass_env=("WANDB_BASE_URL",)
    )
    assert [p[0] for p in problems] == ["WANDB_BASE_URL", "WANDB_ENTITY"], problems
    assert "credentials" in problems[0][1] and "https://wandb.example.com" in problems[0][2]
    assert "team name" in problems[1][2]


@pytest.mark.parametrize(
    "name, values",
    [
        ("PYTHONHASHSEED", ["random", "0", "42", "4294967295", "4294967296", "abc", "-1", "1.5", "0x10", "random "]),
        ("PYTHONUTF8", ["0", "1", "2", "7", "yes", "true"]),
        ("PYTHONIOENCODING", ["utf-8", "utf-8:surrogateescape", ":replace", "latin-1", "bogus", "utf-8:nope", "utf8:"]),
    ],
)
def test_values_cpython_stops_on_are_refused_and_the_others_start(name, values):
    """Attack review: PYTHONHASHSEED=abc, PYTHONUTF8=7 and PYTHONIOENCODING=bogus made every child print
    "Fatal Python error" and the launch blame the device counter. The reference is CPython itself: every value the
    check accepts starts an interpreter (exit 0); every value it refuses that CPython also rejects is one it must
    refuse."""
    row = _row(name)
    for value in values:
        why = environment.check_value(row, value)
        starts = (
            subprocess.run(
                [sys.executable, "-c", "pass"], env={**os.environ, name: value}, capture_output=True
            ).returncode
            == 0
        )
        if not why:
            assert starts, (name, value)
        if not starts:
            assert why, (name, value)


def test_cuda_home_passes_the_path_rule(tmp_path):
    """Attack review: CUDA_HOME passed unchecked, and torch's cpp_extension runs $CUDA_HOME/bin/nvcc."""
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    (tmp_path / "own").mkdir()
    row = environment.env_row("CUDA_HOME", "fa")
    assert row is not None and row.type == "dir"
    assert "every user can write" in environment.check_value(row, str(open_dir))
    assert environment.check_value(row, "relative/cuda")
    assert environment.check_value(row, str(tmp_path / "own")) == ""


@pytest.mark.parametrize("name", ["SSLKEYLOGFILE", "COVERAGE_PROCESS_START"])
def test_tls_key_log_and_coverage_hook_are_refused_for_every_entrypoint(name):
    for owner in ("fa", "vo", "node", "doctor"):
        row = environment.env_row(name, owner)
        assert row is not None and row.kind == "refused", (name, owner)


@pytest.mark.parametrize(
    "value",
    [
        "DEBUG",
        "INFO",
        "WARN",
        "WARNING",
        "ERROR",
        "CRITICAL",
        "FATAL",
        "NOTSET",
        "info",
        "Debug",
        "bogus",
        "10",
        "",
        " INFO",
        "TRACE",
    ],
)
def test_log_levels_are_what_the_readers_logging_accepts(value):
    """The reference is Python's own logging: verl calls ``logger.setLevel(VERL_LOGGING_LEVEL)`` (exact case),
    vLLM 0.13.0 upper-cases ``VLLM_LOGGING_LEVEL`` for ``logging.config`` (vllm/envs.py, vllm/logger.py)."""
    import logging

    def accepts(level):
        try:
            logging.getLogger("vlgrpo-test-level").setLevel(level)
        except (ValueError, TypeError):
            return False
        return True

    verl = environment.check_value(_row("VERL_LOGGING_LEVEL"), value)
    vllm = environment.check_value(_row("VLLM_LOGGING_LEVEL"), value)
    assert (verl == "") == accepts(value), verl
    assert (vllm == "") == accepts(value.upper()), vllm
