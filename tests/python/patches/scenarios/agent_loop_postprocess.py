"""verl v0.8.0's real ``AgentLoopWorker._agent_loop_postprocess`` and ``_postprocess`` (the per-sample and batch
steps both recipes' agent-loop workers run) on one geo3k sample (image pre-resized to 256 x 256 ->
``image_grid_thw=[[1,16,16]]``, 64 ``<|image_pad|>``) with responses that hold vision placeholder ids. Run by
test_rollout_mask.py in a fresh interpreter with the sitecustomize shim, so the patch is applied (or not, under
VLGRPO_PATCHES_DISABLED) by the real post-import hook. Prints one JSON line; tensors go to ``<argv[1]>/results.pt``.

Real pieces: verl's worker methods, verl's ``hf_processor`` (it binds transformers 4.57.6's
``Qwen3VLModel.get_rope_index`` to the processor), transformers' ``Qwen3VLProcessor`` with the tokenizer, image
processor and chat template of assets/models/qwen3-vl-30b-a3b-instruct, verl's actor-side ``_get_input_embeds`` on a
tiny randomly initialised transformers ``Qwen3VLModel``. Stand-ins: the video processor is left out (it needs
torchvision, absent on the CPU test machine; no video is processed), so ``AutoProcessor.from_pretrained`` returns the
processor assembled from those parts; cachetools/uvicorn/fastapi (they come with vLLM in the images; verl's agent-loop
module imports them for its server client) are automatic stand-in modules. The worker is built without Ray
(``object.__new__``) with the attributes the two methods read.

argv[2]: ``full`` (every case, patched and through ``__wrapped__`` = verl's original) or ``disabled`` (the class
attribute on the ``<|vision_start|><|video_pad|>`` case only).
"""

import asyncio
import json
import logging
import os
import sys
import traceback
import types
from pathlib import Path
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # run through runpy: the folder is not on sys.path
sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "preflight"))
from stub_modules import StubFinder

REPO = Path(__file__).resolve().parents[4]
MODEL = REPO / "assets/models/qwen3-vl-30b-a3b-instruct"
IMAGE = REPO / "assets/geo3k-sample/original/train/0/img_diagram.png"
IMAGE_2 = REPO / "assets/geo3k-sample/original/train/1/img_diagram.png"
PATCH = "rollout.vision_placeholder_mask"
IMAGE_PAD, VIDEO_PAD, VISION_START, VISION_END, IM_END = 151655, 151656, 151652, 151653, 151645

out = {"runs": {}, "forward": {}}
saved = {}


class Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append((record.levelname, record.getMessage()))


def processor_and_tokenizer():
    import transformers
    from transformers import AutoImageProcessor
    from verl.utils.tokenizer import hf_processor, hf_tokenizer

    from preflight_helpers import qwen3vl_processor  # tests/python/preflight, put on sys.path above

    tok = hf_tokenizer(str(MODEL))
    proc = qwen3vl_processor(tok, AutoImageProcessor.from_pretrained(str(MODEL), use_fast=False), str(MODEL))
    with mock.patch.object(transformers.AutoProcessor, "from_pretrained", return_value=proc):
        bound = hf_processor(str(MODEL))  # verl's own binding of get_rope_index (+ config) to the processor
    assert bound is proc and hasattr(proc, "get_rope_index"), "verl's hf_processor did not bind get_rope_index"
    return proc, tok


def tiny_vl_model():
    """transformers' Qwen3VLModel with the real vocabulary size and geometry (patch 16, merge 2), tiny widths."""
    import torch
    from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLConfig
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel

    cfg = Qwen3VLConfig(
        text_config=dict(
            vocab_size=151936,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=8,
            rope_scaling={"rope_type": "default", "mrope_section": [2, 1, 1], "mrope_interleaved": True},
        ),
        vision_config=dict(
            depth=1,
            hidden_size=16,
            intermediate_size=32,
            num_heads=2,
            out_hidden_size=16,
            patch_size=16,
            spatial_merge_size=2,
            temporal_patch_size=2,
            deepstack_visual_indexes=[0],
            num_position_embeddings=2304,
        ),
    )
    torch.manual_seed(0)
    return Qwen3VLModel(cfg).eval()


