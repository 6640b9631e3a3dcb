"""Variables whose value becomes a command, a module or a library to load, tracker and Hub endpoints, and warning
filters that crash: the registry's rows for them (python/src/vlgrpo/environment.tsv) and the pass checks
``compiler``, ``httpurl`` and ``warnings`` (vlgrpo.environment.check_value).

References: the installed sources that read each variable (the stdlib, torch, Ray, huggingface_hub, transformers,
datasets, vLLM's source in .cache), a real run of the stdlib's webbrowser with BROWSER, CPython itself for the
warning filters, urllib.parse for URLs, and os.stat for the path rule's bits.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest

from vlgrpo import environment
from vlgrpo.launch import childenv

REPO = Path(__file__).resolve().parents[3]
SITE = Path(importlib.util.find_spec("torch").origin).parents[1] if importlib.util.find_spec("torch") else None
VLLM_SRC = REPO / ".cache" / "vllm-0.13.0" / "src"

#: program-naming variables: name -> (file that reads it, relative to its root; a line of it that reads the name)
READERS = {
    "BROWSER": ("stdlib", "webbrowser.py", '"BROWSER" in os.environ'),
    "PAGER": ("stdlib", "pydoc.py", "os.environ.get('PAGER')"),
    "MANPAGER": ("stdlib", "pydoc.py", "os.environ.get('MANPAGER')"),
    "EDITOR": ("site", "ray/tune/cli/commands.py", 'os.getenv("EDITOR"'),
    "CC": ("site", "torch/utils/cpp_extension.py", 'os.getenv("CC")'),
    "CXX": ("site", "torch/utils/cpp_extension.py", "os.environ.get('CXX'"),
    "PYTORCH_NVCC": ("site", "torch/utils/cpp_extension.py", 'os.getenv("PYTORCH_NVCC")'),
    "PYTHON_EXEC": ("site", "torch/distributed/run.py", 'os.getenv("PYTHON_EXEC"'),
    "TORCH_INDUCTOR_INSTALL_GXX": ("site", "torch/_inductor/cpp_builder.py", 'os.getenv("TORCH_INDUCTOR_INSTALL_GXX")'),
    "CONDA_EXE": ("site", "torch/_inductor/cpp_builder.py", 'os.environ.get("CONDA_EXE", "conda")'),
    "PERFTOOLS_PATH": ("site", "ray/_private/services.py", 'modified_env["LD_PRELOAD"] = os.environ["PERFTOOLS_PATH"]'),
    "RAYLET_PERFTOOLS_PATH": ("site", "ray/_private/services.py", '"RAYLET_PERFTOOLS_PATH" in os.environ'),
    "VLLM_LOGGING_CONFIG_PATH": ("vllm", "vllm/envs.py", 'os.getenv("VLLM_LOGGING_CONFIG_PATH")'),
}
#: the same kind, read outside Python (git, less, nvcc, ssh, sudo): their rows only
NATIVE = [
    "VISUAL",
    "LESSOPEN",
    "LESSCLOSE",
    "GIT_SSH_COMMAND",
    "GIT_ASKPASS",
    "GIT_CONFIG_GLOBAL",
    "GIT_EXEC_PATH",
    "SSH_ASKPASS",
    "SUDO_ASKPASS",
    "NVCC_CCBIN",
    "NVCC_PREPEND_FLAGS",
    "NVCC_APPEND_FLAGS",
]
COMPILERS = ("CC", "CXX", "NVCC_CCBIN")


def _root(kind):
    if kind == "stdlib":
        return Path(os.__file__).parent
    if kind == "site":
        return SITE
    return VLLM_SRC


@pytest.mark.parametrize("name", sorted(READERS))
def test_the_pinned_stack_reads_each_program_variable(name):
    kind, rel, line = READERS[name]
    root = _root(kind)
    if root is None or not (root / rel).is_file():
        pytest.skip(f"{rel} is not installed here")
    assert line in (root / rel).read_text(encoding="utf-8"), f"{rel} no longer reads {name} so"


@pytest.mark.parametrize("name", sorted(READERS) + NATIVE)
def test_a_program_variable_never_reaches_a_child_unchecked(name):
    row = environment.env_row(name, "fa")
    assert row is not None, f"{name} has no row"
    if name in COMPILERS:
        assert (row.kind, row.type) == ("pass-on-request", "compiler"), row
    else:
        assert row.kind in ("refused", "drop"), row
    # requested or not, it does not pass with a command line as its value
    value = "sh -c 'touch /tmp/x' %s"
    for pass_env in ("", name):
        got = childenv.classify("fa", [(name, value)], {}, pass_env)
        if name in COMPILERS and pass_env:
            assert name in got.typed  # passed, and its value checked once the environment is built
            problems = childenv.value_problems("fa", [f"{name}={value}"], pass_env, (), [])
            assert problems and problems[0].startswith(f"{name}: "), problems
            assert "touch" not in problems[0]
        elif row.kind == "refused":
            assert got.problems and got.problems[0].startswith(f"{name}: "), got.problems
            assert name not in got.passed
        else:
            assert name not in got.passed
            if pass_env:
                assert any(p.startswith(f"VLGRPO_PASS_ENV: names {name}, which ") for p in got.problems)


def test_browser_is_a_command_line_webbrowser_runs(tmp_path):
    """The attack of the review: Python's webbrowser runs BROWSER as a command (here it touches a canary); the
    launch neither passes it nor lets VLGRPO_PASS_ENV ask for it, and a Ray job's env_vars cannot set it."""
    canary = tmp_path / "ran"
    env = {"PATH": os.environ["PATH"], "BROWSER": "touch %s"}
    code = f"import webbrowser; webbrowser.open({str(canary)!r})"
    subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, check=True)
    assert canary.exists()
    got = childenv.classify("fa", [("BROWSER", env["BROWSER"])], {}, "BROWSER")
    assert "BROWSER" not in got.passed
    assert got.problems and got.problems[0].startswith("VLGRPO_PASS_ENV: names BROWSER, which is never passed")
    job = '{"runtime_env": {"env_vars": {"BROWSER": "x %s"}}}'
    assert environment.check_ray_job_config(job, pass_env=("BROWSER",))


