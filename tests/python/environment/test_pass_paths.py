"""Passed variables that name a library, a plugin, a file or a folder get the one path rule; user names and the
Ray dashboard's bind address are typed; variables a loader, OpenSSL, glibc, ncurses or bash act on never pass
(attack review F2, F4, F7, F8). The reference is what the test makes on disk (chmod, another folder) and the
upstream readers named in each case, not the check's code."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vlgrpo import environment

#: untyped pass rows whose name has a path or library word but whose value is no path (reviewed)
NOT_PATHS = {
    "PYTORCH_CUDA_ALLOC_CONF": "allocator options (expandable_segments:True,...)",
    "PYTORCH_ALLOC_CONF": "allocator options",
    "PYTORCH_NPU_ALLOC_CONF": "allocator options",
    "VLLM_DISABLE_COMPILE_CACHE": "0 or 1",
}


def check(name: str, value: str, pass_env: tuple[str, ...] = ()) -> str:
    row = environment.env_row(name, "fa")
    assert row is not None, name
    return environment.check_value(row, value, "fa", pass_env or (name,), name=name)


def test_every_passed_row_named_like_a_path_or_library_has_a_type() -> None:
    untyped = [
        r.name
        for r in environment.rows()
        if r.kind in ("pass", "pass-on-request")
        and "*" not in r.name
        and environment.shape(r.name) in ("path", "loads", "peer")
        and not r.type
    ]
    assert sorted(untyped) == sorted(NOT_PATHS)


# the library, plugin and file variables of NCCL 2.27, vLLM 0.13.0, vLLM-Ascend, Triton 3.5, torch, OpenSSL, requests
LIBRARY_AND_FILE_VARS = [
    "HCCL_SO_PATH",
    "VLLM_NCCL_SO_PATH",
    "VLLM_CUDART_SO_PATH",
    "TRITON_CUPTI_LIB_PATH",
    "NCCL_CONF_FILE",
    "NCCL_TOPO_FILE",
    "NCCL_GRAPH_FILE",
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NETRC",
    "HOSTALIASES",
]
FOLDER_VARS = ["SSL_CERT_DIR", "TRITON_LIBCUDA_PATH", "ASCEND_CUSTOM_OPP_PATH"]
# files the library creates or truncates (NCCL's fopen(..., "w"), torch's flight recorder): attacker review R4
OUTFILE_VARS = ["NCCL_DEBUG_FILE", "NCCL_TOPO_DUMP_FILE", "NCCL_GRAPH_DUMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"]


@pytest.mark.parametrize("name", OUTFILE_VARS)
def test_a_file_the_library_writes_must_be_new_no_dotfile_in_a_folder_of_yours(name: str, tmp_path: Path) -> None:
    mine = tmp_path / "logs"
    mine.mkdir(mode=0o700)
    assert check(name, str(mine / "nccl.%h.%p.log")) == ""
    (mine / "there.log").write_text("x")
    assert "exists already" in check(name, str(mine / "there.log"))  # a login script, a checkpoint: truncated
    assert "dotfile" in check(name, str(mine / ".bash_profile"))  # need not exist to run at the next login
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    assert "every user" in check(name, str(shared / "new.log"))
    assert check(name, "/tmp/vlgrpo-test-not-there-%d.log" % os.getpid())  # anyone may plant a link there first
    assert "absolute path" in check(name, "nccl.log")


@pytest.mark.parametrize("name", LIBRARY_AND_FILE_VARS + ["NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN"])
def test_a_file_in_a_folder_every_user_can_write_is_refused(name: str, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    lib = shared / "libnccl.so.2"
    lib.write_bytes(b"\x7fELF")
    os.chmod(shared, 0o777)
    got = check(name, str(lib))
    assert got and "every user" in got, got
    os.chmod(shared, 0o755)
    assert check(name, str(lib)) == ""


@pytest.mark.parametrize("name", LIBRARY_AND_FILE_VARS + FOLDER_VARS)
@pytest.mark.parametrize("value", ["libnccl.so.2", "./ca.pem", "../lib/x.so", "certs"])
def test_a_relative_path_is_refused(name: str, value: str) -> None:
    assert "absolute path" in check(name, value)


@pytest.mark.parametrize("name", LIBRARY_AND_FILE_VARS)
def test_a_file_others_can_write_or_one_not_there_yet_in_tmp_is_refused(name: str, tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_text("x")
    os.chmod(f, 0o666)
    assert "every user can write" in check(name, str(f))
    # /tmp is sticky and writable by every user: anyone may create the file first (or a link in its place)
    assert check(name, "/tmp/vlgrpo-test-not-there-%d.so" % os.getpid())


@pytest.mark.parametrize("name", FOLDER_VARS)
def test_a_folder_others_can_write_is_refused_and_a_private_one_passes(name: str, tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    assert check(name, str(d)) == ""
    os.chmod(d, 0o775)
    assert "group" in check(name, str(d))


def test_a_path_in_the_checkpoint_folder_is_refused(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "libhccl.so").write_bytes(b"")
    row = environment.env_row("HCCL_SO_PATH", "fa")
    assert row is not None
    got = environment.check_value(row, str(ckpt / "libhccl.so"), "fa", ("HCCL_SO_PATH",), (str(ckpt),), name="x")
    assert "checkpoint" in got


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("aws-ofi", True),  # NCCL dlopens libnccl-net-aws-ofi.so from the library path (src/plugin/plugin_open.cc)
        ("ofi", True),
        ("none", True),
        ("../../tmp/x", False),
        ("x/y", False),
        (".hidden", False),
        ("-x", False),
        ("a b", False),
        ("", True),  # empty counts as unset
    ],
)
def test_a_plugin_is_a_plain_name_or_an_absolute_path(value: str, ok: bool) -> None:
    assert (check("NCCL_NET_PLUGIN", value) == "") is ok


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("root", True),
        ("ray", True),
        ("svc_train.01", True),
        ("MACHINE$", True),
        ("j.doe@corp.example.com", True),  # SSSD / AD logins
        ("../../etc", False),  # torch: /tmp/torchinductor_<user> (torch/_inductor/runtime/cache_dir_utils.py)
        ("a/b", False),
        ("..", False),
        (".", False),
        ("-rf", False),
        ("", True),  # empty counts as unset
        ("x" * 129, False),
    ],
)
@pytest.mark.parametrize("name", ["USER", "LOGNAME"])
def test_user_names_cannot_carry_a_path(name: str, value: str, ok: bool) -> None:
    assert (check(name, value) == "") is ok


@pytest.mark.parametrize(
    "name",
    [
        "OPENSSL_CONF",
        "OPENSSL_ENGINES",
        "OPENSSL_MODULES",
        "GLIBC_TUNABLES",
        "LOCPATH",
        "NLSPATH",
        "TERMINFO",
        "TERMINFO_DIRS",
        "TERMCAP",
        "PS4",
        "PROMPT_COMMAND",
        "BASH_XTRACEFD",
        "CDPATH",
        "GLOBIGNORE",
    ],
)
def test_what_openssl_glibc_ncurses_or_bash_act_on_never_passes(name: str) -> None:
    row = environment.env_row(name, "fa")
    assert row is not None and row.kind == "drop", name


@pytest.mark.parametrize(("value", "ok"), [("127.0.0.1", True), ("10.0.0.5", True), ("0.0.0.0", False)])
def test_the_dashboard_binds_one_address_never_every_interface(value: str, ok: bool) -> None:
    row = environment.setting_row("VLGRPO_RAY_DASHBOARD_HOST", "node")
    assert row is not None
    if ok:
        assert environment.validate(row, value) == value
    else:
        with pytest.raises(environment.Refused):
            environment.validate(row, value)


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("http://proxy.corp:3128", True),
        ("http://user:s3cret@proxy.corp:3128/", True),
        ("https://10.0.0.9:8443", True),
        ("socks5h://bastion:1080", True),
        ("proxy.corp:3128", True),  # requests prepends http:// (utils.prepend_scheme_if_needed)
        ("http://proxy.corp:3128/path", False),
        ("http://proxy.corp:3128?x=1", False),
        ("http://proxy.corp:3128#f", False),
        ("ftp://proxy.corp:21", False),
        ("http://proxy.corp:0", False),
        ("http://proxy.corp:99999", False),
        ("http://:3128", False),
        ("http://010.0.0.1:3128", False),  # inet_aton reads 010 as octal 8
        ("http://pro xy:3128", False),
    ],
)
@pytest.mark.parametrize("name", ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "ALL_PROXY", "all_proxy"])
def test_a_proxy_is_a_url_of_a_host_without_a_path(name: str, value: str, ok: bool) -> None:
    assert (check(name, value) == "") is ok


@pytest.mark.parametrize(
    "url", ["http://proxy.corp:3128", "http://u:p@proxy.corp:3128/", "socks5h://10.0.0.1:1080", "proxy.corp:3128"]
)
def test_the_proxy_host_is_the_one_urllib_reads_and_no_credentials_come_back(url: str) -> None:
    from urllib.parse import urlsplit

    ref = urlsplit(url if "://" in url else "http://" + url)
    got = environment.proxy_parts(url)
    assert got is not None
    scheme, hostport, creds = got
    assert (scheme, hostport, creds) == (ref.scheme, f"{ref.hostname}:{ref.port}", ref.username is not None)
    assert "u:p" not in hostport
