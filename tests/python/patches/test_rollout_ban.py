"""B05: vision placeholder tokens banned in verl's vLLM rollout sampling (``rollout.vision_placeholder_ban``).

verl v0.8.0's real ``vLLMHttpServer.generate`` runs up to ``vllm.SamplingParams`` in a fresh interpreter, with vllm
(and zmq/msgspec/uvicorn/fastapi, which come with vLLM in the images) replaced by an automatic stand-in whose
``SamplingParams`` records its arguments (scenarios/vllm_generate.py)."""

from __future__ import annotations

import importlib
import sys

from patch_helpers import SCENARIOS, run_py

from vlgrpo.patches.fixes import rollout_vision_placeholder_ban as rollout_ban

SCRIPT = SCENARIOS / "vllm_generate.py"


def _scenario(tmp_path, shim_dir, env=None):
    code = (
        f"import runpy, sys; sys.argv = ['x', {str(tmp_path)!r}]; runpy.run_path({str(SCRIPT)!r}, run_name='__main__')"
    )
    out = run_py(code, path=[shim_dir], env=env).json
    assert "crash" not in out, out.get("crash")
    return out


def test_verl_080_generate_bans_qwen3_vl_placeholders(tmp_path, shim_dir):
    out = _scenario(tmp_path, shim_dir)
    status, reason = out["status"]
    assert status == "applied" and "issue #5817" in reason
    sp = out["sampling_params"]
    # ids from the real Qwen3-VL-30B-A3B config.json; the caller's own bias and settings survive
    assert sp["logit_bias"] == {"42": 1.5, "151655": rollout_ban.BAN_BIAS, "151656": rollout_ban.BAN_BIAS}
    assert sp["temperature"] == 1.0 and sp["top_p"] == 1.0 and sp["max_tokens"] == 1024
    assert out["caller_params"]["logit_bias"] == {"42": 1.5}


def test_unpatched_generate_passes_no_ban(tmp_path, shim_dir):
    out = _scenario(tmp_path, shim_dir, env={"VLGRPO_PATCHES_DISABLED": "rollout.vision_placeholder_ban"})
    assert out["status"][0] == "disabled"
    assert out["sampling_params"]["logit_bias"] == {"42": 1.5}


def test_detector_sees_an_existing_ban(tmp_path, monkeypatch):
    (tmp_path / "fixed_server.py").write_text(
        "class Server:\n"
        "    async def generate(self, prompt_ids, sampling_params, request_id):\n"
        "        hf = self.model_config.hf_config\n"
        "        sampling_params['logit_bias'] = {hf.video_token_id: -100, hf.image_token_id: -100}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module("fixed_server")
    try:
        assert rollout_ban.is_faulty(mod.Server.generate)[0] is False
    finally:
        sys.modules.pop("fixed_server", None)
    assert rollout_ban.is_faulty(lambda self, x: x)[0] is False  # no sampling_params: not the target


def test_verify_passes():
    rollout_ban.verify()
