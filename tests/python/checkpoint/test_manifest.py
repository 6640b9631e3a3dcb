"""C03: a global_step_N folder is loaded only when its manifests account for every file, byte for byte.

The folder here has verl v0.8.0's file names (fully-async recipe, 2 FSDP ranks); the contents are arbitrary bytes
(the patch tests use real torch.save outputs). sha256 values are compared with hashlib over the same bytes."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from vlgrpo.checkpoint import manifest, resume
from vlgrpo.checkpoint.manifest import CheckpointRefused

FOREIGN_UID = 4242


def _ckpt(tmp_path, step=5, ranks=2):
    root = tmp_path / "ckpt"
    step_dir = root / f"global_step_{step}"
    (step_dir / "actor" / "huggingface").mkdir(parents=True)
    files = {}
    for r in range(ranks):
        for kind in ("model", "optim", "extra_state"):
            files[f"actor/{kind}_world_size_{ranks}_rank_{r}.pt"] = os.urandom(1000 + r * 7)
    files["actor/fsdp_config.json"] = b'{"FSDP_version": 2, "world_size": 2}'
    files["actor/huggingface/config.json"] = b"{}"
    files["data.pt"] = os.urandom(300)
    for rel, data in files.items():
        (step_dir / rel).write_bytes(data)
    (root / "latest_checkpointed_iteration.txt").write_text(str(step))
    return root, step_dir, files


def _save_like_verl(step_dir, files, ranks=2):
    """One manifest part per writer: each FSDP rank its shards (rank 0 also the shared files), the rollouter
    data.pt -- what the checkpoint patch writes."""
    for r in range(ranks):
        mine = [f for f in files if f.endswith(f"_rank_{r}.pt")]
        if r == 0:
            mine += [f for f in files if f.startswith("actor/") and "_rank_" not in f]
        manifest.write_part(step_dir, [step_dir / f for f in mine], f"actor-rank-{r:05d}", verl_version="0.8.0")
    manifest.write_part(step_dir, [step_dir / "data.pt"], "rollouter", verl_version="0.8.0")


def test_written_manifests_verify_and_hash_what_is_read(tmp_path):
    _, step_dir, files = _ckpt(tmp_path)
    _save_like_verl(step_dir, files)
    part = json.loads((step_dir / "vlgrpo-manifest-actor-rank-00001.json").read_text())
    assert part["step"] == 5 and part["uid"] == os.getuid() and part["verl_version"] == "0.8.0"
    rel = "actor/model_world_size_2_rank_1.pt"
    assert part["files"][rel] == {"size": len(files[rel]), "sha256": hashlib.sha256(files[rel]).hexdigest()}
    res = manifest.verify(step_dir, [rel, "actor/optim_world_size_2_rank_1.pt"])
    assert res["files"] == len(files) and res["bytes_hashed"] == 2 * len(files[rel])


def test_no_manifest_names_the_trust_command(tmp_path):
    _, step_dir, _ = _ckpt(tmp_path)
    with pytest.raises(CheckpointRefused) as exc:
        manifest.verify(step_dir)
    assert f"python -m vlgrpo checkpoint trust {step_dir}" in str(exc.value)


def test_changed_file_refused_by_hash(tmp_path):
    _, step_dir, files = _ckpt(tmp_path)
    _save_like_verl(step_dir, files)
    target = step_dir / "data.pt"
    data = bytearray(target.read_bytes())
    data[10] ^= 1  # same size: only the hash shows it
    target.write_bytes(bytes(data))
    manifest.inventory(step_dir)  # the cheap checks pass
    with pytest.raises(CheckpointRefused, match="data.pt: changed since it was written"):
        manifest.verify(step_dir, ["data.pt"])


def test_resized_extra_and_missing_files_refused_without_hashing(tmp_path):
    _, step_dir, files = _ckpt(tmp_path)
    _save_like_verl(step_dir, files)
    (step_dir / "actor" / "evil.pt").write_bytes(b"x")
    with pytest.raises(CheckpointRefused, match=r"evil.pt: is in no manifest"):
        manifest.inventory(step_dir)
    os.remove(step_dir / "actor" / "evil.pt")
    with open(step_dir / "actor/extra_state_world_size_2_rank_0.pt", "ab") as fh:
        fh.write(b"more")
    with pytest.raises(CheckpointRefused, match=r"extra_state_world_size_2_rank_0.pt: has \d+ bytes"):
        manifest.inventory(step_dir)
    os.remove(step_dir / "actor/extra_state_world_size_2_rank_0.pt")
    with pytest.raises(CheckpointRefused, match=r"extra_state_world_size_2_rank_0.pt: is listed in .* but missing"):
        manifest.inventory(step_dir)


def test_group_writable_file_and_folder_refused(tmp_path):
    _, step_dir, files = _ckpt(tmp_path)
    _save_like_verl(step_dir, files)
    os.chmod(step_dir / "data.pt", 0o664)
    with pytest.raises(CheckpointRefused, match=r"data.pt: file is group- or world-writable \(mode 0664\)"):
        manifest.inventory(step_dir)
    os.chmod(step_dir / "data.pt", 0o644)
    os.chmod(step_dir / "actor", 0o777)
    with pytest.raises(CheckpointRefused, match=r"actor: folder is group- or world-writable"):
        manifest.inventory(step_dir)


def test_write_part_drops_group_write_bits_of_what_it_lists(tmp_path):
    _, step_dir, files = _ckpt(tmp_path)
    os.chmod(step_dir / "data.pt", 0o666)
    os.chmod(step_dir, 0o775)
    _save_like_verl(step_dir, files)
    assert os.stat(step_dir / "data.pt").st_mode & 0o777 == 0o644
    assert os.stat(step_dir).st_mode & 0o777 == 0o755
    manifest.inventory(step_dir)


@pytest.mark.skipif(os.getuid() != 0, reason="chown to another uid needs root (CI runs as root)")
def test_foreign_owned_file_and_manifest_refused(tmp_path):
    _, step_dir, files = _ckpt(tmp_path)
    _save_like_verl(step_dir, files)
    os.chown(step_dir / "actor/model_world_size_2_rank_1.pt", FOREIGN_UID, FOREIGN_UID)
    with pytest.raises(CheckpointRefused, match=rf"model_world_size_2_rank_1.pt: file is owned by uid {FOREIGN_UID}"):
        manifest.inventory(step_dir)
    os.chown(step_dir / "actor/model_world_size_2_rank_1.pt", 0, 0)
    os.chown(step_dir / "vlgrpo-manifest-rollouter.json", FOREIGN_UID, FOREIGN_UID)
    with pytest.raises(CheckpointRefused, match=r"vlgrpo-manifest-rollouter.json: manifest is owned by uid"):
        manifest.inventory(step_dir)


def test_symlink_and_forged_manifest_refused(tmp_path):
    _, step_dir, files = _ckpt(tmp_path)
    _save_like_verl(step_dir, files)
    os.remove(step_dir / "data.pt")
    os.symlink(tmp_path / "elsewhere.pt", step_dir / "data.pt")
    with pytest.raises(CheckpointRefused, match=r"data.pt: is a symlink"):
        manifest.inventory(step_dir)
    os.remove(step_dir / "data.pt")
    (step_dir / "data.pt").write_bytes(files["data.pt"])
    part = step_dir / "vlgrpo-manifest-rollouter.json"
    doc = json.loads(part.read_text())
    doc["step"] = 7
    part.write_text(json.dumps(doc))
    with pytest.raises(CheckpointRefused, match=r"manifest is for step 7, the folder is global_step_5"):
        manifest.inventory(step_dir)
    doc.update(step=5, uid=os.getuid() + 1)
    part.write_text(json.dumps(doc))
    with pytest.raises(CheckpointRefused, match=r"manifest was written by uid"):
        manifest.inventory(step_dir)
    doc.update(uid=os.getuid(), files={"../../etc/passwd": {"size": 1, "sha256": "0" * 64}})
    part.write_text(json.dumps(doc))
    with pytest.raises(CheckpointRefused, match=r"bad entry '../../etc/passwd'"):
        manifest.inventory(step_dir)


def test_trust_cli_then_verify_cli(tmp_path):
    _, step_dir, files = _ckpt(tmp_path)
    os.chmod(step_dir / "actor", 0o775)
    cmd = [sys.executable, "-m", "vlgrpo", "checkpoint"]
    refused = subprocess.run(cmd + ["verify", str(step_dir)], capture_output=True, text=True)
    assert refused.returncode == 2 and "checkpoint trust" in refused.stderr
    done = subprocess.run(cmd + ["trust", str(step_dir)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    ok = subprocess.run(cmd + ["verify", "--hash", "--json", str(step_dir)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["files"] == len(files)
    assert os.stat(step_dir / "actor").st_mode & 0o022 == 0


def test_tracker_pointing_outside_and_resume_path_rule(tmp_path):
    root, step_dir, files = _ckpt(tmp_path)
    _save_like_verl(step_dir, files)
    assert resume.resume_folder(root, "auto") == str(step_dir)
    assert resume.resume_folder(root, "disable") is None
    outside = tmp_path / "other" / "global_step_9"
    outside.mkdir(parents=True)
    os.symlink(outside, root / "global_step_9")
    (root / "latest_checkpointed_iteration.txt").write_text("9")
    with pytest.raises(CheckpointRefused, match="outside the checkpoint folder"):
        resume.resume_folder(root, "auto")
    (root / "latest_checkpointed_iteration.txt").write_text("5/../x")
    with pytest.raises(CheckpointRefused, match="not a step number"):
        resume.resume_folder(root, "auto")
    with pytest.raises(CheckpointRefused, match=r"global_step_9: lies outside .* carries no valid manifest"):
        resume.resume_folder(root, "resume_path", str(outside))
    manifest.trust(outside)
    assert resume.resume_folder(root, "resume_path", str(outside)) == str(outside)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "vlgrpo",
            "checkpoint",
            "resume-check",
            "--checkpoint-dir",
            str(root),
            "--mode",
            "resume_path",
            "--from",
            str(step_dir),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0 and f"resumes from {step_dir}" in proc.stdout, proc.stderr


# ---- hostile names and manifests: exit 2 naming the file, never a traceback (attack review findings 11) ---------


@pytest.mark.parametrize("suffix", ["\u00b2", "\u0663", "\uff15", "5\u00b2", "9" * 200, "", "+5", " 5"])
def test_step_folder_names_must_be_ascii_digits(tmp_path, suffix):
    """str.isdigit() takes superscripts, Arabic-Indic and fullwidth digits, and int() some of them ('\u0663' is 3):
    a folder global_step_\u00b2 crashed `checkpoint verify` with a ValueError traceback (exit 1). verl itself writes
    global_step_{int}; a step of 200 digits is no step of a run either."""
    step_dir = tmp_path / "ckpt" / ("global_step_" + suffix)
    step_dir.mkdir(parents=True)
    with pytest.raises(CheckpointRefused, match="is not a global_step_N folder"):
        manifest.step_of(step_dir)
    for cmd in ("verify", "trust"):
        proc = subprocess.run(
            [sys.executable, "-m", "vlgrpo", "checkpoint", cmd, str(step_dir)], capture_output=True, text=True
        )
        assert proc.returncode == 2, proc.stderr
        assert "is not a global_step_N folder" in proc.stderr and "Traceback" not in proc.stderr
    assert manifest.step_of(tmp_path / "ckpt" / "global_step_12") == 12


def test_deeply_nested_manifest_is_refused_naming_it(tmp_path):
    """A manifest of 100,000 nested '[' made json.load raise RecursionError: exit 1 and a traceback."""
    _, step_dir, files = _ckpt(tmp_path)
    _save_like_verl(step_dir, files)
    part = step_dir / "vlgrpo-manifest-rollouter.json"
    part.write_text("[" * 100_000)
    with pytest.raises(CheckpointRefused, match=r"vlgrpo-manifest-rollouter.json: manifest is unreadable"):
        manifest.inventory(step_dir)
    proc = subprocess.run(
        [sys.executable, "-m", "vlgrpo", "checkpoint", "verify", str(step_dir)], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "vlgrpo-manifest-rollouter.json" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
