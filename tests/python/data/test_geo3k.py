"""geo3k converter: checked against independent expectations.

References: the hiyouga/geometry3k card's documented mapping from the original Geometry3K records
(``problem = "<image>" + annotat_text``, ``answer = choices[ABCD.index(answer)]``), the readable copy of the
sample rows in ``rows.jsonl`` (with the sha256 of each diagram), verl v0.8.0's geo3k preprocessing output
schema (instruction text written out here as a literal), and the split sizes in assets/SOURCES.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from vlgrpo.data import geo3k

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SAMPLE = os.path.join(REPO, "assets", "geo3k-sample")
HIYOUGA = os.path.join(SAMPLE, "hiyouga-geometry3k-format")
ORIGINAL = os.path.join(SAMPLE, "original")
SPLITS = ("train", "validation", "test")
# verl v0.8.0 examples/data_preprocess/geo3k.py, instruction_following
VERL_INSTRUCTION = (
    r"You FIRST think about the reasoning process as an internal monologue and then provide the final answer. "
    r"The reasoning process MUST BE enclosed within <think> </think> tags. "
    r"The final answer MUST BE put in \boxed{}."
)


def _rows_jsonl():
    out = {"train": [], "validation": [], "test": []}
    with open(os.path.join(HIYOUGA, "rows.jsonl"), encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            out[{"val": "validation"}.get(r["split"], r["split"])].append(r)
    for rows in out.values():
        rows.sort(key=lambda r: r["geometry3k_id"])
    return out


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    from vlgrpo.data.geo3k import convert

    a = str(tmp_path_factory.mktemp("hiyouga"))
    b = str(tmp_path_factory.mktemp("original"))
    counts_a = convert(HIYOUGA, a, splits=SPLITS)
    counts_b = convert(ORIGINAL, b, splits=SPLITS)
    return a, b, counts_a, counts_b


def test_counts_match_the_sample(converted):
    _, _, ca, cb = converted
    assert ca == cb == {"train": 20, "validation": 5, "test": 15}


def test_both_layouts_give_the_same_rows(converted):
    import pyarrow.parquet as pq

    a, b, _, _ = converted
    for split in SPLITS:
        ta, tb = pq.read_table(os.path.join(a, f"{split}.parquet")), pq.read_table(os.path.join(b, f"{split}.parquet"))
        assert ta.equals(tb), split


def test_rows_follow_the_documented_mapping(converted):
    import pyarrow.parquet as pq

    a, _, _, _ = converted
    expected = _rows_jsonl()
    for split in SPLITS:
        rows = pq.read_table(os.path.join(a, f"{split}.parquet")).to_pylist()
        assert len(rows) == len(expected[split])
        for i, (row, ref) in enumerate(zip(rows, expected[split])):
            assert row["data_source"] == "hiyouga/geometry3k"
            assert row["ability"] == "math"
            assert row["prompt"] == [{"role": "user", "content": ref["problem"] + " " + VERL_INSTRUCTION}]
            assert row["prompt"][0]["content"].startswith("<image>")
            assert row["reward_model"] == {"style": "rule", "ground_truth": ref["answer"]}
            assert ref["answer"] == ref["choices"]["ABCD".index(ref["answer_letter"])]
            assert row["extra_info"] == {
                "split": split,
                "index": i,
                "answer": ref["answer"],
                "question": ref["problem"],
            }
            assert len(row["images"]) == 1
            assert hashlib.sha256(row["images"][0]["bytes"]).hexdigest() == ref["image_sha256"]


def test_original_record_mapping_by_hand():
    """train/0: annotat_text "$\\triangle RST \\cong \\triangle XYZ$. Find $y$.", choices 5/14/15/35, answer C."""
    from vlgrpo.data.geo3k import iter_original

    first = next(iter_original(ORIGINAL, "train"))
    assert first["problem"] == "<image>$\\triangle RST \\cong \\triangle XYZ$. Find $y$."
    assert first["answer"] == "15"


def test_hf_datasets_reads_images_as_images(converted):
    """verl loads the parquet with datasets.load_dataset('parquet'); images decode to PIL like the hub files."""
    import datasets
    from PIL import Image

    a, _, _, _ = converted
    ds = datasets.load_dataset("parquet", data_files=os.path.join(a, "test.parquet"))["train"]
    assert len(ds) == 15
    assert isinstance(ds[0]["images"][0], Image.Image)
    assert ds.features["reward_model"]["ground_truth"].dtype == "string"


def test_verl_default_reward_maps_the_data_source():
    """verl's default_compute_score routes 'hiyouga/geometry3k' to its geo3k scorer (not NotImplementedError)."""
    from vlgrpo.preflight.dataset import reward_handles

    assert reward_handles("hiyouga/geometry3k")[0] is True
    assert reward_handles("geometry3k-typo")[0] is False


def test_cli_writes_train_and_test_by_default(tmp_path, capsys):
    from vlgrpo.data import cli

    assert cli.main(["geo3k", ORIGINAL, str(tmp_path)]) == 0
    assert sorted(os.listdir(tmp_path)) == ["test.parquet", "train.parquet"]  # what verl's script writes
    assert "[train] wrote 20 rows" in capsys.readouterr().out


def test_cli_rejects_unknown_source_and_split(tmp_path, capsys):
    from vlgrpo.data import cli

    assert cli.main(["geo3k", str(tmp_path), str(tmp_path / "out")]) == 2
    assert cli.main(["geo3k", HIYOUGA, str(tmp_path / "out"), "--splits", "dev"]) == 2
    err = capsys.readouterr().err
    assert "neither data/<split>-*.parquet" in err and "unknown split 'dev'" in err


