"""Each row's image source read as verl reads it, and rows that bring video or audio (vlgrpo.preflight.data_media).

The reference is verl v0.8.0's own ``RLHFDataset._build_messages`` on the same rows: the content item it hands to
qwen-vl-utils (whose ``fetch_image`` reads ``image``, else ``image_url``; a URL is downloaded) or the error it
raises. The attack list's data cases: an ``image`` URL beside a local ``path`` (the preflight opened the path, the
trainer would fetch the URL), and video rows.
"""

from __future__ import annotations

import io
import os

import pytest
from preflight_helpers import SAMPLE_HIYOUGA

from vlgrpo.preflight.data_media import check_media, verl_image_source
from vlgrpo.preflight.report import Report


@pytest.fixture(scope="module")
def verl_build():
    from verl.utils.dataset.rl_dataset import RLHFDataset

    ds = object.__new__(RLHFDataset)
    ds.image_key, ds.video_key, ds.audio_key, ds.prompt_key, ds.processor = (
        "images",
        "videos",
        "audios",
        "prompt",
        object(),
    )
    return lambda row: ds._build_messages(dict(row), "prompt")


@pytest.fixture(scope="module")
def png(tmp_path_factory):
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (64, 48), "white").save(buf, format="PNG")
    path = tmp_path_factory.mktemp("img") / "a.png"
    path.write_bytes(buf.getvalue())
    return buf.getvalue(), str(path)


class _Loc:
    def where(self, key, file=None, row=None):
        from vlgrpo.preflight.report import Where

        return Where(key=key, file=file, row=row)


class _Work:
    def __init__(self, train):
        from omegaconf import OmegaConf

        self.data = OmegaConf.create(
            {"train_files": [train], "val_files": [], "image_key": "images", "prompt_key": "prompt"}
        )


def _parquet(tmp_path, rows, name="train.parquet"):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / name
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def _check(path):
    rep = Report()
    check_media(_Work(path), rep, _Loc())
    return rep


def _row(entry, content="<image>Find x."):
    return {"prompt": [{"role": "user", "content": content}], "images": [entry] if entry is not None else []}


def test_url_beside_a_local_path_is_what_verl_hands_on(tmp_path, verl_build, png):
    entry = {"image": "http://127.0.0.8:8089/evil.png", "path": png[1]}
    item = verl_build(_row(entry))[0]["content"][0]
    assert item["image"] == "http://127.0.0.8:8089/evil.png"  # what fetch_image downloads
    rep = _check(_parquet(tmp_path, [_row(entry)]))
    assert [f.code for f in rep.findings] == ["media.image-source"] and "URL" in rep.findings[0].what


@pytest.mark.parametrize(
    "entry",
    [
        {"image": "https://example.invalid/a.png"},
        {"image": "s3://bucket/a.png"},
        {"image_url": "http://127.0.0.1/a.png"},
        {"image": "HTTP://127.0.0.1/A.PNG"},
    ],
)
def test_other_remote_sources(tmp_path, entry):
    assert verl_image_source(entry)[0] == "url"
    assert "media.image-source" in [f.code for f in _check(_parquet(tmp_path, [_row(entry)])).findings]


def test_null_bytes_make_verl_raise_and_are_refused(tmp_path, verl_build, png):
    entry = {"bytes": None, "path": png[1]}
    from PIL import UnidentifiedImageError

    with pytest.raises(UnidentifiedImageError):  # PIL cannot open BytesIO(None)
        verl_build(_row(entry))
    assert verl_image_source(entry)[0] == "null-bytes"


def test_bytes_win_over_an_image_field_as_in_verl(verl_build, png):
    from PIL import Image

    entry = {"bytes": png[0], "image": "http://127.0.0.8/evil.png"}
    item = verl_build(_row(entry))[0]["content"][0]
    assert isinstance(item["image"], Image.Image)  # verl replaced the URL by the decoded bytes
    assert verl_image_source(entry)[0] == "bytes"


@pytest.mark.parametrize(
    "entry,kind",
    [
        ({"image": "img/a.png"}, "relative"),
        ({"image": "/nonexistent/a.png"}, "missing"),
        ({"path": "/x.png"}, "none"),
        ({"image": "data:image/png;base64,AAAA"}, "data-uri"),
    ],
)
def test_paths_and_data_uris(entry, kind):
    assert verl_image_source(entry)[0] == kind


def test_absolute_local_file_passes(tmp_path, png):
    assert verl_image_source({"image": png[1]}) == ("path", png[1])
    assert verl_image_source({"image": "file://" + png[1]}) == ("path", png[1])
    assert _check(_parquet(tmp_path, [_row({"image": png[1]})])).findings == []


def test_the_converted_sample_is_clean(tmp_path):
    from vlgrpo.data.geo3k import convert

    convert(SAMPLE_HIYOUGA, str(tmp_path))
    rep = _check(str(tmp_path / "train.parquet"))
    assert rep.findings == []


@pytest.mark.parametrize(
    "row",
    [
        {"prompt": [{"role": "user", "content": "<video>What happens?"}], "videos": [{"video": "/tmp/x.mp4"}]},
        {"prompt": [{"role": "user", "content": "<video>What happens?"}]},
        {"prompt": [{"role": "user", "content": "<audio>Transcribe."}], "audios": [{"audio": "/tmp/x.wav"}]},
        {"prompt": [{"role": "user", "content": "Plain text."}], "videos": [{"video": "/tmp/x.mp4"}]},
    ],
)
def test_video_and_audio_rows_are_refused(tmp_path, row):
    rep = _check(_parquet(tmp_path, [row]))
    assert "media.video" in [f.code for f in rep.findings]


def test_structured_video_content_passes_through_verl_unchanged(tmp_path, verl_build):
    import pyarrow as pa
    import pyarrow.parquet as pq

    prompt = [{"role": "user", "content": [{"type": "video", "video": "/tmp/x.mp4"}]}]
    assert verl_build({"prompt": prompt, "images": []})[0]["content"][0]["type"] == "video"
    path = tmp_path / "s.parquet"
    pq.write_table(pa.Table.from_pylist([{"prompt": prompt}]), path)
    assert "media.video" in [f.code for f in _check(str(path)).findings]


def test_through_the_preflight(tmp_path, fixed_argv, png):
    from preflight_helpers import set_override

    from vlgrpo.preflight import run_preflight

    bad = _parquet(tmp_path, [_row({"image": "http://127.0.0.8:8089/x.png", "path": png[1]})] * 2)
    argv = set_override(set_override(fixed_argv, "data.train_files", bad), "data.val_files", bad)
    report = run_preflight(argv, check_data=True, devices_per_node=16)
    assert report.exit_code == 2 and "media.image-source" in report.codes()
    assert os.path.exists(bad)
