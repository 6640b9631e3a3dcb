"""B05, second half: a vision placeholder the policy generated costs one masked sample, not the job
(``rollout.vision_placeholder_mask``).

verl v0.8.0's real ``AgentLoopWorker._agent_loop_postprocess`` and ``_postprocess`` run in a fresh interpreter with
the sitecustomize shim (scenarios/agent_loop_postprocess.py), on one geo3k sample (``image_grid_thw=[[1,16,16]]``,
Qwen3-VL-30B-A3B's tokenizer, image processor, chat template and config) whose response holds 151655 or 151656.
"Unpatched" is verl's original function (the wrapper's ``__wrapped__``, or the class attribute with the patch
switched off); the references are transformers 4.57.6's ``get_rope_index`` on the hand-sanitized sequence and verl's
own unpatched outputs. About 12 s (two interpreters).
"""

from __future__ import annotations

import re

import pytest
import torch
from patch_helpers import SCENARIOS, run_py

from vlgrpo.patches.source import find_function
from vlgrpo.patches.fixes import rollout_vision_placeholder_mask as rollout_mask

SCRIPT = SCENARIOS / "agent_loop_postprocess.py"
PATCH = "rollout.vision_placeholder_mask"
IMAGE_PAD, VIDEO_PAD, VISION_START, PAD = 151655, 151656, 151652, 151643
BAD = ("image_pad", "video_pad", "start_video_pad", "start_image_pad", "end_vision_start")


def _scenario(out_dir, mode, env=None):
    from patch_helpers import SHIM

    shim = out_dir / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(SHIM.read_text())
    code = (
        f"import runpy, sys; sys.argv = ['x', {str(out_dir)!r}, {mode!r}]; "
        f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')"
    )
    out = run_py(code, path=[shim], env=env).json
    assert out is not None and "crash" not in out, (out or {}).get("crash")
    return out


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    d = tmp_path_factory.mktemp("mask_full")
    out = _scenario(d, "full")
    return out, torch.load(d / "results.pt")


@pytest.fixture(scope="module")
def disabled(tmp_path_factory):
    return _scenario(tmp_path_factory.mktemp("mask_off"), "disabled", env={"VLGRPO_PATCHES_DISABLED": PATCH})


def _response(tensors, row=0):
    """The unpadded response of a saved run (response positions with attention 1)."""
    prompt_len = tensors["prompts"].shape[1]
    valid = tensors["attention_mask"][row, prompt_len:].bool()
    return tensors["responses"][row][valid]


def test_the_case_input_is_one_image_with_grid_1_16_16(full):
    out, _ = full
    assert out["prompt_grid"] == [[1, 16, 16]] and out["prompt_image_pads"] == 64
    assert out["pad_token_id"] == PAD


def test_unpatched_verl_crashes_on_the_minimal_input(full):
    out, saved = full
    runs = out["runs"]
    # <|vision_start|><|video_pad|>: get_rope_index indexes the missing video grid
    assert runs["unpatched/start_video_pad"]["exc"] == ["TypeError", "'NoneType' object is not subscriptable"]
    assert runs["unpatched/start_video_pad"]["where"][-2:] == [
        "agent_loop.py:_compute_position_ids",
        "modeling_qwen3_vl.py:get_rope_index",
    ]
    # <|vision_start|><|image_pad|>: a second image span with one grid (transformers 5.x: StopIteration here)
    assert runs["unpatched/start_image_pad"]["exc"] == [
        "IndexError",
        "index 1 is out of bounds for dimension 0 with size 1",
    ]
    assert runs["unpatched/start_image_pad"]["where"][-1] == "modeling_qwen3_vl.py:get_rope_index"
    # a lone <|image_pad|> passes the rollout worker and breaks the actor forward (verl's _get_input_embeds)
    assert runs["unpatched/image_pad"]["exc"] is None
    assert out["forward"]["unpatched/image_pad"] == [
        "ValueError",
        "Image features and image tokens do not match: tokens: 65, features 64",
    ]
    # a lone <|video_pad|> raises nowhere on this path: it reaches the batch as a trained (mask 1) token
    resp = _response(saved["unpatched/video_pad"])
    assert (resp == VIDEO_PAD).sum() == 1 and saved["unpatched/video_pad"]["response_mask"].sum() == len(resp)
    assert out["forward"]["unpatched/video_pad"] is None
    # a response cut right after a generated <|vision_start|>: get_rope_index reads the token after it
    assert runs["unpatched/end_vision_start"]["exc"][0] == "IndexError"
    assert runs["unpatched/end_vision_start"]["where"][-1] == "modeling_qwen3_vl.py:get_rope_index"
    assert runs["unpatched/mid_vision_start"]["exc"] is None  # followed by text: no new span, no crash


