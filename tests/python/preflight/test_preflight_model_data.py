"""Model folder (B17) and data checks (B07): real Qwen3-VL metadata, real tokenizer and image processor."""

from __future__ import annotations

import json
import os

import pytest

from preflight_helpers import MODEL_30B, REPO, UPSTREAM_FULLY_ASYNC, qwen3vl_processor, read_argv, set_override

from vlgrpo.preflight import run_preflight
from vlgrpo.preflight.dataset import PromptCounter, build_messages, pre_resize_hw
from vlgrpo.preflight.model_dir import check_model_dir
from vlgrpo.preflight.report import Report


def _codes(report):
    return [f.code for f in report.findings]


# --- model folder -------------------------------------------------------------------------------------------


def test_shipped_model_folder_is_clean():
    report = Report()
    info = check_model_dir(MODEL_30B, report)
    assert report.findings == [] and info["clean"]
    assert info["model_type"] == "qwen3_vl_moe"
    assert info["max_position_embeddings"] == 262144


def test_b17_auto_map_and_python_file_are_refused(model_copy):
    tc = os.path.join(model_copy, "tokenizer_config.json")
    with open(tc, encoding="utf-8") as fh:
        data = json.load(fh)
    data["auto_map"] = {"AutoTokenizer": ["tokenization_x.XTokenizer", None]}
    with open(tc, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
    with open(os.path.join(model_copy, "tokenization_x.py"), "w", encoding="utf-8") as fh:
        fh.write("raise SystemExit('remote code ran')\n")
    report = Report()
    info = check_model_dir(model_copy, report)
    assert not info["clean"]
    auto = [f for f in report.findings if f.code == "model.auto-map"]
    assert len(auto) == 1 and auto[0].where.file == tc and "auto_map" in auto[0].what
    py = [f for f in report.findings if f.code == "model.python-file"]
    assert len(py) == 1 and py[0].what.endswith("tokenization_x.py")
    # through the whole preflight: exit 2, and the folder's code is never loaded (no SystemExit)
    argv = set_override(read_argv(UPSTREAM_FULLY_ASYNC), "trainer.logger", "[console]")
    full = run_preflight(argv, check_data=False, model_path=model_copy)
    assert {"model.auto-map", "model.python-file"} <= set(_codes(full)) and full.exit_code == 2


def test_model_type_must_be_qwen3_vl(model_copy):
    cfg = os.path.join(model_copy, "config.json")
    with open(cfg, encoding="utf-8") as fh:
        data = json.load(fh)
    data["model_type"] = "qwen2_5_vl"
    with open(cfg, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
    report = Report()
    check_model_dir(model_copy, report)
    assert _codes(report) == ["model.type"]


def test_dense_qwen3_vl_model_type_is_accepted():
    with open(os.path.join(REPO, "assets", "models", "qwen3-vl-2b-instruct", "config.json"), encoding="utf-8") as fh:
        assert json.load(fh)["model_type"] == "qwen3_vl"
    report = Report()
    check_model_dir(os.path.join(REPO, "assets", "models", "qwen3-vl-2b-instruct"), report)
    assert "model.type" not in _codes(report)  # (it lacks tokenizer files, which is reported separately)
    assert "model.no-tokenizer" in _codes(report)


def test_missing_tokenizer_files(model_copy):
    os.remove(os.path.join(model_copy, "merges.txt"))
    report = Report()
    check_model_dir(model_copy, report)
    assert _codes(report) == ["model.no-tokenizer"]


# --- token counting -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "hw, patch, expected",
    [
        # hand-worked: factor 28, nearest multiples; 1600/28=57.14 -> 57*28=1596
        ((1600, 1600), 14, (1596, 1596)),
        ((434, 864), 14, (448, 868)),  # 15.5 rounds to 16 (round-half-even), 30.86 -> 31
        ((10, 10), 14, (56, 56)),  # below 4 x 28^2 pixels: scaled up and ceiled to the factor
        ((1600, 1600), 16, (1600, 1600)),  # factor 32: 50 x 32
    ],
)
def test_pre_resize_hand_worked(hw, patch, expected):
    assert pre_resize_hw(*hw, image_patch_size=patch) == expected


@pytest.fixture(scope="module")
def counter():
    return PromptCounter(MODEL_30B, filter_patch_size=14)


def test_1600px_image_is_2500_tokens_and_full_prompt_matches_reference(counter):
    """1600x1600 -> 1600 (qwen-vl-utils with the processor's patch 16: factor 32) -> 1600 (processor, 16-px patches x
    merge 2 = 32) -> 50 x 50 = 2500 image tokens (verl's filter default 14 gives the same here: 1596 -> 1600). The full prompt is checked against a hand-written Qwen3-VL chat layout
    tokenized with the folder's tokenizer."""
    from PIL import Image

    img = Image.new("RGB", (1600, 1600), (255, 255, 255))
    question = "Find $y$. Think step by step."
    messages = build_messages([{"role": "user", "content": "<image>" + question}], [img])
    total, image_tokens = counter.count(messages, [img])
    assert image_tokens == 2500
    expected_text = (
        "<|im_start|>user\n<|vision_start|>"
        + "<|image_pad|>" * 2500
        + "<|vision_end|>"
        + question
        + "<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = counter.tokenizer(expected_text, add_special_tokens=False)["input_ids"]
    assert ids.count(151655) == 2500
    assert total == len(ids)


def test_image_processor_uses_the_folders_own_numbers(counter):
    ip = counter.image_processor
    with open(os.path.join(MODEL_30B, "preprocessor_config.json"), encoding="utf-8") as fh:
        cfg = json.load(fh)
    assert (ip.patch_size, ip.merge_size) == (cfg["patch_size"], cfg["merge_size"]) == (16, 2)
    # pixel bounds the processor resizes with (preprocess uses min_pixels/max_pixels when no size is passed):
    # the folder's, not the slow processor's 28*28*1280 default
    assert (
        (ip.min_pixels, ip.max_pixels)
        == (cfg["size"]["shortest_edge"], cfg["size"]["longest_edge"])
        == (65536, 16777216)
    )


# --- data checks through preflight ----------------------------------------------------------------------------


def test_sample_data_summary(clean_fixed_report):
    data = clean_fixed_report.summary["data"]
    assert (data["train"]["rows"], data["val"]["rows"]) == (20, 15)
    assert data["train"]["image_rows"] == 20 and data["train"]["over_budget"] == 0
    largest = data["train"]["largest_prompt"]
    assert 0 < largest["image_tokens"] < largest["tokens"] <= 2048
    assert "data" in clean_fixed_report.summary["timings_s"]


def test_b07_image_alone_exceeds_budget_and_left_truncation(big_image_data):
    """The shipped 30B fully-async script (truncation='left', no filtering) on a parquet with a 1600x1600
    image row: both the setting and the row are reported before launch."""
    argv = read_argv(UPSTREAM_FULLY_ASYNC)
    argv = set_override(argv, "trainer.logger", "[console]")
    argv = set_override(argv, "data.train_files", os.path.join(big_image_data, "train.parquet"))
    argv = set_override(argv, "data.val_files", os.path.join(big_image_data, "train.parquet"))
    report = run_preflight(argv, model_path=MODEL_30B)
    assert "rules.image-truncation" in _codes(report)
    alone = [f for f in report.findings if f.code == "data.image-exceeds-budget"]
    assert alone and alone[0].severity == "error"  # filtering is off in the script
    assert alone[0].where.row == 1 and "row 1: 2500 image tokens" in alone[0].what
    over = [f for f in report.findings if f.code == "data.over-budget"]
    assert over and "row 1:" in over[0].what and "row 0:" not in over[0].what
    assert report.exit_code == 2


def test_over_budget_rows_with_filtering_on_are_a_warning(fixed_argv, big_image_data):
    argv = set_override(fixed_argv, "data.train_files", os.path.join(big_image_data, "train.parquet"))
    report = run_preflight(argv)
    over = [f for f in report.findings if f.code == "data.over-budget"]
    assert over and all(f.severity == "warning" for f in over)
    assert report.exit_code == 0


def test_unknown_data_source_is_refused(fixed_argv, tmp_path, sample_data):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(os.path.join(sample_data, "test.parquet"))
    table = table.set_column(0, "data_source", pa.array(["my/geo"] * table.num_rows))
    path = str(tmp_path / "test.parquet")
    pq.write_table(table, path)
    report = run_preflight(set_override(fixed_argv, "data.val_files", path))
    bad = [f for f in report.findings if f.code == "data.data-source"]
    assert bad and "'my/geo'" in bad[0].what


def test_missing_columns_and_files(fixed_argv, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = str(tmp_path / "plain.parquet")
    pq.write_table(pa.table({"question": ["x"]}), path)
    argv = set_override(fixed_argv, "data.train_files", path)
    argv = set_override(argv, "data.val_files", str(tmp_path / "absent.parquet"))
    report = run_preflight(argv)
    assert {"data.columns", "data.missing"} <= set(_codes(report))


def test_budget_below_every_row_with_filtering_on(fixed_argv):
    argv = set_override(fixed_argv, "data.max_prompt_length", "100")  # every sample prompt is > 150 tokens
    argv = set_override(argv, "actor_rollout_ref.rollout.max_model_len", None)
    report = run_preflight(argv)
    dropped = [f for f in report.findings if f.code == "data.all-rows-dropped"]
    assert sorted(f.what.split(" row")[0] for f in dropped) == [
        "verl's overlong filter drops every train",
        "verl's overlong filter drops every val",
    ]
    assert dropped[0].where.position == argv.index("data.max_prompt_length=100")
    assert report.exit_code == 2


def test_counts_equal_transformers_qwen3vl_processor_on_every_sample_row(counter, sample_data):
    import pyarrow.parquet as pq

    from vlgrpo.preflight.dataset import _open_image

    if counter.processor is not None:
        pytest.skip("the real AutoProcessor is available here; the counter already uses it")
    ref = qwen3vl_processor(counter.tokenizer, counter.image_processor)  # transformers' own processor
    for split in ("train", "test"):
        for row in pq.read_table(os.path.join(sample_data, f"{split}.parquet")).to_pylist():
            images = [_open_image(it, sample_data) for it in row["images"]]
            messages = build_messages(row["prompt"], images)
            total, image_tokens = counter.count(messages, images)
            raw = ref.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            out = ref(text=[raw], images=[counter.pre_resize(im) for im in images])
            assert total == len(out["input_ids"][0])
            assert image_tokens == sum(int(g.prod()) for g in out["image_grid_thw"]) // 4
