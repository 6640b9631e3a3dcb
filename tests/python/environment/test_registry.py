"""The launch environment registry (python/src/vlgrpo/environment.tsv) and its stdlib accessor vlgrpo.environment.

vlgrpo.environment.validate is the one value rule (the entrypoints' settings step, vlgrpo.launch, calls it): every
value below is held to an independent reading of the type rules documented in docs/settings.md (regular expressions
and the stdlib's parsers, written here); which row applies to a name (environment.env_row) is checked against the
precedence rules the registry states.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vlgrpo import environment

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
TYPES = {"int", "float", "bool", "enum", "list", "path", "name", "addr", "ids", "ipv4", "envnames", "uri"}
CHECKS = {
    "warnings",
    "rayjob",
    "bashenv",
    "tmpdir",
    "dir",
    "dirs",
    "shaped",
    "httpurl",
    "plainname",
    "pyinit",
    "compiler",
    "torchlogs",
    "paths",
    "plugin",
    "rayconfig",
    "username",
    "proxyurl",
    "tz",
    "loglevel",
    "outfile",
}


def test_every_row_is_well_formed():
    names = set()
    seen_settings = set()
    for row in environment.rows():
        assert row.kind in environment.KINDS, row
        assert row.meaning, row
        assert "*" not in row.name or row.kind != "setting", row
        if row.kind == "setting":
            assert row.name.startswith("VLGRPO_") and row.name.replace("_", "").isalnum(), row
            assert row.type in TYPES, row
            for own in row.owners:
                key = (row.name, own)
                assert key not in seen_settings, f"{row.name} declared twice for {own}"
                seen_settings.add(key)
            assert set(row.owners) & set(environment.ENTRYPOINTS), f"{row.name}: no entrypoint owns it"
        else:
            assert not row.hydra, row
            assert row.type in CHECKS | {""}, row
            if row.kind != "set":
                assert (row.name, row.kind) not in names, f"{row.name} listed twice as {row.kind}"
                names.add((row.name, row.kind))
        if row.kind == "refused":
            assert row.fix, f"{row.name}: a refusal needs its fix"


def test_every_entrypoint_has_its_settings_and_the_patch_switches():
    fa = [r.name for r in environment.settings("fa")]
    vo = [r.name for r in environment.settings("vo")]
    node = [r.name for r in environment.settings("node")]
    assert len(fa) >= 40 and len(vo) >= 35 and len(node) >= 15
    for switches in (fa, vo, node):
        assert {"VLGRPO_PATCHES", "VLGRPO_PATCHES_DISABLED", "VLGRPO_PATCHES_STRICT"} <= set(switches)
    patches = {r.name for r in environment.settings("patches")}
    assert {"VLGRPO_PATCHES", "VLGRPO_PATCHES_DISABLED", "VLGRPO_PATCHES_STRICT"} <= patches


# ---- values: the documented rule of each type ------------------------------------------------------------------------

HOSTILE = [
    "$(touch x)",
    "`id`",
    ";id",
    "a b",
    "'q'",
    '"q"',
    "k=v",
    ",x",
    "x,y=1",
    "${HOME}",
    "${oc.env:X}",
    "+a=1",
    "~a",
    "x\ny",
    "\tx",
    "x\r",
    "\x1b[31m",
    "x\x7f",
    "modèle",
    "模型",
    "a" * 1100,
    "-rf",
    "*",
    "[a,b]",
    "#c",
    "%s",
    "",
    " ",
    "1 ",
    " 1",
]
# hosts of addr settings (with a port): what glibc's inet_aton reads as another address, and real host names
ADDR_HOSTS = [
    h + ":6379"
    for h in (
        "010.0.0.1",
        "0x0a.0.0.1",
        "167772161",
        "10.1",
        "10.0.0.01",
        "1.2.3.0x4",
        "0",
        "1.2.3.4.5",
        "10.0.0.256",
        "0x7f000001",
        "0x",
        "a..b",
        "head-",
        "head-.x",
        "a.-b",
        "a_b",
        "x" * 64,
        ("a" * 63 + ".") * 4 + "com",
        "192.168.1.20",
        "0.0.0.0",
        "255.255.255.255",
        "ray-head-0.ray.default.svc.cluster.local",
        "node01",
        "h1",
        "ip-10-0-0-1.ec2.internal",
        "x" * 63,
        "a.b1",
        "1a",
        "4gpu-node",
        "a.1",
        "a.0xff",
        "a.0xg",
    )
]
CASES = [
    (
        "int",
        "1..512",
        ["1", "512", "513", "0", "08", "010", "00", "0x10", "+1", "-0", "1e3", "1.0", "1_000", "9999999999"],
    ),
    ("int", "-1|1..1000000", ["-1", "-2", "0", "5", "05", "-01", "1000000", "1000001"]),
    ("int", "0..3600", ["0", "3600", "3601"]),
    (
        "float",
        "1e-12..1",
        [
            "1e-6",
            "5e-7",
            "1",
            "0.5",
            "nan",
            "NaN",
            "inf",
            "-inf",
            "+1e-6",
            "-1e-6",
            "0x1p-3",
            ".5",
            "5.",
            "1e-13",
            "2",
            "1e100",
            "1e-6e1",
            "1,5",
            "1E-6",
            "0.0000000001",
            "1.1234567890",
        ],
    ),
    ("float", "0..65536", ["0", "64", "0.5", "65536", "65537", "1e3", "1e5"]),
    ("bool", "", ["true", "True", "1", "false", "False", "0", "yes", "on", "TRUE", "2"]),
    ("enum", "on off", ["on", "off", "On", "0", "disabled", "on,off"]),
    ("enum", "auto disable resume_path", ["auto", "resume_path", "latest"]),
    (
        "list",
        "console wandb tensorboard mlflow swanlab file",
        [
            "console",
            "console,wandb",
            "console,console",
            "console,",
            "[console]",
            "Console",
            "console;wandb",
            "file,mlflow",
        ],
    ),
    (
        "ids",
        "",
        [
            "a",
            "a.b-c_d,e",
            "A",
            "a,,b",
            ",a",
            "a,",
            "-a",
            "a" * 64,
            "a" * 65,
            ",".join(["a"] * 32),
            ",".join(["a"] * 33),
        ],
    ),
    (
        "name",
        "",
        ["proj", "a.b-c_D9", "1e5", "1.5", "123", "true", "Null", "NaN", "inf", "-x", ".x", "x" * 128, "x" * 129],
    ),
    (
        "addr",
        "",
        [
            "10.0.0.1:6379",
            "head:6379",
            "head.local:1",
            "h:65535",
            "h:65536",
            "h:0",
            "h:06379",
            "-h:1",
            ".h:1",
            "h",
            ":1",
            "h:1:2",
        ]
        + ADDR_HOSTS,
    ),
    (
        "envnames",
        "",
        [
            "A",
            "NCCL_NET_PLUGIN,PYTHONPATH",
            "A,A",
            "A,B,A",
            "A-B",
            ",A",
            "A,",
            "_X",
            "1A",
            "a" * 128,
            "a" * 129,
            ",".join(f"V{i}" for i in range(64)),
            ",".join(f"V{i}" for i in range(65)),
        ],
    ),
    (
        "ipv4",
        "",
        [
            "10.0.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "010.0.0.1",
            "10.0.0.01",
            "1.2.3.256",
            "00.1.2.3",
            "10.1",
            "167772161",
            "0x0a.0.0.1",
        ],
    ),
    (
        "uri",
        "",
        [
            "http://mlflow:5000",
            "https://mlflow.example.com/a-b_c.d/",
            "http://10.0.0.1",
            "file:///mlruns",
            "file:/mlruns",
            "file:/",
            "https://user:pw@mlflow",
            "http://mlflow:0",
            "http://mlflow:65536",
            "http://010.0.0.1:5000",
            "http://mlflow/?x=1",
            "ftp://mlflow",
            "sqlite:///a.db",
            "file:relative",
            "file://host/x",
            "file:////x",
            "http://",
            "http://a..b",
            "HTTP://mlflow",
        ]
        + ["http://" + h for h in ADDR_HOSTS[:8]],
    ),
]


def _reference(t, a, v, cwd):
    """The documented rule of type ``t`` (allowed ``a``) for value ``v``: ``"ok <hydra text>"`` or ``"refused"``."""
    import re

    if len(v) > 1024 or not re.fullmatch(r"[!-~]*", v):
        return "refused"
    ok = False
    if t == "int":
        ok = bool(re.fullmatch(r"-1|0|[1-9][0-9]{0,8}", v)) and any(
            (lambda lo, hi: int(lo) <= int(v) <= int(hi))(*alt.split("..")) if ".." in alt else int(v) == int(alt)
            for alt in a.split("|")
        )
    elif t == "float":
        lo, hi = a.split("..")
        ok = bool(re.fullmatch(r"(0|[1-9][0-9]{0,8})(\.[0-9]{1,9})?([eE]-?[0-9]{1,2})?", v)) and float(lo) <= float(
            v
        ) <= float(hi)
    elif t == "bool":
        if v in ("true", "True", "1", "false", "False", "0"):
            return f"ok {v in ('true', 'True', '1')}"
    elif t == "enum":
        ok = v in a.split(" ")
    elif t == "list":
        items = v.split(",")
        if all(i in a.split(" ") for i in items) and len(set(items)) == len(items):
            return f"ok [{v}]"
    elif t == "ids":
        ok = bool(re.fullmatch(r"[a-z0-9][a-z0-9_.-]{0,63}(,[a-z0-9][a-z0-9_.-]{0,63}){0,31}", v))
    elif t == "name":
        ok = (
            bool(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", v))
            and v.lower() not in ("true", "false", "null", "nan", "inf")
            and not re.fullmatch(r"([0-9][0-9_]*(\.[0-9_]*)?|\.[0-9][0-9_]*)([eE]-?[0-9_]+)?", v)
        )
    elif t == "addr":
        ok = _reference_addr_ok(v)
    elif t == "uri":
        ok = _reference_uri_ok(v)
    elif t == "envnames":
        items = v.split(",")
        ok = (
            len(items) <= 64
            and len(set(items)) == len(items)
            and all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", i) for i in items)
        )
    elif t == "ipv4":
        import ipaddress

        try:
            ok = str(ipaddress.IPv4Address(v)) == v
        except ValueError:
            ok = False
    elif t == "path":
        if not re.fullmatch(r"[A-Za-z0-9._/][A-Za-z0-9._/-]*", v):
            return "refused"
        # `realpath -s -m`: absolute against the working directory, '.' and '..' and repeated '/' folded, no
        # symlink resolved
        parts: list[str] = []
        for part in (v if v.startswith("/") else cwd + "/" + v).split("/"):
            if part == "..":
                parts = parts[:-1]
            elif part not in ("", "."):
                parts.append(part)
        path = "/" + "/".join(parts)
        if a == "file" and not (os.path.isfile(path) and os.access(path, os.R_OK)):
            return "refused"
        if a in ("dir", "dirw") and not (os.path.isdir(path) and os.access(path, os.R_OK)):
            return "refused"
        return f"ok {path}"
    return f"ok {v}" if ok else "refused"


def _validate(t, a, v, cwd=None):
    from vlgrpo.launch import settings

    row = environment.Row(["VLGRPO_CASE", "fa", "setting", t, a or "-", "-", "-", "case", "-"])
    text, problem = settings.check(row, v, cwd or os.getcwd())
    return "refused" if problem else f"ok {text}"


def test_every_value_follows_the_documented_rule_of_its_type(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "f.parquet").write_text("")
    paths = [
        ("path", "dir", str(tmp_path / "d")),
        ("path", "dir", str(tmp_path / "f.parquet")),
        ("path", "file", str(tmp_path / "f.parquet")),
        ("path", "file", str(tmp_path / "missing")),
        ("path", "dirw", str(tmp_path / "d") + "/../d"),
        ("path", "any", str(tmp_path / "x,y")),
        ("path", "any", "//a//b/"),
        ("path", "file", str(tmp_path / "f.parquet") + "/"),
        ("path", "dir", "d"),
        ("path", "dir", "./d/../d"),
        ("path", "any", "../../x"),
    ]
    cases = [(t, a, v) for t, a, values in CASES for v in values + HOSTILE] + [(t, a, v) for t, a, v in paths]
    got = [_validate(t, a, v, str(tmp_path)) for t, a, v in cases]
    want = [_reference(t, a, v, str(tmp_path)) for t, a, v in cases]
    diffs = [(c, g, w) for c, g, w in zip(cases, got, want) if g != w]
    assert not diffs, "\n".join(f"{t} {a!r} {v!r}: ours {g!r} rule {w!r}" for (t, a, v), g, w in diffs[:20])
    # and the table is not trivial: both outcomes occur for every type
    for t in {c[0] for c in cases}:
        outs = {w.split()[0] for (ct, _, _), w in zip(cases, want) if ct == t}
        assert outs == {"ok", "refused"}, (t, outs)


def _reference_uri_ok(value):
    """An independent rule for a uri value, read with the stdlib's URL parser: an http or https URL whose network
    location is an addr host (default port allowed) without user info, with no parameters, query or fragment and a
    path of unreserved characters (RFC 3986 section 2.3) and '/'; or a file: URL with no host whose path is a plain
    absolute path (a path setting's characters)."""
    import re
    from urllib.parse import urlsplit

    try:
        u = urlsplit(value)
        port = u.port
    except ValueError:
        return False
    if u.query or u.fragment or "?" in value or "#" in value or "@" in u.netloc:
        return False
    if u.scheme in ("http", "https") and value.startswith(u.scheme + "://"):
        host = u.netloc.rsplit(":", 1)[0] if ":" in u.netloc else u.netloc
        return (
            bool(host)
            and _reference_addr_ok(f"{host}:{port or 80}")
            and (":" not in u.netloc or bool(re.fullmatch(r"[1-9][0-9]{0,4}", u.netloc.rsplit(":", 1)[1])))
            and bool(re.fullmatch(r"[A-Za-z0-9._~/-]*", u.path))
        )
    if u.scheme == "file" and not u.netloc and value.startswith(("file:/", "file:///")):
        rest = value[len("file:///") :] if value.startswith("file:///") else value[len("file:/") :]
        return not rest or bool(re.fullmatch(r"[A-Za-z0-9._-][A-Za-z0-9._/-]*", rest))
    return False


def _reference_addr_ok(value):
    """An independent rule for an addr value: a port 1-65535 and a host that is a strict dotted quad (the stdlib's
    ipaddress, which refuses leading zeros), or that inet_aton does not read as an address at all and is an RFC 1123
    hostname (labels of 1-63 letters, digits, '-', no '-' at either end, at most 253 characters) whose last label
    is not numeric (RFC 3696 section 2: a top-level label is not all-numeric)."""
    import ipaddress
    import re
    import socket

    host, sep, port = value.rpartition(":")
    if not sep or not re.fullmatch(r"[1-9][0-9]{0,4}", port) or int(port) > 65535:
        return False
    try:
        ipaddress.IPv4Address(host)
        return True
    except ValueError:
        pass
    try:
        socket.inet_aton(host)
        return False  # glibc reads it as some address, not as the name written
    except OSError:
        pass
    labels = host.split(".")
    return (
        len(host) <= 253
        and all(re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?", x) for x in labels)
        and not re.fullmatch(r"[0-9]+|0[xX][0-9A-Fa-f]*", labels[-1])
        and bool(re.search("[A-Za-z]", labels[-1]))
    )


@pytest.mark.parametrize("value", ADDR_HOSTS)
def test_addr_takes_a_dotted_quad_or_a_hostname_only(value):
    row = environment.Row(["VLGRPO_RAY_ADDRESS", "fa", "setting", "addr", "-", "-", "-", "case", "-"])
    try:
        environment.validate(row, value)
        ours = True
    except ValueError:
        ours = False
    assert ours == _reference_addr_ok(value), value


def test_addr_cases_cover_both_outcomes():
    outcomes = [_reference_addr_ok(v) for v in ADDR_HOSTS]
    assert 10 <= sum(outcomes) <= len(outcomes) - 10


# ---- names: which row applies (read from the rules of the registry's header) ------------------------------------


def test_env_row_precedence_follows_the_rules():
    # an exact name wins over a pattern, a longer pattern over a shorter one, this entrypoint's set row over a pass row
    assert environment.env_row("NCCL_NET_PLUGIN").kind == "pass-on-request"
    assert environment.env_row("NCCL_IB_HCA").kind == "pass"
    assert environment.env_row("__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR").kind == "refused"
    assert environment.env_row("__RAY_X").kind == "drop"
    assert environment.env_row("_").kind == "pass"
    assert environment.env_row("RAY_START_HOOK").kind == "refused"
    assert environment.env_row("TP_SOCKET_IFNAME", "node").kind == "set"
    assert environment.env_row("TP_SOCKET_IFNAME", "fa").kind == "pass"
    assert environment.env_row("UNLISTED_NAME") is None
    assert environment.env_row("VLGRPO_X") is not None and environment.env_row("VLGRPO_X").name == "VLGRPO_*"
    assert environment.env_row("RAY_ADDRESS", "fa").kind == "set"


# ---- the switches the patch package reads at every start --------------------------------------------------


@pytest.mark.parametrize(
    "raw, value, problem",
    [
        ("", None, False),
        ("on", "on", False),
        ("off", "off", False),
        ("0", None, True),
        ("disabled", None, True),
        ("maybe", None, True),
    ],
)
def test_read_setting_patches_switch_has_the_entrypoints_rule(raw, value, problem):
    got, why = environment.read_setting("VLGRPO_PATCHES", {"VLGRPO_PATCHES": raw})
    assert got == value
    assert bool(why) == problem
    if problem:
        assert why.startswith("VLGRPO_PATCHES: ") and "on, off" in why


def test_read_setting_ids_and_bool():
    assert environment.read_setting("VLGRPO_PATCHES_DISABLED", {"VLGRPO_PATCHES_DISABLED": "a.b,c"}) == (
        ("a.b", "c"),
        None,
    )
    assert environment.read_setting("VLGRPO_PATCHES_STRICT", {"VLGRPO_PATCHES_STRICT": "1"}) == (True, None)
    value, why = environment.read_setting("VLGRPO_PATCHES_STRICT", {"VLGRPO_PATCHES_STRICT": "yes"})
    assert value is None and "true or false" in why
    with pytest.raises(KeyError):
        environment.read_setting("VLGRPO_LR")  # a recipe setting, not read by the patch package


# ---- the Ray job config: JSON and an allowlist, not a regex over the text ---------------------------------


@pytest.mark.parametrize(
    "doc, fragment",
    [
        ('{"runtime_env": {"p\\u0069p": ["x"]}}', "'pip'"),
        ('{"runtime_env": {"working\\u005fdir": "https://x/y.zip"}}', "'working_dir'"),
        ('{"runtime_env": {"\\u0070y_executable": "python3 -c x"}}', "'py_executable'"),
        ('{"runtime_env": {"mpi": {"args": []}}}', "'mpi'"),
        ('{"runtime_env": {"nsight": "default"}}', "'nsight'"),
        ('{"runtime_env": {"image_uri": "x"}}', "'image_uri'"),
        ('{"runtime_env": {"some_future_plugin": {}}}', "'some_future_plugin'"),
        ('{"py_driver_sys_path": ["/tmp"]}', "'py_driver_sys_path'"),
        ('{"code_search_path": ["/tmp"]}', "'code_search_path'"),
        (
            '{"runtime_env": {"env_vars": {"__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR": "os.getcwd"}}}',
            "imports and calls",
        ),
        ('{"runtime_env": {"env_vars": {"MASTER_ADDR": "x"}}}', "never passed"),
        ('{"runtime_env": {"env_vars": {"PYTHONPATH": "/tmp"}}}', "only when named in VLGRPO_PASS_ENV"),
        ('{"runtime_env": {"env_vars": {"SOMETHING_ELSE": "1"}}}', "not a variable the launch passes"),
        ('{"runtime_env": ', "is not JSON"),
        ('["runtime_env"]', "not an object"),
    ],
)
def test_ray_job_config_refusals(doc, fragment):
    problems = environment.check_ray_job_config(doc)
    assert problems and all(p[0] == "RAY_JOB_CONFIG_JSON_ENV_VAR" for p in problems)
    assert any(fragment in p[1] for p in problems), problems


def test_ray_job_config_the_kuberay_submission_passes():
    doc = (
        '{"runtime_env": {"env_vars": {"VLGRPO_TRAINER_NNODES": "1", "NCCL_DEBUG": "WARN", "HCCL_IF_IP": "10.0.0.2"},'
        ' "config": {"setup_timeout_seconds": 600}}, "metadata": {"job_submission_id": "raysubmit_1"}}'
    )
    assert environment.check_ray_job_config(doc) == []
    assert (
        environment.check_ray_job_config(
            '{"runtime_env": {"env_vars": {"PYTHONPATH": "/x"}}}', pass_env=("PYTHONPATH",)
        )
        == []
    )
