"""C01: the recipes' ``limit_mm_per_prompt`` against vLLM 0.13.0's own multimodal-limit code (vllm_mm_limit.py, a
child interpreter on vLLM's sources from ``make vllm-0.13.0``). An OpenAI chat request with a ``video_url`` part, as
another host could send it to a replica, is refused by vLLM's chat parser before the video is decoded; one image
passes, two are refused. verl's ``limit_images`` replacement (``{"image": N}`` only) lets the video through and
decodes it -- what the preflight's ``mm-limits`` check refuses."""

from __future__ import annotations

import json
import os

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from preflight_helpers import REPO

from vlgrpo.preflight.mm_limits import KEY

VLLM = os.path.join(REPO, ".cache", "vllm-0.13.0")
SCRIPT = os.path.join(os.path.dirname(__file__), "vllm_mm_limit.py")
IMAGE = os.path.join(REPO, "assets", "geo3k-sample", "original", "test", "2401", "img_diagram.png")


def _recipe_limits(name):
    """The value of ``+limit_mm_per_prompt`` in a recipe's reviewed default argv (tests/bats/fixtures), parsed by
    Hydra's own override parser as the launch is."""
    with open(os.path.join(REPO, "tests", "bats", "fixtures", f"{name}-defaults.argv"), encoding="utf-8") as fh:
        line = next(ln.strip() for ln in fh if ln.lstrip("+").startswith(KEY + "="))
    return OverridesParser.create().parse_override(line).value()


@pytest.fixture(scope="module")
def runs():
    import subprocess
    import sys

    if not os.path.isfile(os.path.join(VLLM, ".installed")):
        pytest.fail(f"vLLM 0.13.0's sources are not in {VLLM}; run `make vllm-0.13.0` (make test-python does)")
    limits = [_recipe_limits("fa"), _recipe_limits("vo"), {"image": 1}]
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLGRPO_") and k != "PYTHONPATH"}
    env.update(
        VLGRPO_TEST_VLLM_PATH=os.pathsep.join([os.path.join(VLLM, "src"), os.path.join(VLLM, "deps")]),
        VLGRPO_TEST_LIMITS=json.dumps(limits),
        VLGRPO_TEST_IMAGE=IMAGE,
    )
    proc = subprocess.run([sys.executable, SCRIPT], env=env, capture_output=True, text=True, timeout=600, cwd=REPO)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "crash" not in out, out["crash"] + proc.stderr[-3000:]
    assert out["vllm"].startswith(os.path.join(VLLM, "src")), out["vllm"]
    return out["runs"]


def test_both_recipes_pass_one_image_and_no_video():
    assert _recipe_limits("fa") == _recipe_limits("vo") == {"image": 1, "video": 0}


def test_video_url_refused_by_vllm_before_decoding(runs):
    for run in runs[:2]:
        video = run["video"]
        assert video["supported"] == {"image": None, "video": None}  # Qwen3-VL takes video: only the limit stops it
        assert video["allowed"] == {"image": 1, "video": 0}
        assert not video["accepted"] and video["error"] == "At most 0 video(s) may be provided in one prompt."
        assert video["decoded"] == 0  # refused while parsing: the 1,000 frames were never decoded


def test_one_image_passes_two_are_refused(runs):
    for run in runs[:2]:
        assert run["one_image"]["accepted"] and run["one_image"]["media"] == "ok"
        assert "<image 1>" in run["one_image"]["prompt"]
        assert run["two_images"]["error"] == "At most 1 image(s) may be provided in one prompt."


def test_limit_images_alone_lets_the_video_through_and_decodes_it(runs):
    """verl 0.8.0 replaces the dict by {"image": limit_images}: vLLM's default for the unnamed video is 999."""
    video = runs[2]["video"]
    assert video["allowed"] == {"image": 1, "video": 999}
    assert video["accepted"] and video["decoded"] == 1 and video["media"] != "ok"