def test_bad_answer_letter_is_reported(tmp_path):
    from vlgrpo.data.geo3k import SourceError, convert

    src = tmp_path / "orig" / "train" / "0"
    src.mkdir(parents=True)
    (src / "data.json").write_text(json.dumps({"annotat_text": "x", "choices": ["1", "2"], "answer": "D"}))
    (src / "img_diagram.png").write_bytes(b"png")
    with pytest.raises(SourceError, match="answer 'D'"):
        convert(str(tmp_path / "orig"), str(tmp_path / "out"), splits=("train",))


def _one_problem(tmp_path, record, image: bytes | None = None):
    """An original-layout source with one train problem (the sample's first diagram unless ``image``)."""
    first = os.path.join(ORIGINAL, "train", sorted(os.listdir(os.path.join(ORIGINAL, "train")), key=int)[0])
    src = tmp_path / "orig" / "train" / "0"
    src.mkdir(parents=True)
    (src / "data.json").write_bytes(record if isinstance(record, bytes) else json.dumps(record).encode())
    with open(os.path.join(first, "img_diagram.png"), "rb") as fh:
        (src / "img_diagram.png").write_bytes(fh.read() if image is None else image)
    return str(tmp_path / "orig")


GOOD = {"annotat_text": "Find x.", "choices": ["1", "2", "3", "4"], "answer": "B"}


@pytest.mark.parametrize(
    "change, message",
    [
        ({"answer": ""}, "answer ''"),  # '' in 'ABCD' is True: once silently became choice A
        ({"answer": "AB"}, "answer 'AB'"),  # likewise
        ({"answer": "C", "choices": ["1", "2"]}, "answer 'C'"),
        ({"answer": 1}, "answer 1"),  # once a TypeError traceback
        ({"choices": "1234"}, "'choices' must be a list"),  # once silently took the letter's character
        ({"annotat_text": None}, "annotat_text"),  # once a KeyError traceback
    ],
)
def test_malformed_original_records_are_clear_errors(tmp_path, change, message):
    from vlgrpo.data.geo3k import SourceError, convert

    src = _one_problem(tmp_path, {**GOOD, **change})
    with pytest.raises(SourceError, match=message):
        convert(src, str(tmp_path / "out"), splits=("train",))
    assert not os.path.exists(tmp_path / "out" / "train.parquet")


def test_good_record_converts_and_odd_files_are_exit_2(tmp_path, capsys):
    from vlgrpo.data import cli
    from vlgrpo.data.geo3k import convert

    assert convert(_one_problem(tmp_path / "ok", GOOD), str(tmp_path / "ok" / "out"), splits=("train",)) == {"train": 1}
    # a JSON list, non-UTF-8 text, a broken diagram: exit 2 with the problem folder named, no traceback
    for name, record, image in (
        ("list", b"[1]", None),
        ("latin1", '{"annotat_text": "caf\xe9"}'.encode("latin-1"), None),
        ("png", GOOD, b"\x89PNG\r\n\x1a\n broken"),
    ):
        src = _one_problem(tmp_path / name, record, image)
        assert cli.main(["geo3k", src, str(tmp_path / name / "out"), "--splits", "train"]) == 2, name
        err = capsys.readouterr().err
        assert err.startswith("data geo3k: ") and "Traceback" not in err and "train" in err, err
    (tmp_path / "file").write_text("x")
    assert cli.main(["geo3k", ORIGINAL, str(tmp_path / "file")]) == 2
    assert cli.main(["geo3k", ORIGINAL, str(tmp_path / "o"), "--splits", ","]) == 2


# ---- the output folder against another user (the attack list's converter case) -------------------------------
def _as_other(code: str) -> None:
    import shutil

    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to act as another user")
    subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-I", "-c", code],
        check=True,
        timeout=60,
    )


def test_a_planted_temp_name_is_never_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    out = tmp_path / "out"
    out.mkdir()
    for name in (".train.parquet.tmp", ".test.parquet.tmp", "train.parquet"):
        os.symlink(victim, out / name)
    counts = geo3k.convert(HIYOUGA, str(out))
    assert victim.read_text() == "mine"  # neither the old fixed temp name nor the target was followed
    assert not os.path.islink(out / "train.parquet") and counts["train"] == 20
    assert not [p for p in os.listdir(out) if p.endswith(".parquet.tmp") and not os.path.islink(out / p)]


@pytest.mark.parametrize("mode", [0o777, 0o1777])
def test_an_output_folder_others_can_write_is_refused(tmp_path, mode):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, mode)
    for p in (tmp_path, *tmp_path.parents):  # let the other user reach the folder (pytest's tree is 0700)
        if str(p).startswith(("/tmp/pytest-of-", "/tmp/")) and str(p) != "/tmp" and os.stat(p).st_uid == os.geteuid():
            os.chmod(p, 0o755)
    # the canary: the other user can create entries there (a symlink named like the temporary file)
    _as_other(f"import os; os.symlink('/nonexistent', {str(shared / 'x')!r}); os.unlink({str(shared / 'x')!r})")
    with pytest.raises(ValueError, match="can be written by every user"):
        geo3k.convert(HIYOUGA, str(shared))
    if mode & 0o1000:
        # sticky (like /tmp): a folder of our own inside is safe, the kernel stops the other user renaming it
        assert geo3k.convert(HIYOUGA, str(shared / "geo_out"))["train"] == 20
        with pytest.raises(subprocess.CalledProcessError):
            _as_other(f"import os; os.rename({str(shared / 'geo_out')!r}, {str(shared / 'gone')!r})")
    else:
        with pytest.raises(ValueError, match="output folder"):
            geo3k.convert(HIYOUGA, str(shared / "geo_out"))  # made here, but inside a folder others can write
