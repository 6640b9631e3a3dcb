"""B06: prompt tokens counted with the run's path (verl 0.8.0's agent loop pre-resizes images with the processor's
patch size, 16 for Qwen3-VL), not with verl's overlong-filter estimate (``data.image_patch_size``, default 14).

References: hand-worked resize arithmetic (qwen-vl-utils' round-to-factor, then the processor's own 32-px grid),
transformers' own Qwen3VLProcessor on the same inputs, and a hand-written Qwen3-VL chat layout tokenized with the
folder's tokenizer."""

from __future__ import annotations

import io
import os

import pytest

from preflight_helpers import MODEL_30B, SAMPLE_HIYOUGA, qwen3vl_processor, set_override

from vlgrpo.preflight import run_preflight
from vlgrpo.preflight.dataset import PromptCounter, build_messages, pre_resize_hw

#: 52 tokens with the folder's tokenizer (checked below)
QUESTION = (
    "In the figure, the quadrilateral ABCD is a rhombus with side length 5 and angle A = 60 degrees. "
    "Find the length of the longer diagonal BD. Give the exact value, then put the answer in a box, please."
)


def _png(size: tuple[int, int]) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, (255, 255, 255)).save(buf, format="PNG")
    return buf.getvalue()


def _one_row_parquet(folder, image_entry: dict) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    row = {
        "data_source": "hiyouga/geometry3k",
        "prompt": [{"role": "user", "content": "<image>" + QUESTION}],
        "images": [image_entry],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "5"},
        "extra_info": {"split": "train", "index": 0, "answer": "5", "question": QUESTION},
    }
    path = os.path.join(str(folder), "one.parquet")
    pq.write_table(pa.Table.from_pylist([row]), path)
    return path


@pytest.fixture(scope="module")
def row_344(tmp_path_factory) -> str:
    """One verl row: a 344x344 image + the 52-token question (train and val)."""
    return _one_row_parquet(tmp_path_factory.mktemp("r344"), {"bytes": _png((344, 344)), "path": "344.png"})


@pytest.fixture(scope="module")
def counter():
    return PromptCounter(MODEL_30B, filter_patch_size=14)


def _argv(fixed_argv, data_file, **overrides):
    argv = set_override(fixed_argv, "data.train_files", data_file)
    argv = set_override(argv, "data.val_files", data_file)
    for key, value in overrides.items():
        argv = set_override(argv, key.replace("__", "."), value)
    return argv


def _by_code(report, code):
    return [f for f in report.findings if f.code == code]


def test_344_image_is_121_tokens_in_the_rollout_and_100_by_verls_filter(counter):
    """Hand-worked: qwen-vl-utils rounds 344 to the nearest multiple of 2 x patch: 12 x 28 = 336 with verl's filter
    default 14, 11 x 32 = 352 with the processor's 16; the processor's own grid is 32 px (patch 16, merge 2):
    336 -> round(10.5) = 10 -> 10 x 10 = 100 tokens, 352 -> 11 x 11 = 121 tokens."""
    from PIL import Image

    assert pre_resize_hw(344, 344, 14) == (336, 336) and pre_resize_hw(344, 344, 16) == (352, 352)
    assert counter.patch_size == 16 and counter.filter_patch_size == 14
    img = Image.new("RGB", (344, 344), (255, 255, 255))
    assert len(counter.tokenizer(QUESTION, add_special_tokens=False)["input_ids"]) == 52
    messages = build_messages([{"role": "user", "content": "<image>" + QUESTION}], [img])
    assert counter.count(messages, [img]) == (183, 121)
    assert counter.count_filter(messages, [img]) == (162, 100)
    # the rollout's 183 = the Qwen3-VL chat layout with 121 image pads, tokenized by the folder's tokenizer
    text = (
        "<|im_start|>user\n<|vision_start|>"
        + "<|image_pad|>" * 121
        + "<|vision_end|>"
        + QUESTION
        + "<|im_end|>\n<|im_start|>assistant\n"
    )
    assert len(counter.tokenizer(text, add_special_tokens=False)["input_ids"]) == 183
    # and transformers' own Qwen3VLProcessor on the image pre-resized with the processor's patch size
    ref = qwen3vl_processor(counter.tokenizer, counter.image_processor)
    raw = ref.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert len(ref(text=[raw], images=[counter.pre_resize(img)])["input_ids"][0]) == 183


