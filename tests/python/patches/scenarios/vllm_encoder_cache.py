"""C07 on vLLM 0.13.0's real scheduler code (``make vllm-0.13.0``), on the CPU: the real ``EncoderCacheManager``
(``vllm/v1/core/encoder_cache_manager.py``), ``Request`` (``vllm/v1/request.py``), ``MultiModalFeatureSpec`` /
``PlaceholderRange`` (``vllm/multimodal/inputs.py``) and the ``Scheduler`` methods on the path
(``vllm/v1/core/sched/scheduler.py``): ``_try_schedule_encoder_inputs`` (decides whether the encoder runs for a
request), ``reset_prefix_cache`` (what verl calls around a weight update) and ``_free_request`` (a finished or
aborted request releases its encoder entries).

The scheduler object is made with ``object.__new__`` and given the fields these methods read (its ``__init__``
needs a whole ``VllmConfig``); its KV cache manager is a stand-in whose ``reset_prefix_cache`` returns True (no
request holds blocks, as after verl's abort) and whose ``free`` does nothing. ``SamplingParams`` is a namespace with the four fields ``Request``
reads. Modules vLLM imports but this path never uses are stand-ins (``STUBBED``; ``msgspec.Struct`` accepts the
class keywords vLLM passes).

Steps, each printed: request ``a`` with image ``img-1`` is scheduled (the encoder runs: input 0) and finishes;
either a reset (the weight update) or none; request ``b`` (the resumed partial rollout, same image) is scheduled.
Environment: ``VLGRPO_TEST_VLLM_PATH``; ``VLGRPO_TEST_RESET`` (1: reset between a and b). Prints one JSON line.
"""

import json
import os
import sys
import traceback
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [p for p in os.environ["VLGRPO_TEST_VLLM_PATH"].split(os.pathsep) if p]
from stub_modules import AutoStubModule, StubFinder

STUBBED = (
    "openai_harmony",
    "xgrammar",
    "diskcache",
    "fastapi",
    "llguidance",
    "cpuinfo",
    "msgspec",
    "cbor2",
    "gguf",
    "zmq",
    "blake3",
    "sniffio",
    "torchvision",
)
PATCH = "rollout.encoder_cache_reset"


class _Struct:
    def __init_subclass__(cls, **kwargs):
        pass


def _custom(mod):
    if mod.__name__ == "msgspec":
        mod.Struct = _Struct
        mod.field = lambda default=None, default_factory=None, **kwargs: default


out = {}
try:
    sys.meta_path.append(StubFinder(STUBBED, _custom))
    # the structured-output backends import the Mistral tokenizer, which builds the OpenAI server's pydantic models
    sys.modules["vllm.tokenizers.mistral"] = AutoStubModule("vllm.tokenizers.mistral")
    from vllm.multimodal.inputs import MultiModalFeatureSpec, PlaceholderRange
    from vllm.v1.core.encoder_cache_manager import EncoderCacheManager
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.request import Request, RequestStatus

    import vlgrpo.patches

    rows = {r["id"]: r for r in vlgrpo.patches.status(import_targets=False)}
    out["status"] = [rows[PATCH]["status"], rows[PATCH]["reason"]]
    out["vllm"] = sys.modules["vllm"].__file__

    sched = object.__new__(Scheduler)
    sched.encoder_cache_manager = EncoderCacheManager(cache_size=1024)
    sched.ec_connector = None
    sched.connector = None
    sched.is_encoder_decoder = False
    sched.scheduler_config = SimpleNamespace(disable_chunked_mm_input=False)
    sched.kv_cache_manager = SimpleNamespace(reset_prefix_cache=lambda: True, free=lambda request: None)
    sched.requests = {}
    sched.running = []
    sched.finished_req_ids = set()
    sched.finished_req_ids_dict = None
    sched._connector_finished = lambda request: (False, None)

    def request(rid, image_hash, prompt_len=300):
        feature = MultiModalFeatureSpec(
            data=None, modality="image", identifier=image_hash, mm_position=PlaceholderRange(offset=10, length=256)
        )
        params = SimpleNamespace(
            max_tokens=64, structured_outputs=None, extra_args=None, skip_reading_prefix_cache=None
        )
        return Request(rid, list(range(prompt_len)), params, None, eos_token_id=0, mm_features=[feature])

    def schedule(req):
        """What Scheduler.schedule does for a new request's encoder inputs: decide, then allocate what runs."""
        to_run, _, _, _ = sched._try_schedule_encoder_inputs(req, 0, req.num_prompt_tokens, 4096)
        for i in to_run:
            sched.encoder_cache_manager.allocate(req, i)
        return to_run

    a = request("a", "img-1")
    sched.requests["a"] = a
    out["a_encoder_inputs"] = schedule(a)
    a.status = RequestStatus.FINISHED_ABORTED
    sched._free_request(a)  # the sync aborts it: its entry becomes freeable, kept until space is needed
    out["cached_after_a"] = sorted(sched.encoder_cache_manager.cached)
    if os.environ.get("VLGRPO_TEST_RESET") == "1":
        out["reset"] = sched.reset_prefix_cache()
    out["freed_to_workers"] = sched.encoder_cache_manager.get_freed_mm_hashes()
    b = request("b", "img-1", prompt_len=420)  # the resumed partial rollout: prompt + generated so far, same image
    out["b_encoder_inputs"] = schedule(b)
    out["slots"] = [sched.encoder_cache_manager.num_free_slots, sched.encoder_cache_manager.num_freeable_slots]
except Exception:
    out["crash"] = traceback.format_exc()
print(json.dumps(out))