try:
    sys.meta_path.append(StubFinder(("cachetools", "uvicorn", "fastapi")))
    mode = sys.argv[2]
    records = Records()
    logging.getLogger("vlgrpo.patches").addHandler(records)

    import torch
    from PIL import Image
    from transformers import AutoConfig
    from verl.experimental.agent_loop import agent_loop as al

    import vlgrpo.patches

    row = {r["id"]: r for r in vlgrpo.patches.status(import_targets=False)}[PATCH]
    out["status"] = [row["status"], row["reason"]]
    current = al.AgentLoopWorker._agent_loop_postprocess
    out["bound_is_ours"] = getattr(current, "__vlgrpo_patch__", None) == PATCH

    proc, tok = processor_and_tokenizer()
    worker = object.__new__(al.AgentLoopWorker)
    worker.tokenizer, worker.processor = tok, proc
    worker.model_config = types.SimpleNamespace(hf_config=AutoConfig.from_pretrained(str(MODEL)))
    worker.rollout_config = types.SimpleNamespace(prompt_length=128, response_length=112)
    worker.mm_processor_kwargs = {}
    worker.reward_loop_worker_handles = None
    worker.distillation_enabled = False

    image = Image.open(IMAGE).convert("RGB").resize((256, 256))
    image_2 = Image.open(IMAGE_2).convert("RGB").resize((256, 256))
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Find y."}]}]
    text = proc.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    enc = proc(text=[text], images=[image], return_tensors="pt")
    prompt_ids = enc["input_ids"][0].tolist()
    out["prompt_grid"] = enc["image_grid_thw"].tolist()
    out["prompt_image_pads"] = prompt_ids.count(IMAGE_PAD)
    words = tok.encode("The answer is 15.")
    tool_image = [VISION_START] + [IMAGE_PAD] * 64 + [VISION_END]

    # name -> (response ids, response mask, images); placeholders go after the first two generated tokens
    cases = {
        "clean": (words + [IM_END], None, [image]),
        "image_pad": (words[:2] + [IMAGE_PAD] + words[2:] + [IM_END], None, [image]),
        "video_pad": (words[:2] + [VIDEO_PAD] + words[2:] + [IM_END], None, [image]),
        "start_video_pad": (words[:2] + [VISION_START, VIDEO_PAD] + words[2:] + [IM_END], None, [image]),
        "start_image_pad": (words[:2] + [VISION_START, IMAGE_PAD] + words[2:] + [IM_END], None, [image]),
        # cut by response_length right after a generated <|vision_start|> (no <|im_end|>)
        "end_vision_start": (words + [VISION_START], None, [image]),
        # a <|vision_start|> followed by text: harmless for get_rope_index, left alone
        "mid_vision_start": (words[:2] + [VISION_START] + words[2:] + [IM_END], None, [image]),
        "tool_image": (
            words + tool_image + words + [IM_END],
            [1] * len(words) + [0] * len(tool_image) + [1] * len(words) + [1],
            [image, image_2],
        ),
    }
    out["cases"] = {
        name: {"response_ids": ids, "response_mask": mask or [1] * len(ids)} for name, (ids, mask, _) in cases.items()
    }
    out["pad_token_id"] = tok.pad_token_id

    def run(fn, name, uid):
        ids, mask, images = cases[name]
        output = al.AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=list(ids),
            response_mask=list(mask or [1] * len(ids)),
            multi_modal_data={"images": images},
            metrics=al.AgentLoopMetrics(),
            num_turns=2,
        )
        before = len(records.messages)
        try:
            res = asyncio.run(fn(worker, output, False, raw_prompt=messages, uid=uid, index=7))
        except Exception as exc:  # the crash is the result
            tb = traceback.extract_tb(exc.__traceback__)
            where = [f"{Path(f.filename).name}:{f.name}" for f in tb]
            return None, {"exc": [type(exc).__name__, str(exc)], "where": where, "log": records.messages[before:]}
        return res, {
            "exc": None,
            "log": records.messages[before:],
            "response_ids_in": output.response_ids,
            "response_mask_in": output.response_mask,
        }

    if mode == "disabled":
        res, info = run(current, "start_video_pad", "uid-disabled")
        out["runs"]["disabled/start_video_pad"] = info
    else:
        original = getattr(current, "__wrapped__", current)
        internal = {}
        for label, fn in (("unpatched", original), ("patched", current)):
            for name in cases:
                res, info = run(fn, name, f"uid-{name}")
                out["runs"][f"{label}/{name}"] = info
                if res is not None:
                    internal[(label, name)] = res
                    saved[f"{label}/{name}"] = {
                        "responses": res.response_ids,
                        "response_mask": res.response_mask,
                        "input_ids": res.input_ids,
                        "attention_mask": res.attention_mask,
                        "position_ids": res.position_ids,
                        "prompts": res.prompt_ids,
                        **{f"mm/{k}": v for k, v in res.multi_modal_inputs.items()},
                    }

        # the batch step: verl's _postprocess over the same four samples, unpatched vs patched
        batch_names = ["clean", "image_pad", "video_pad", "tool_image"]
        for label in ("unpatched", "patched"):
            proto = worker._postprocess([internal[(label, n)] for n in batch_names], input_non_tensor_batch=None)
            saved[f"batch/{label}"] = {k: proto.batch[k] for k in proto.batch.keys()}
            saved[f"batch/{label}/mm"] = list(proto.non_tensor_batch["multi_modal_inputs"])
        out["batch_names"] = batch_names

        # the policy loss verl aggregates over that batch (core_algos.agg_loss, response_mask as the loss mask, as
        # the actor does): with rows 1-2 (the placeholder samples) given huge per-token losses, and over rows 0 and 3
        # alone; each for both masks
        from verl.trainer.ppo.core_algos import agg_loss

        gen = torch.Generator().manual_seed(0)
        loss_mat = torch.rand(saved["batch/patched"]["response_mask"].shape, generator=gen)
        spiked = loss_mat.clone()
        spiked[1:3] = 1.0e6
        out["loss"] = {}
        for mode in ("token-mean", "seq-mean-token-mean"):
            for label in ("unpatched", "patched"):
                mask = saved[f"batch/{label}"]["response_mask"].float()
                out["loss"][f"{label}/{mode}"] = [
                    agg_loss(loss_mat, mask, mode).item(),
                    agg_loss(spiked, mask, mode).item(),
                    agg_loss(loss_mat[[0, 3]], mask[[0, 3]], mode).item(),
                ]

        # reference: transformers' get_rope_index (as verl binds it) on the hand-sanitized unpadded sequence
        from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel

        for name in ("image_pad", "video_pad", "start_video_pad", "start_image_pad", "end_vision_start"):
            ids = [tok.pad_token_id if t in (IMAGE_PAD, VIDEO_PAD) else t for t in cases[name][0]]
            if ids[-1] == VISION_START:
                ids[-1] = tok.pad_token_id
            seq = torch.tensor([prompt_ids + ids])
            ref, _ = Qwen3VLModel.get_rope_index(
                proc, input_ids=seq, image_grid_thw=enc["image_grid_thw"], attention_mask=torch.ones_like(seq)
            )
            saved[f"reference/{name}"] = {"input_ids": seq, "vision_position_ids": ref}

        # the actor forward's embedding step (verl's _get_input_embeds) on what each run handed to the batch
        from verl.models.transformers.qwen3_vl import _get_input_embeds

        model = tiny_vl_model()
        for key, res in sorted(internal.items()):
            mmi = res.multi_modal_inputs
            try:
                with torch.no_grad():
                    _get_input_embeds(
                        model, res.input_ids, res.attention_mask, mmi["pixel_values"], None, mmi["image_grid_thw"], None
                    )
                out["forward"]["/".join(key)] = None
            except Exception as exc:  # the crash is the result
                out["forward"]["/".join(key)] = [type(exc).__name__, str(exc)]
    torch.save(saved, Path(sys.argv[1]) / "results.pt")
except Exception:
    out["crash"] = traceback.format_exc()
print(json.dumps(out))
