"""C01: vLLM 0.13.0's own multimodal-limit code on the CPU, run by test_vllm_mm_limit.py in a child interpreter.

Real (vLLM 0.13.0's sources, ``make vllm-0.13.0``): ``MultiModalConfig`` (``vllm/config/multimodal.py``, parses
``limit_mm_per_prompt``), ``Qwen3VLProcessingInfo.get_supported_mm_limits`` / ``BaseProcessingInfo.
get_allowed_mm_limits`` and ``BaseMultiModalProcessor.validate_num_items`` on ``Qwen3VLMultiModalProcessor``
(``vllm/multimodal/processing.py``, ``vllm/model_executor/models/qwen3_vl.py``), and the OpenAI server's chat parser
``parse_chat_messages_futures`` with ``AsyncMultiModalItemTracker`` and ``AsyncMultiModalContentParser``
(``vllm/entrypoints/chat_utils.py``), whose media connector decodes ``video_url`` data URLs (``VideoMediaIO``).
Stand-ins: the model config (the four attributes the parser reads), the processor's ``__init__`` (its two limit
lookups done the same way without the HF processor, which needs the model weights' config), the model class's
placeholder string; modules vLLM imports but this path never uses (``STUBBED``).

Environment: ``VLGRPO_TEST_VLLM_PATH`` (vLLM's source folder and its small dependencies), ``VLGRPO_TEST_LIMITS`` (JSON
list of ``limit_mm_per_prompt`` dicts), ``VLGRPO_TEST_IMAGE`` (a PNG). Prints one JSON line."""

import asyncio
import base64
import json
import os
import sys
import traceback
import warnings
from types import SimpleNamespace

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "patches", "scenarios"))
sys.path[:0] = [p for p in os.environ["VLGRPO_TEST_VLLM_PATH"].split(os.pathsep) if p]
from stub_modules import StubFinder

#: imported by vLLM's modules on this path, never called on it (ZMQ engine client, GGUF loader, harmony format,
#: CBOR/blake3 hashing of media, torchvision-based video processor of transformers, sniffio of openai's async client)
STUBBED = ("openai_harmony", "cbor2", "gguf", "zmq", "blake3", "sniffio", "torchvision")


def _request(limits, content, decoded):
    from vllm.config.multimodal import MultiModalConfig
    from vllm.entrypoints import chat_utils
    from vllm.model_executor.models.qwen3_vl import Qwen3VLMultiModalProcessor, Qwen3VLProcessingInfo

    mm_config = MultiModalConfig(limit_per_prompt=dict(limits))  # its validator rewrites the dict in place
    model_config = SimpleNamespace(
        multimodal_config=mm_config,
        get_multimodal_config=lambda: mm_config,
        allowed_local_media_path="",
        allowed_media_domains=None,
    )
    info = object.__new__(Qwen3VLProcessingInfo)
    info.ctx = SimpleNamespace(get_mm_config=lambda: mm_config, model_config=model_config)
    proc = object.__new__(Qwen3VLMultiModalProcessor)
    proc.info = info
    proc._supported_mm_limits = info.get_supported_mm_limits()  # as BaseMultiModalProcessor.__init__
    proc._allowed_mm_limits = info.get_allowed_mm_limits()
    chat_utils.AsyncMultiModalItemTracker.mm_processor = property(lambda self: proc)
    chat_utils.AsyncMultiModalItemTracker.model_cls = property(
        lambda self: SimpleNamespace(get_placeholder_str=lambda modality, i: f"<{modality} {i}>")
    )
    before = len(decoded)
    try:
        conversation, mm_future, _ = chat_utils.parse_chat_messages_futures(
            [{"role": "user", "content": content}], model_config, "string"
        )
    except ValueError as exc:
        return {
            "accepted": False,
            "error": str(exc),
            "decoded": len(decoded) - before,
            "supported": dict(proc._supported_mm_limits),
            "allowed": dict(proc._allowed_mm_limits),
        }
    try:  # the server awaits the media next: this is where a video is decoded
        asyncio.run(mm_future)
        media = "ok"
    except Exception as exc:  # the test's video frames are not real JPEGs
        media = f"{type(exc).__name__}: {exc}"[:200]
    return {
        "accepted": True,
        "prompt": conversation[0]["content"],
        "decoded": len(decoded) - before,
        "media": media,
        "supported": dict(proc._supported_mm_limits),
        "allowed": dict(proc._allowed_mm_limits),
    }


def main():
    out = {}
    try:
        sys.meta_path.append(StubFinder(STUBBED))
        import vllm
        from vllm.multimodal import video

        out["vllm"] = vllm.__file__
        decoded = []
        load_base64 = video.VideoMediaIO.load_base64

        def counting(self, media_type, data):
            decoded.append(media_type)
            return load_base64(self, media_type, data)

        video.VideoMediaIO.load_base64 = counting
        frame = base64.b64encode(b"\xff\xd8\xff\xe0 not a jpeg").decode()
        video_part = {"type": "video_url", "video_url": {"url": "data:video/jpeg;base64," + ",".join([frame] * 1000)}}
        with open(os.environ["VLGRPO_TEST_IMAGE"], "rb") as fh:
            png = base64.b64encode(fh.read()).decode()
        image_part = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + png}}
        text = {"type": "text", "text": "Find x."}
        out["runs"] = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a refused request's media coroutines are never awaited
            for limits in json.loads(os.environ["VLGRPO_TEST_LIMITS"]):
                out["runs"].append(
                    {
                        "limits": limits,
                        "video": _request(limits, [video_part, text], decoded),
                        "one_image": _request(limits, [image_part, text], decoded),
                        "two_images": _request(limits, [image_part, image_part, text], decoded),
                    }
                )
    except Exception:
        out["crash"] = traceback.format_exc()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
