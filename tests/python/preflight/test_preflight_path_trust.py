"""The one path rule in the preflight (which also runs alone: ``python -m vlgrpo preflight``): the model folder and
every entry in it (``model.untrusted``, code loading: never waived), the data files (``data.untrusted``) and the
checkpoint folder whatever the resume mode (``rules.checkpoint-untrusted``). Each hostile form is one the kernel lets
uid 12345 exploit (``setpriv``: write the file, or plant an entry); the accepted forms (root's 0755, 0700, a Hugging
Face cache snapshot whose files are links into its blobs) pass. Needs root (chown, setpriv)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from preflight_helpers import MODEL_30B

from vlgrpo.preflight import checkpoint_volume
from vlgrpo.preflight.checks import CODES
from vlgrpo.preflight.dataset import _expand
from vlgrpo.preflight.model_dir import check_model_dir
from vlgrpo.preflight.report import Report
from vlgrpo.preflight.rules import Locator

OTHER = 12345
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root (chown) and setpriv to act as another user"
)
WRITE = (
    "import os, sys\n"
    "p = sys.argv[1]\n"
    "try:\n"
    "    if os.path.isdir(p):\n"
    "        open(os.path.join(p, 'planted.py'), 'x').close(); os.unlink(os.path.join(p, 'planted.py'))\n"
    "    else:\n"
    "        open(p, 'a').close()\n"
    "    print('changed')\n"
    "except OSError: pass\n"
)


def _other_user_can_write(path) -> bool:
    """The kernel's answer: uid 12345 plants a file in folder ``path`` or opens file ``path`` for writing."""
    out = subprocess.run(
        ["setpriv", f"--reuid={OTHER}", f"--regid={OTHER}", "--clear-groups", sys.executable, "-c", WRITE, str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.strip() == "changed"


@pytest.fixture
def base(tmp_path_factory):
    """A root-owned 0755 folder the other user can reach (pytest's folders above it made 0755 as well)."""
    d = tmp_path_factory.mktemp("trust")
    for p in (d, d.parent, d.parent.parent):
        if str(p).startswith("/tmp/") and os.stat(p).st_uid == 0:
            os.chmod(p, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _model(base: Path) -> Path:
    dst = base / "model"
    shutil.copytree(MODEL_30B, dst)
    for root, _dirs, files in os.walk(dst):
        os.chmod(root, 0o755)
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)
    return dst


def _untrusted(report: Report, code: str):
    return [f for f in report.findings if f.code == code]


def _model_findings(path) -> list:
    report = Report()
    check_model_dir(str(path), report)
    return _untrusted(report, "model.untrusted")


def test_the_codes_are_code_loading_for_the_model_and_errors():
    assert CODES["model.untrusted"].runs_code and CODES["model.untrusted"].severity == "error"
    assert CODES["data.untrusted"].severity == "error"


@pytest.mark.parametrize("mode", [0o755, 0o700])
def test_a_root_owned_model_folder_passes(base, mode):
    model = _model(base)
    model.chmod(mode)
    assert _model_findings(model) == []
    assert not _other_user_can_write(model)
    report = Report()
    info = check_model_dir(str(model), report)
    assert info["clean"], [f.code for f in report.findings]


def test_a_hugging_face_cache_snapshot_of_links_into_its_blobs_passes(base):
    # huggingface_hub's layout: snapshots/<rev>/<name> -> ../../blobs/<hash>
    repo = base / "models--Qwen--Qwen3-VL"
    blobs, snap = repo / "blobs", repo / "snapshots" / "abc123"
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    for i, name in enumerate(sorted(os.listdir(MODEL_30B))):
        if os.path.isfile(os.path.join(MODEL_30B, name)):
            shutil.copy(os.path.join(MODEL_30B, name), blobs / f"blob{i}")
            (snap / name).symlink_to(f"../../blobs/blob{i}")
    assert _model_findings(snap) == []
    # a blob others can write is what the link names: refused, naming the blob
    victim = sorted(blobs.iterdir())[0]
    victim.chmod(0o666)
    assert _other_user_can_write(victim)
    (hit,) = _model_findings(snap)
    assert f"{victim} can be written by every user (mode 0666)" in hit.what, hit.what


def _hostile_model(kind: str, base: Path) -> tuple[Path, Path, str, Path]:
    """(the folder to check, the failing component, its why, what the other user writes) for ``kind``."""
    model = _model(base)
    if kind == "world-writable folder":
        model.chmod(0o777)
        return model, model, "can be written by every user (mode 0777)", model
    if kind == "group-writable parent":
        os.chown(base, 0, OTHER)
        base.chmod(0o775)
        return model, base, "can be written by its group (mode 0775)", base
    if kind == "another uid":
        os.chown(model, OTHER, OTHER)
        return model, model, f"is owned by uid {OTHER}", model
    if kind == "link into a writable place":
        shared = base / "shared"
        shared.mkdir()
        shared.chmod(0o777)
        model.rename(shared / "model")
        (base / "link").symlink_to(shared / "model")
        return base / "link", shared, "can be written by every user (mode 0777)", shared
    if kind == "writable tokenizer_config.json":
        f = model / "tokenizer_config.json"
        f.chmod(0o666)
        return model, f, "can be written by every user (mode 0666)", f
    if kind == "writable sub-folder":
        sub = model / "additional_chat_templates"
        sub.mkdir(mode=0o755)
        sub.chmod(0o777)
        return model, sub, "can be written by every user (mode 0777)", sub
    if kind == "linked folder with a file of another uid":
        elsewhere = base / "elsewhere"
        elsewhere.mkdir(mode=0o755)
        (elsewhere / "tmpl.jinja").write_text("{{ x }}")
        os.chown(elsewhere / "tmpl.jinja", OTHER, OTHER)
        (model / "additional_chat_templates").symlink_to(elsewhere)
        return model, elsewhere / "tmpl.jinja", f"is owned by uid {OTHER}", elsewhere / "tmpl.jinja"
    raise ValueError(kind)


MODEL_HOSTILE = (
    "world-writable folder",
    "group-writable parent",
    "another uid",
    "link into a writable place",
    "writable tokenizer_config.json",
    "writable sub-folder",
    "linked folder with a file of another uid",
)


@pytest.mark.parametrize("kind", MODEL_HOSTILE)
def test_a_model_folder_another_user_can_change_is_refused(base, kind):
    path, component, why, written = _hostile_model(kind, base)
    assert _other_user_can_write(written), "the kernel must let uid 12345 change it (the reference)"
    report = Report()
    info = check_model_dir(str(path), report)
    (hit,) = _untrusted(report, "model.untrusted")
    assert hit.severity == "error" and not info["clean"]
    assert hit.what.startswith("the model folder is not safe from other users: ") and f"{component} {why}" in hit.what
    assert str(component) in hit.fix and "actor_rollout_ref.model.path" in hit.fix
    assert hit.where.key == "actor_rollout_ref.model.path"


def _data(base: Path) -> Path:
    d = base / "data"
    d.mkdir(mode=0o755)
    f = d / "train.parquet"
    f.write_bytes(b"PAR1")
    f.chmod(0o644)
    return f


def _hostile_data(kind: str, base: Path) -> tuple[Path, Path, str, Path]:
    f = _data(base)
    if kind == "world-writable file":
        f.chmod(0o666)
        return f, f, "can be written by every user (mode 0666)", f
    if kind == "world-writable folder":
        f.parent.chmod(0o777)
        return f, f.parent, "can be written by every user (mode 0777)", f.parent
    if kind == "group-writable parent":
        os.chown(f.parent, 0, OTHER)
        f.parent.chmod(0o775)
        return f, f.parent, "can be written by its group (mode 0775)", f.parent
    if kind == "another uid":
        os.chown(f, OTHER, OTHER)
        return f, f, f"is owned by uid {OTHER}", f
    if kind == "link into a writable place":
        shared = base / "shared"
        shared.mkdir()
        shared.chmod(0o777)
        f.rename(shared / f.name)
        (f.parent / "link.parquet").symlink_to(shared / f.name)
        return f.parent / "link.parquet", shared, "can be written by every user (mode 0777)", shared
    raise ValueError(kind)


@pytest.mark.parametrize(
    "kind",
    [
        "world-writable file",
        "world-writable folder",
        "group-writable parent",
        "another uid",
        "link into a writable place",
    ],
)
def test_a_data_file_another_user_can_change_is_refused_and_not_read(base, kind):
    path, component, why, written = _hostile_data(kind, base)
    assert _other_user_can_write(written)
    report = Report()
    assert _expand([str(path)], "data.train_files", report, Locator()) == []
    (hit,) = _untrusted(report, "data.untrusted")
    assert f"{component} {why}" in hit.what and str(component) in hit.fix and "data.train_files" in hit.fix
    # a glob that matches it: the same finding, and no 'matches no file'
    report = Report()
    assert _expand([str(path.parent / "*.parquet")], "data.train_files", report, Locator()) == []
    assert [f.code for f in report.findings] == ["data.untrusted"]


@pytest.mark.parametrize("mode", [0o755, 0o700])
def test_a_root_owned_data_file_passes(base, mode):
    f = _data(base)
    f.parent.chmod(mode)
    report = Report()
    assert _expand([str(f)], "data.train_files", report, Locator()) == [str(f)]
    assert report.findings == []


def _work(root: Path, mode: str):
    return OmegaConf.create(
        {"trainer": {"default_local_dir": str(root), "resume_mode": mode, "resume_from_path": None, "save_freq": -1}}
    )


@pytest.fixture(autouse=True)
def _one_byte_checkpoints(monkeypatch):
    # the space check after the trust check sizes the 30B model on the meta device: not what these tests are about
    monkeypatch.setattr("vlgrpo.checkpoint.size.checkpoint_bytes", lambda path: (1, "one byte (test)"))


def _ckpt_findings(root: Path, mode: str) -> list:
    report = Report()
    checkpoint_volume.check_checkpoint_volume(_work(root, mode), report, Locator(), MODEL_30B)
    return _untrusted(report, "rules.checkpoint-untrusted")


def _hostile_ckpt(kind: str, base: Path) -> tuple[Path, Path, str, Path]:
    ckpt = base / "ckpt"
    ckpt.mkdir(mode=0o755)
    if kind == "world-writable folder":
        ckpt.chmod(0o777)
        return ckpt, ckpt, "can be written by every user (mode 0777)", ckpt
    if kind == "group-writable parent":
        os.chown(base, 0, OTHER)
        base.chmod(0o775)
        return ckpt, base, "can be written by its group (mode 0775)", base
    if kind == "another uid":
        os.chown(ckpt, OTHER, OTHER)
        return ckpt, ckpt, f"is owned by uid {OTHER}", ckpt
    if kind == "link into a writable place":
        shared = base / "shared"
        shared.mkdir()
        shared.chmod(0o777)
        ckpt.rename(shared / "ckpt")
        (base / "link").symlink_to(shared / "ckpt")
        return base / "link", shared, "can be written by every user (mode 0777)", shared
    if kind == "missing, in a world-writable folder":
        shared = base / "shared"
        shared.mkdir()
        shared.chmod(0o777)
        return shared / "ckpt", shared, "can be written by every user (mode 0777)", shared
    raise ValueError(kind)


@pytest.mark.parametrize(
    "kind",
    [
        "world-writable folder",
        "group-writable parent",
        "another uid",
        "link into a writable place",
        "missing, in a world-writable folder",
    ],
)
@pytest.mark.parametrize("mode", ["disable", "auto"])
def test_a_checkpoint_folder_another_user_can_change_is_refused_whatever_the_resume_mode(base, kind, mode, monkeypatch):
    path, component, why, written = _hostile_ckpt(kind, base)
    assert _other_user_can_write(written)
    (hit,) = _ckpt_findings(path, mode)
    assert "the checkpoint folder is not safe from other users" in hit.what and f"{component} {why}" in hit.what
    assert str(component) in hit.fix


@pytest.mark.parametrize("mode", [0o755, 0o700])
def test_a_root_owned_checkpoint_folder_passes_and_a_missing_one_in_a_good_folder(base, mode):
    ckpt = base / "ckpt"
    ckpt.mkdir(mode=mode)
    assert _ckpt_findings(ckpt, "disable") == [] and _ckpt_findings(ckpt, "auto") == []
    assert _ckpt_findings(base / "later", "disable") == []  # verl creates it; its folder passes
