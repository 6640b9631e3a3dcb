"""Every detector on the real source text of the releases installed for the tests (no import of the modules).

transformers 4.57.6 and verl 0.8.0 come from the dev venv, verl 0.7.1 from ``.cache/verl-0.7.1`` (``make
verl-0.7.1``). The functions are found in the files with :func:`vlgrpo.patches.source.find_function` (the way a
reviewer runs the detectors on other releases' wheels; the cross-version table in docs/patches.md was made the
same way over transformers 4.57.0-5.5.3 and verl 0.7.0-0.9.0). Each verdict is the one the field cases state:
B01 (pos-embed, 4.57.x faulty; verl 0.8.0's copy fixed), B03 (router dtype, every 4.57.x), B04 (NPU block, verl
0.7.1 faulty, 0.8.0 fixed), B05 (verl 0.8.0's vLLM server has no placeholder ban).
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import pytest
from patch_helpers import VERL_071

from vlgrpo.patches import source
from vlgrpo.patches.fixes import npu_qwen3_vl_moe_train_routing as npu_routing
from vlgrpo.patches.fixes import qwen3_vl_moe_router_dtype as router_dtype
from vlgrpo.patches.fixes import qwen3_vl_text_rotary_device as text_rotary_fix
from vlgrpo.patches.fixes import qwen3_vl_vision_pos_embed as pos_embed_fix
from vlgrpo.patches.fixes import rollout_vision_placeholder_ban as rollout_ban


def _root(package: str) -> Path:
    return Path(importlib.util.find_spec(package).submodule_search_locations[0]).parent


TF = "transformers/models/qwen3_vl/modeling_qwen3_vl.py"
TF_MOE = "transformers/models/qwen3_vl_moe/modeling_qwen3_vl_moe.py"
NPU = "verl/models/transformers/npu_patch.py"
SERVER = "verl/workers/rollout/vllm_rollout/vllm_async_server.py"

CASES = [  # (release root, file, qualname, detector, faulty, words in the reason)
    (
        "transformers",
        TF,
        "Qwen3VLVisionModel.fast_pos_embed_interpolate",
        pos_embed_fix.is_faulty,
        True,
        "pos_embed.weight.device",
    ),
    (
        "transformers",
        TF_MOE,
        "Qwen3VLMoeVisionModel.fast_pos_embed_interpolate",
        pos_embed_fix.is_faulty,
        True,
        "pos_embed.weight.device",
    ),
    (
        "verl",
        "verl/models/transformers/qwen3_vl.py",
        "fast_pos_embed_interpolate",
        pos_embed_fix.is_faulty,
        False,
        "takes no device",
    ),
    ("transformers", TF, "Qwen3VLTextRotaryEmbedding.forward", text_rotary_fix.is_faulty, True, "inv_freq"),
    ("transformers", TF_MOE, "Qwen3VLMoeTextRotaryEmbedding.forward", text_rotary_fix.is_faulty, True, "inv_freq"),
    (
        "transformers",
        TF_MOE,
        "Qwen3VLMoeTextSparseMoeBlock.forward",
        router_dtype.is_faulty,
        True,
        "cast to hidden_states.dtype, then scattered into zeros_like(router_logits)",
    ),
    (
        "transformers",
        TF_MOE,
        "Qwen3VLMoeTextSparseMoeBlock.forward",
        npu_routing.is_faulty,
        False,
        "both train and eval",
    ),
    (
        "verl-0.7.1",
        NPU,
        "NPUQwen3VLMoeTextSparseMoeBlock.forward",
        npu_routing.is_faulty,
        True,
        "only under `if not self.training`",
    ),
    ("verl", NPU, "NPUQwen3VLMoeTextSparseMoeBlock.forward", npu_routing.is_faulty, False, "both train and eval"),
    (
        "verl",
        NPU,
        "NPUQwen3VLMoeTextSparseMoeBlock.forward",
        router_dtype.is_faulty,
        False,
        "cast to the dtype of the tensor they are scattered into",
    ),
]


def _file(root: str, rel: str) -> Path:
    if root == "verl-0.7.1":
        if not (VERL_071 / rel).is_file():
            pytest.fail(f"verl 0.7.1 is not installed in {VERL_071}; run `make verl-0.7.1`")
        return VERL_071 / rel
    return _root(root) / rel


@pytest.mark.parametrize(
    "root,rel,qualname,detector,faulty,words", CASES, ids=[f"{c[0]}:{c[2]}:{c[3].__name__}" for c in CASES]
)
def test_detector_verdict_on_installed_source(root, rel, qualname, detector, faulty, words):
    node = source.find_function(_file(root, rel).read_text(), qualname)
    got, reason = detector(node)
    assert got is faulty, reason
    assert words in reason


def test_find_function_finds_async_methods_and_names_missing_ones():
    # verl's vLLMHttpServer.generate is `async def`: the source-level lookup must find it
    node = source.find_function(_file("verl", SERVER).read_text(), "vLLMHttpServer.generate")
    assert node.name == "generate" and "sampling_params" in [a.arg for a in node.args.args]
    with pytest.raises(KeyError, match="vLLMHttpServer.no_such_method not found"):
        source.find_function(_file("verl", SERVER).read_text(), "vLLMHttpServer.no_such_method")


@pytest.mark.parametrize("root", ["verl", "verl-0.7.1"])
def test_rollout_ban_detector_on_installed_server_source(root, monkeypatch):
    # is_faulty reads the module defining the function; point a stand-in module at the real file (no vllm import)
    path = _file(root, SERVER)
    module = types.ModuleType("vlgrpo_test_vllm_async_server")
    module.__file__ = str(path)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    node = source.find_function(path.read_text(), "vLLMHttpServer.generate")
    namespace: dict = {}
    exec(f"async def generate({', '.join(a.arg for a in node.args.args)}):\n    pass\n", namespace)
    namespace["generate"].__module__ = module.__name__
    faulty, reason = rollout_ban.is_faulty(namespace["generate"])
    assert faulty is True and "without banning image/video placeholder tokens" in reason


def test_reasons_name_the_line_of_the_installed_file():
    # at run time the detectors get the bound function; "line N" must be the line in its file, as in the table
    import inspect

    from transformers.models.qwen3_vl import modeling_qwen3_vl as vl
    from transformers.models.qwen3_vl_moe import modeling_qwen3_vl_moe as moe

    for bound, detector, words in (
        (moe.Qwen3VLMoeTextSparseMoeBlock.forward, router_dtype.is_faulty, "zeros_like(router_logits).scatter_("),
        (vl.Qwen3VLTextRotaryEmbedding.forward, text_rotary_fix.is_faulty, "self.inv_freq"),
    ):
        func = inspect.unwrap(bound)  # the upstream function (also when a vlgrpo patch is bound over it)
        faulty, reason = detector(func)
        assert faulty, reason
        line = int(reason.split("line ", 1)[1].split()[0])
        text = Path(func.__code__.co_filename).read_text().splitlines()[line - 1]
        assert words in text, (reason, text)