# ---- compiler ---------------------------------------------------------------------------------------------------


def _compiler(value, protect=()):
    return environment.check_value(environment.env_row("CXX", "fa"), value, protect=protect, name="CXX")


@pytest.mark.parametrize(
    "value",
    [
        "sh",
        "/bin/sh",
        "bash",
        "python3",
        "env",
        "ccache",
        "sh -c 'touch x'",
        "gcc;id",
        "$(id)",
        "-fplugin=x.so",
        "./gcc",
    ],
)
def test_compiler_refuses_what_is_no_compiler_or_no_one_word(value):
    assert _compiler(value)


@pytest.mark.parametrize(
    "value", ["gcc", "g++", "cc", "c++", "clang++", "clang++-18", "x86_64-linux-gnu-gcc-12", "icpx"]
)
def test_compiler_takes_a_compiler_name(value):
    assert _compiler(value) == ""


def test_compiler_path_by_the_path_rule(tmp_path):
    tmp_path.chmod(0o755)
    gxx = tmp_path / "g++-13"
    gxx.write_text("#!/bin/sh\n")
    gxx.chmod(0o755)

    def others_can_write(path):
        """The reference: os.stat of the file and every folder above it; another owner, or a group/other write
        bit (a sticky folder above, like /tmp, excepted)."""
        for i, q in enumerate([path, *path.parents]):
            st = os.stat(q)
            if st.st_uid not in (0, os.geteuid()) or (st.st_mode & 0o022 and not (i and st.st_mode & 0o1000)):
                return True
        return False

    assert not others_can_write(gxx), "the test's tmp folder must pass the path rule"
    assert _compiler(str(gxx)) == ""
    gxx.chmod(0o775)  # group-writable file
    assert others_can_write(gxx) and "can be written by its group" in _compiler(str(gxx))
    gxx.chmod(0o755)
    tmp_path.chmod(0o777)  # a folder every user can write: they can swap the compiler
    assert others_can_write(gxx) and _compiler(str(gxx))
    tmp_path.chmod(0o755)
    gxx.chmod(0o644)
    assert "not an executable file" in _compiler(str(gxx))
    assert "not an existing file" in _compiler(str(tmp_path / "gcc"))
    gxx.chmod(0o755)
    assert "checkpoint folder" in _compiler(str(gxx), protect=(str(tmp_path.resolve()),))


def test_a_requested_compiler_is_checked_before_the_children_get_it():
    got = environment.check_values(["CC=sh -c 'touch /tmp/x'", "CXX=g++"], pass_env=("CC", "CXX"))
    assert [(n, fix) for n, _, fix in got] == [("CC", environment.env_row("CC").fix)]
    assert "touch" not in got[0][1]


# ---- endpoints: httpurl ----------------------------------------------------------------------------------------

ENDPOINTS = ["HF_ENDPOINT", "HF_INFERENCE_ENDPOINT", "SWANLAB_API_HOST", "SWANLAB_WEB_HOST"]
URLS = [
    "https://hf-mirror.example.com",
    "http://10.1.2.3:8000",
    "https://swanlab.example.com/api",
    "https://user:secret@hub.example.com",
    "https://hf_tokenvalue@hub.example.com",
    "https://hub.example.com/?token=x",
    "https://hub.example.com/#x",
    "ftp://hub.example.com",
    "file:///etc",
    "hub.example.com",
    "https://",
    "https://hub.example.com:99999",
]