def test_b06_limit_170_names_the_row_and_both_counts(fixed_argv, row_344):
    """VLGRPO_MAX_PROMPT_LENGTH=170 with verl's default data.image_patch_size (14): verl's filter keeps the row (162 <=
    170), the rollout makes 183 tokens and raises. Today's preflight said 'over budget: 0'."""
    argv = _argv(fixed_argv, row_344, data__max_prompt_length="170", data__image_patch_size=None)
    report = run_preflight(argv)
    assert report.exit_code == 2
    hits = _by_code(report, "data.rollout-overlong")
    assert len(hits) == 2  # the file is both data.train_files and data.val_files
    f = hits[0]
    assert f.severity == "error" and f.where.row == 0 and f.where.file == row_344
    assert "row 0: 183 tokens (121 image) in the rollout, 162 by verl's filter" in f.what
    assert "max_prompt_length 170" in f.what and "data.image_patch_size=14" in f.what
    assert f.fix.startswith("data.image_patch_size=16")
    (p,) = _by_code(report, "rules.image-patch-size")
    assert "data.image_patch_size=14 (verl default)" in p.what and "patch size 16" in p.what
    assert p.fix == "data.image_patch_size=16"
    assert report.summary["data"]["train"]["largest_prompt"]["tokens"] == 183


def test_b06_with_the_processors_patch_size_verl_drops_the_row(fixed_argv, row_344):
    """With data.image_patch_size=16 verl's own filter counts 183 > 170 and drops the row: a warning with the real count;
    on this one-row data set every row is dropped, which is an error (an empty dataloader)."""
    argv = _argv(fixed_argv, row_344, data__max_prompt_length="170", data__image_patch_size="16")
    report = run_preflight(argv)
    assert _by_code(report, "data.rollout-overlong") == [] and _by_code(report, "rules.image-patch-size") == []
    over = _by_code(report, "data.over-budget")
    assert over and all(f.severity == "warning" and "row 0: 183 tokens (121 image)" in f.what for f in over)
    assert _by_code(report, "data.all-rows-dropped") and report.exit_code == 2
    ok = run_preflight(_argv(fixed_argv, row_344, data__max_prompt_length="183", data__image_patch_size="16"))
    assert ok.exit_code == 0, [x.line() for x in ok.errors]


def test_rollout_prompt_length_below_the_filters_limit(fixed_argv, row_344):
    """Second instance: verl's filter reads data.max_prompt_length, the agent loop rollout.prompt_length (verl 0.8.0
    agent_loop.py: 'Multimodal prompt produced N tokens, exceeding rollout.prompt_length')."""
    argv = _argv(fixed_argv, row_344, data__image_patch_size="16", actor_rollout_ref__rollout__prompt_length="170")
    report = run_preflight(argv)
    f = _by_code(report, "data.rollout-overlong")[0]
    assert "actor_rollout_ref.rollout.prompt_length 170" in f.what and "row 0: 183 tokens (121 image)" in f.what
    assert "by verl's filter" not in f.what and report.exit_code == 2


def test_null_image_patch_size_is_refused(fixed_argv):
    """Third instance: data.image_patch_size=null composes (the key is nullable) but qwen-vl-utils fails on it in
    verl's filter, which counts every failing row as too long and drops it."""
    report = run_preflight(set_override(fixed_argv, "data.image_patch_size", "null"), check_data=False)
    (p,) = _by_code(report, "rules.image-patch-size")
    assert "data.image_patch_size=None" in p.what and "null fails on every image row" in p.why


def test_mm_processor_kwargs_reach_the_count(fixed_argv, row_344, counter):
    """Fourth instance: data.mm_processor_kwargs go to the processor call in both verl's filter and the rollout
    (verl 0.8.0 build_multimodal_processor_inputs); max_pixels=65536 caps the 352x352 image at 256x256 = 8 x 8 = 64
    tokens (62 text tokens + 64 = 126), as transformers' Qwen3VLProcessor computes with the same kwargs."""
    from PIL import Image

    argv = _argv(fixed_argv, row_344, data__image_patch_size="16")
    argv.append("+data.mm_processor_kwargs.max_pixels=65536")
    report = run_preflight(argv)
    largest = report.summary["data"]["train"]["largest_prompt"]
    assert (largest["tokens"], largest["image_tokens"]) == (126, 64)
    img = Image.new("RGB", (344, 344), (255, 255, 255))
    messages = build_messages([{"role": "user", "content": "<image>" + QUESTION}], [img])
    ref = qwen3vl_processor(counter.tokenizer, counter.image_processor)
    raw = ref.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    out = ref(text=[raw], images=[counter.pre_resize(img)], max_pixels=65536)
    assert len(out["input_ids"][0]) == 126