@pytest.mark.parametrize("name", BAD)
def test_patched_sample_is_sanitized_and_masked(full, name):
    out, saved = full
    assert out["runs"][f"patched/{name}"]["exc"] is None
    assert out["forward"][f"patched/{name}"] is None  # the actor's embedding step accepts it
    got = saved[f"patched/{name}"]
    original = out["cases"][name]["response_ids"]
    expected = [PAD if t in (IMAGE_PAD, VIDEO_PAD) else t for t in original]
    if name == "end_vision_start":
        assert expected[-1] == VISION_START
        expected[-1] = PAD
    assert _response(got).tolist() == expected  # placeholders gone, every other id and the length kept
    # the agent loop's own output object is not modified (verl gets a copy)
    run = out["runs"][f"patched/{name}"]
    assert run["response_ids_in"] == original and run["response_mask_in"] == [1] * len(original)
    assert not ((got["responses"] == IMAGE_PAD) | (got["responses"] == VIDEO_PAD)).any()
    assert got["response_mask"].shape == got["responses"].shape and not got["response_mask"].any()
    # position ids = transformers' get_rope_index on the sanitized unpadded sequence; row 0 = 0..L-1
    ref = saved[f"reference/{name}"]
    valid = got["attention_mask"][0].bool()
    assert torch.equal(got["input_ids"][0][valid], ref["input_ids"][0])
    assert torch.equal(got["position_ids"][0, 1:, valid], ref["vision_position_ids"][:, 0, :])
    assert torch.equal(got["position_ids"][0, 0, valid], torch.arange(int(valid.sum())))
    # the image inputs are the prompt's own: one grid [1,16,16]
    assert got["mm/image_grid_thw"].tolist() == [[1, 16, 16]]


@pytest.mark.parametrize("name", ("image_pad", "video_pad"))
def test_patched_differs_from_verl_only_at_the_placeholder_and_the_mask(full, name):
    _, saved = full
    before, after = saved[f"unpatched/{name}"], saved[f"patched/{name}"]
    assert before.keys() == after.keys()
    changed = (before["responses"] != after["responses"]).nonzero().tolist()
    assert len(changed) == 1 and before["responses"][tuple(changed[0])] in (IMAGE_PAD, VIDEO_PAD)
    assert after["responses"][tuple(changed[0])] == PAD
    assert (before["input_ids"] != after["input_ids"]).sum() == 1
    assert before["response_mask"].sum() > 0 and after["response_mask"].sum() == 0
    for key in before:
        if key not in ("responses", "input_ids", "response_mask"):
            assert torch.equal(before[key], after[key]), key


@pytest.mark.parametrize("name", ("clean", "tool_image", "mid_vision_start"))
def test_clean_and_tool_returned_image_are_untouched_and_silent(full, name):
    out, saved = full
    before, after = saved[f"unpatched/{name}"], saved[f"patched/{name}"]
    assert before.keys() == after.keys()
    for key in before:
        assert before[key].dtype == after[key].dtype and torch.equal(before[key], after[key]), key
    assert out["runs"][f"patched/{name}"]["log"] == []
    if name == "tool_image":  # a tool's image span (mask 0) keeps its 64 placeholders and its grid
        assert (_response(after) == IMAGE_PAD).sum() == 64
        assert after["mm/image_grid_thw"].tolist() == [[1, 16, 16], [1, 16, 16]]
        assert after["response_mask"].sum() == out["cases"][name]["response_mask"].count(1)