def _urllib_ok(url):
    """The reference: urllib's own split. An http(s) URL with a host, a valid port and no user, password, query
    or fragment."""
    u = urllib.parse.urlsplit(url)
    try:
        port_ok = u.port is None or 1 <= u.port <= 65535
    except ValueError:
        port_ok = False
    return (
        u.scheme in ("http", "https")
        and bool(u.hostname)
        and port_ok
        and u.username is None
        and u.password is None
        and not u.query
        and not u.fragment
    )


@pytest.mark.parametrize("name", ENDPOINTS)
def test_endpoints_are_http_urls_without_credentials(name):
    row = environment.env_row(name, "fa")
    assert (row.kind, row.type) == ("pass-on-request", "httpurl"), row
    for url in URLS:
        got = environment.check_values([f"{name}={url}"], pass_env=(name,))
        assert (not got) == _urllib_ok(url), (name, url, got)
        assert not any("secret" in why or "tokenvalue" in why for _, why, _ in got)
    # Ray's job env_vars get the same rule
    bad = environment.check_ray_job_config(
        '{"runtime_env": {"env_vars": {"%s": "https://u:p@x.example"}}}' % name, pass_env=(name,)
    )
    assert bad and name in bad[0][1]


def test_hub_clients_read_hf_endpoint():
    if SITE is None:
        pytest.skip("no site-packages with the Hub clients")
    for rel, line in [
        ("huggingface_hub/constants.py", 'os.getenv("HF_ENDPOINT"'),
        ("huggingface_hub/constants.py", 'os.environ.get("HF_INFERENCE_ENDPOINT"'),
        ("transformers/utils/hub.py", 'os.environ.get("HF_ENDPOINT"'),
        ("datasets/config.py", 'os.environ.get("HF_ENDPOINT"'),
    ]:
        assert line in (SITE / rel).read_text(encoding="utf-8"), rel


# ---- warnings: the action error ---------------------------------------------------------------------------------

WARNINGS_ERROR = [
    "error",
    "error::DeprecationWarning",
    "ignore,error::UserWarning",
    "e",
    "err::FutureWarning",
    " error :: ResourceWarning",
    "default,erro",
    "error:some message",
    "error::NoSuchCategory",
]
#: written as -W options: CPython ignores them (no filter at all) and says so in every process
WARNINGS_OPTION_FORM = ["-Werror", "-W error", "ignore,-Wignore::DeprecationWarning"]
WARNINGS_OK = ["ignore::DeprecationWarning", "default", "always::UserWarning", "module", "once", "all", "ERROR", ""]


def _cpython_error_filter(value):
    """The reference: does CPython, started with PYTHONWARNINGS=value, hold a filter whose action is error?"""
    env = {"PATH": os.environ["PATH"], "PYTHONWARNINGS": value}
    out = subprocess.run(
        [sys.executable, "-c", "import warnings; print(any(f[0] == 'error' for f in warnings.filters))"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return out == "True"


@pytest.mark.parametrize("value", WARNINGS_ERROR + WARNINGS_OPTION_FORM + WARNINGS_OK)
def test_warnings_refuses_every_filter_cpython_makes_an_error(value):
    why = environment.check_value(environment.env_row("PYTHONWARNINGS", "fa"), value)
    if _cpython_error_filter(value):
        assert "action error" in why, value
    if not why:
        assert not _cpython_error_filter(value), value
    assert bool(why) == (value in WARNINGS_ERROR + WARNINGS_OPTION_FORM), value


@pytest.mark.parametrize("value", WARNINGS_OPTION_FORM)
def test_a_w_option_form_is_refused_since_cpython_ignores_it(value):
    """The reference: CPython prints "Invalid -W option ignored" for the filter and installs nothing for it."""
    env = {"PATH": os.environ["PATH"], "PYTHONWARNINGS": value}
    r = subprocess.run([sys.executable, "-c", "pass"], env=env, capture_output=True, text=True, check=True)
    assert "Invalid -W option ignored" in r.stderr
    why = environment.check_value(environment.env_row("PYTHONWARNINGS", "fa"), value)
    assert "-W command-line option" in why


def test_an_error_filter_crashes_on_a_harmless_warning():
    """Why: with PYTHONWARNINGS=error::DeprecationWarning an import that warns stops the interpreter."""
    env = {"PATH": os.environ["PATH"], "PYTHONWARNINGS": "error::DeprecationWarning"}
    code = "import warnings; warnings.warn('old', DeprecationWarning)"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 1 and "DeprecationWarning: old" in r.stderr
    probs = childenv.value_problems("fa", ["PYTHONWARNINGS=error::DeprecationWarning"], "", (), [])
    assert len(probs) == 1 and probs[0].startswith("PYTHONWARNINGS: has a filter with the action error")