def test_image_entry_pixel_bounds_reach_the_pre_resize(fixed_argv, tmp_path):
    """Fifth instance: qwen-vl-utils 0.0.14 fetch_image reads max_pixels (and min_pixels, resized_height/width) from the
    row's image entry. max_pixels=65536 on the 344x344 image: 344 / sqrt(118336 / 65536) = 256 (floored to 32) ->
    256 x 256 -> 8 x 8 = 64 image tokens."""
    path = _one_row_parquet(tmp_path, {"bytes": _png((344, 344)), "path": "344.png", "max_pixels": 65536})
    report = run_preflight(_argv(fixed_argv, path, data__image_patch_size="16"))
    largest = report.summary["data"]["train"]["largest_prompt"]
    assert (largest["tokens"], largest["image_tokens"]) == (126, 64)
    assert pre_resize_hw(344, 344, 16, max_pixels=65536) == (256, 256)


def test_both_counting_paths_agree_on_every_shipped_row(counter, tmp_path_factory, row_344):
    """The preflight counts with transformers' AutoProcessor where it loads (the images, with torchvision) and with
    the tokenizer + image processor + Qwen3VLProcessor's expansion rule where it cannot (here): on every shipped row
    (Geometry3K sample: train, validation, test) and the 344x344 row, at both patch sizes, the second path equals
    transformers' own Qwen3VLProcessor."""
    import pyarrow.parquet as pq

    from vlgrpo.data.geo3k import convert
    from vlgrpo.preflight.dataset import _open_image

    if counter.processor is not None:
        pytest.skip("the real AutoProcessor is available here; the counter already uses it")
    out = str(tmp_path_factory.mktemp("geo3k-all"))
    convert(SAMPLE_HIYOUGA, out, splits=("train", "validation", "test"))
    ref = qwen3vl_processor(counter.tokenizer, counter.image_processor)
    files = [os.path.join(out, f"{s}.parquet") for s in ("train", "validation", "test")] + [row_344]
    rows = 0
    for path in files:
        for row in pq.read_table(path).to_pylist():
            images = [_open_image(it, out) for it in row["images"]]
            messages = build_messages(row["prompt"], images)
            raw = ref.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            for patch, ours in ((16, counter.count), (14, counter.count_filter)):
                total, image_tokens = ours(messages, images)
                got = ref(text=[raw], images=[counter.pre_resize(im, patch_size=patch) for im in images])
                assert total == len(got["input_ids"][0]), (path, patch)
                assert image_tokens == sum(int(g.prod()) for g in got["image_grid_thw"]) // 4
            rows += 1
    assert rows == 20 + 5 + 15 + 1


def test_entrypoint_with_max_prompt_length_170_stops_on_the_row(row_344, tmp_path):
    """Through the fully-async entrypoint (dry run, the demo's planning override): its argv sets
    data.image_patch_size=16, so verl's own filter counts the row as the rollout does (183 > 170) and drops it;
    the preflight names the row with its real count and, as that leaves the one-row data set empty, exit 2."""
    import subprocess
    import sys

    from preflight_helpers import REPO

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (bin_dir / "python3").chmod(0o755)
    env = {
        k: v
        for k, v in os.environ.items()
        if (not k.startswith("VLGRPO_") or k == "VLGRPO_PATCHES_STRICT") and k != "RAY_ADDRESS"
    }
    env.update(
        {
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "VLGRPO_DRY_RUN": "1",
            "VLGRPO_PLATFORM": "npu",
            "VLGRPO_PLAN_DEVICES_PER_NODE": "16",
            "VLGRPO_MODEL_PATH": MODEL_30B,
            "VLGRPO_TRAIN_FILE": row_344,
            "VLGRPO_VAL_FILE": row_344,
            "VLGRPO_CHECKPOINT_DIR": str(tmp_path / "ckpt"),
            "VLGRPO_MAX_PROMPT_LENGTH": "170",
            "VLGRPO_LOGGER": "console",
        }
    )
    (tmp_path / "ckpt").mkdir()
    proc = subprocess.run(
        [os.path.join(REPO, "entrypoints", "fully-async-grpo.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    assert any(
        ln.startswith("WARNING [data.over-budget]")
        and "row 0: 183 tokens (121 image)" in ln
        and "max_prompt_length 170" in ln
        for ln in lines
    ), proc.stderr[-3000:]
    assert any(ln.startswith("ERROR [data.all-rows-dropped]") for ln in lines)
    assert not any("[rules.image-patch-size]" in ln or "[data.rollout-overlong]" in ln for ln in lines)