def test_batch_other_samples_byte_identical(full):
    out, saved = full
    before, after = saved["batch/unpatched"], saved["batch/patched"]
    names = out["batch_names"]
    assert names == ["clean", "image_pad", "video_pad", "tool_image"]
    assert before.keys() == after.keys()
    for key in before:
        for row in (0, 3):  # clean and tool_image rows
            assert torch.equal(before[key][row], after[key][row]), (key, row)
        for row in (1, 2):
            if key not in ("responses", "input_ids", "response_mask"):
                assert torch.equal(before[key][row], after[key][row]), (key, row)
    assert not after["response_mask"][1:3].any() and (before["response_mask"][1:3].sum(dim=1) > 0).all()
    for a, b in zip(saved["batch/unpatched/mm"], saved["batch/patched/mm"]):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("mode", ("token-mean", "seq-mean-token-mean"))
def test_masked_samples_contribute_no_policy_loss(full, mode):
    """verl's agg_loss over the batch: the masked rows' per-token losses (spiked to 1e6) do not move the loss, which
    equals the loss over the two other rows alone; with verl's own mask they dominate it."""
    out, _ = full
    plain, spiked, others_only = out["loss"][f"patched/{mode}"]
    assert plain == pytest.approx(others_only, rel=1e-6) and spiked == pytest.approx(plain, rel=1e-6)
    plain, spiked, _ = out["loss"][f"unpatched/{mode}"]
    assert spiked > 1e4 * plain


def test_one_warning_per_masked_sample(full):
    out, _ = full
    for name in BAD:
        log = out["runs"][f"patched/{name}"]["log"]
        assert len(log) == 1 and log[0][0] == "WARNING", log
        token, label = {
            "image": (IMAGE_PAD, "<|image_pad|>"),
            "video": (VIDEO_PAD, "<|video_pad|>"),
            "vision": (VISION_START, "<|vision_start|>"),
        }[name.split("_")[-2]]
        assert log[0][1] == (
            f"vlgrpo.patches: {PATCH}: sample uid=uid-{name}, index=7: the policy generated vision "
            f"token(s) {token} {label} x1 (1 in all) in its response; replaced them by pad id {PAD} and set the "
            f"sample's response_mask to 0 (sample masked: no policy loss from it) so position ids and the actor "
            f"forward do not crash (verl issue #5817)"
        )
    for name in ("clean", "tool_image", "mid_vision_start"):
        assert out["runs"][f"unpatched/{name}"]["log"] == []


def test_status_reports_it_applied_by_the_import_hook(full):
    out, _ = full
    status, reason = out["status"]
    assert status == "applied" and out["bound_is_ours"]
    assert "AgentLoopWorker._agent_loop_postprocess" in reason and "issue #5817" in reason
    assert "_compute_position_ids" in reason  # the callees it looked through


def test_disabled_switch_leaves_verl_crashing(disabled):
    assert disabled["status"][0] == "disabled" and not disabled["bound_is_ours"]
    run = disabled["runs"]["disabled/start_video_pad"]
    assert run["exc"] == ["TypeError", "'NoneType' object is not subscriptable"] and run["log"] == []


def _agent_loop_source(root):
    return (root / "verl" / "experimental" / "agent_loop" / "agent_loop.py").read_text()


def test_detector_on_verl_releases(verl_071):
    import importlib.util
    from pathlib import Path

    verl_080 = Path(importlib.util.find_spec("verl").submodule_search_locations[0]).parent
    for root in (verl_080, verl_071):
        source = _agent_loop_source(root)
        # the whole module: the postprocess and every method of its class it calls (0.8.0's
        # _compute_position_ids compares input_ids with image_token_id to build mm_token_type_ids: not a guard)
        faulty, reason = rollout_mask.is_faulty_in_source(source)
        assert faulty and "without checking them for image/video placeholder ids" in reason, (root, reason)
        assert "_compute_position_ids" in reason and "_compute_multi_modal_inputs" in reason
        fn = find_function(source, "AgentLoopWorker._agent_loop_postprocess")
        assert rollout_mask.is_faulty(fn)[0] is True  # a bare FunctionDef: its own body only


def test_detector_sees_a_guard_in_a_called_method(tmp_path, monkeypatch):
    import importlib
    import sys

    (tmp_path / "guarded_worker.py").write_text(
        "class Worker:\n"
        "    async def _agent_loop_postprocess(self, output, validate, **kwargs):\n"
        "        self._drop_vision_tokens(output)\n"
        "        return output\n"
        "    def _drop_vision_tokens(self, output):\n"
        "        bad = {self.processor.image_token_id, self.processor.video_token_id}\n"
        "        if any(t in bad for t in output.response_ids):\n"
        "            output.response_mask = [0] * len(output.response_mask)\n"
        "    def _compute_position_ids(self, input_ids):\n"
        "        image_token_id = 1\n"
        "        return input_ids == image_token_id\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module("guarded_worker")
    try:
        faulty, reason = rollout_mask.is_faulty(mod.Worker._agent_loop_postprocess)
        assert not faulty and "_drop_vision_tokens" in reason
    finally:
        sys.modules.pop("guarded_worker", None)

    def not_the_target(self, x):
        return x

    assert rollout_mask.is_faulty(not_the_target)[0] is False  # no `output`: not the target


def test_verify_passes():
    rollout_mask.verify()


def test_warning_names_each_id_and_count():
    from types import SimpleNamespace

    found = rollout_mask.generated_placeholders(
        [1, VIDEO_PAD, IMAGE_PAD, VIDEO_PAD, IMAGE_PAD], [1, 1, 1, 1, 0], [IMAGE_PAD, VIDEO_PAD]
    )
    assert found == {VIDEO_PAD: 2, IMAGE_PAD: 1}  # the last 151655 is a tool token (mask 0)
    text = rollout_mask.warning_text("uid=u", found, SimpleNamespace(), PAD)
    assert re.search(r"token\(s\) 151655 x1, 151656 x2 \(3 in all\)", text), text


def test_a_short_or_missing_mask_comes_back_all_zero_over_the_whole_response():
    """verl pads ``response_mask`` with the tokenizer's pad id (``_pad_token_ids``), so a mask shorter than the
    response would weight its tail by 151643; the masked copy covers every response position."""
    from types import SimpleNamespace

    for mask in ([1, 1], None):
        out = SimpleNamespace(response_ids=[1, IMAGE_PAD, 2, 3], response_mask=mask)
        new = rollout_mask.neutralized(out, [IMAGE_PAD], PAD)
        assert new.response_ids == [1, PAD, 2, 3] and new.response_mask == [0, 0, 0, 0]
    out = SimpleNamespace(response_ids=[1, IMAGE_PAD], response_mask=[1, 1, 1])
    assert rollout_mask.neutralized(out, [IMAGE_PAD], PAD).response_mask == [0, 0, 0]  # never shortened


def test_vision_start_counts_only_as_the_generated_last_token():
    ids, trailing = [IMAGE_PAD, VIDEO_PAD], [VISION_START]
    find = rollout_mask.generated_placeholders
    assert find([1, VISION_START, 2, VISION_START], [1, 1, 1, 1], ids, trailing) == {VISION_START: 1}
    assert find([1, VISION_START, 2], [1, 1, 1], ids, trailing) == {}  # followed by a token: harmless
    assert find([1, 2, VISION_START], [1, 1, 0], ids, trailing) == {}  # a tool's token (mask 0)
    assert find([1, 2, VISION_START], [1, 1, 1], ids) == {}  # no trailing ids given: placeholders only
    assert find([], [], ids, trailing) == {}


def test_an_error_in_the_check_hands_verl_the_sample_unchanged(monkeypatch):
    import asyncio
    from types import SimpleNamespace

    monkeypatch.delenv("VLGRPO_PATCHES_STRICT", raising=False)
    seen = []

    async def original(self, output, validate, **kwargs):
        seen.append(output)

    worker = SimpleNamespace(
        model_config=SimpleNamespace(hf_config=SimpleNamespace(image_token_id=IMAGE_PAD)),
        tokenizer=SimpleNamespace(pad_token_id=PAD),
        processor=None,
    )
    odd = SimpleNamespace(response_ids=["not an id"], response_mask=[1])
    asyncio.run(rollout_mask.make_agent_loop_postprocess(original)(worker, odd, False))
    assert seen == [odd]
    monkeypatch.setenv("VLGRPO_PATCHES_STRICT", "1")
    with pytest.raises(ValueError):
        asyncio.run(rollout_mask.make_agent_loop_postprocess(original)(worker, odd, False))


_FAKE_AGENT_LOOP = """
class AgentLoopWorker:
    def __init__(self, hf_config, pad_token_id):
        import types
        self.model_config = types.SimpleNamespace(hf_config=hf_config)
        self.tokenizer = types.SimpleNamespace(pad_token_id=pad_token_id)
        self.processor = None

    async def _agent_loop_postprocess(self, output, validate, **kwargs):
        {guard}
        self._compute_position_ids(output.response_ids)
        return list(output.response_ids), list(output.response_mask)

    def _drop_generated_vision_tokens(self, output):
        bad = {{self.model_config.hf_config.image_token_id, self.model_config.hf_config.video_token_id}}
        if any(t in bad for t in output.response_ids):
            output.response_mask = [0] * len(output.response_mask)

    def _compute_position_ids(self, input_ids):
        image_token_id = self.model_config.hf_config.image_token_id
        return [int(t == image_token_id) for t in input_ids]  # like verl's mm_token_type_ids: not a guard
"""

_E2E = r"""
import asyncio, json, types
import verl.experimental.agent_loop.agent_loop as al
import vlgrpo.patches as P
row = {r["id"]: r for r in P.status(import_targets=False)}["rollout.vision_placeholder_mask"]
cfg = types.SimpleNamespace(image_token_id=151655, video_token_id=151656, vision_start_token_id=151652)
out = types.SimpleNamespace(response_ids=[5, 151656, 6], response_mask=[1, 1, 1])
got = asyncio.run(al.AgentLoopWorker(cfg, 151643)._agent_loop_postprocess(out, False, uid="u"))
fn = al.AgentLoopWorker._agent_loop_postprocess
print(json.dumps([row["status"], row["reason"], getattr(fn, "__vlgrpo_patch__", None), got]))
"""


@pytest.mark.parametrize("guarded", (False, True))
def test_status_through_the_import_hook_on_a_guarded_and_an_unguarded_verl(tmp_path, shim_dir, guarded):
    """A stand-in ``verl`` package (first on the path) whose AgentLoopWorker does / does not drop vision tokens in a
    method its postprocess calls: the real import hook applies the patch only to the unguarded one."""
    pkg = tmp_path / "fake" / "verl" / "experimental" / "agent_loop"
    pkg.mkdir(parents=True)
    for d in (pkg, pkg.parent, pkg.parent.parent):
        (d / "__init__.py").write_text("")
    guard = "self._drop_generated_vision_tokens(output)" if guarded else "pass"
    (pkg / "agent_loop.py").write_text(_FAKE_AGENT_LOOP.format(guard=guard))
    status, reason, bound, (ids, mask) = run_py(_E2E, path=[shim_dir, tmp_path / "fake"]).json
    if guarded:
        assert status == "not needed" and bound is None, reason
        assert "_drop_generated_vision_tokens" in reason
        assert ids == [5, VIDEO_PAD, 6] and mask == [0, 0, 0]  # the stand-in's own guard ran, ours did not
    else:
        assert status == "applied" and bound == PATCH, reason
        assert "_compute_position_ids" in reason and "without checking them" in reason
        assert ids == [5, PAD, 6] and mask == [0, 0, 0]  # 151656 became the pad id; sample masked
