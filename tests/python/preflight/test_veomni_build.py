"""B19: the image's VeOmni can build the Qwen3-VL-MoE model on the pinned transformers (``rules.veomni-build``), and
a 1-step dry run of VeOmni's model on one Geometry3K image row.

Reference: the real VeOmni 0.1.9a5 source in .cache/veomni-0.1.9a5 (``make veomni-0.1.9a5``; VeOmni is not installed
in .venv, so each test puts it on ``sys.path`` for itself and its child interpreters) over transformers 4.57.6; the
parameter count of transformers' own ``Qwen3VLMoeForConditionalGeneration``; a VeOmni tree whose Qwen3-VL-MoE
registration is removed or replaced by a text-only model (every other file is the real one, linked).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from preflight_helpers import MODEL_30B, REPO, UPSTREAM_VEOMNI, read_argv

VEOMNI = os.path.join(REPO, ".cache", "veomni-0.1.9a5")
DRY_RUN = os.path.join(os.path.dirname(__file__), "veomni_dry_run.py")
REGISTRATION = os.path.join("veomni", "models", "transformers", "qwen3_vl_moe", "__init__.py")


@pytest.fixture(scope="module")
def veomni_src() -> str:
    if not os.path.isdir(os.path.join(VEOMNI, "veomni")):
        pytest.fail(f"VeOmni 0.1.9a5 is not installed in {VEOMNI}; run `make veomni-0.1.9a5` (make test-python does)")
    return VEOMNI


def veomni_variant(root: str, replace: dict[str, str]) -> str:
    """A VeOmni tree under ``root``: the real .cache/veomni-0.1.9a5 linked entry by entry, except the files of
    ``replace`` (relative path -> new text), whose parent folders are real folders."""
    for rel, text in replace.items():
        parts = rel.split(os.sep)
        for depth in range(len(parts)):
            d = os.path.join(root, *parts[:depth])
            src = os.path.join(VEOMNI, *parts[:depth])
            os.makedirs(d, exist_ok=True)
            for name in os.listdir(src):
                if name == parts[depth] or name == "__pycache__" or os.path.lexists(os.path.join(d, name)):
                    continue
                os.symlink(os.path.join(src, name), os.path.join(d, name))
        with open(os.path.join(root, rel), "w", encoding="utf-8") as fh:
            fh.write(text)
    return root


def _build_findings(report):
    return [f for f in report.findings if f.code == "rules.veomni-build"]


def _reference_parameter_count() -> int:
    """transformers 4.57.6's own Qwen3VLMoeForConditionalGeneration of the shipped config, on meta."""
    import torch
    from transformers import AutoConfig
    from transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe import Qwen3VLMoeForConditionalGeneration

    cfg = AutoConfig.from_pretrained(MODEL_30B)
    with torch.device("meta"):
        model = Qwen3VLMoeForConditionalGeneration(cfg)
    return sum(p.numel() for p in model.parameters())


def test_b19_pinned_veomni_builds_the_30b_model_on_meta(veomni_src, monkeypatch):
    from vlgrpo.preflight import run_preflight

    monkeypatch.syspath_prepend(veomni_src)
    report = run_preflight(read_argv(UPSTREAM_VEOMNI), check_data=False, model_path=MODEL_30B)
    assert report.summary["veomni"] == "0.1.9a5"
    assert _build_findings(report) == [], [f.line() for f in report.findings]
    assert [f for f in report.findings if f.code == "rules.veomni-version"] == []
    built = report.summary["veomni_build"]
    assert built["stage"] == "ok", built
    # VeOmni's own class for transformers < 5.2 (not transformers' class, not the >=5.2 generated one)
    assert built["model_class"] == (
        "veomni.models.transformers.qwen3_vl_moe.modeling_qwen3_vl_moe.Qwen3VLMoeForConditionalGeneration"
    )
    assert built["parameters"] == _reference_parameter_count() > 30_000_000_000
    # the tiny image forward ran: 4 image tokens, random-init loss near ln(vocab 151936) = 11.93
    assert built["forward"]["image_tokens"] == 4 and abs(built["forward"]["loss"] - math.log(151936)) < 0.5
    assert "veomni" not in sys.modules  # built in a child interpreter: this process stays unpatched


def test_b19_dry_run_one_geo3k_image_row(veomni_src, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLGRPO_")}
    env["PYTHONPATH"] = veomni_src
    proc = subprocess.run(
        [sys.executable, DRY_RUN, str(tmp_path / "scaled")],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        cwd=REPO,
    )  # a hang guard, not a speed check
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "crash" not in out, out.get("crash")
    assert out["model_class"].startswith("veomni.models.transformers.qwen3_vl_moe.")
    assert out["devices"] == ["cpu"] and out["dtypes"] == ["torch.bfloat16"]
    assert out["pos_embed"] == [2304, 32]  # the 30B tower's 48 x 48 position grid, width scaled down
    # the processor's own expansion: one <|image_pad|> per merged 2 x 2 patch block
    ((t, h, w),) = out["image_grid_thw"]
    assert out["image_pad_tokens"] == t * h * w // 4 and out["pixel_values"] == [t * h * w, 3 * 2 * 16 * 16]
    assert out["response_tokens"] >= 2
    # random init (std 0.02): the logits are near zero, so the loss is near ln(vocab)
    assert math.isfinite(out["loss"]) and abs(out["loss"] - out["ln_vocab"]) < 0.5, out
    assert out["pos_embed_grad"]["finite"] and out["pos_embed_grad"]["abs_sum"] > 0
    assert out["params_without_grad"] == 0, out["params_without_grad_first"]


TEXT_ONLY = '''"""Stand-in: a VeOmni whose qwen3_vl_moe entry builds a text-only model (verl issue #6146's VeOmni)."""
from transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe import Qwen3VLMoeForConditionalGeneration

from ...loader import MODELING_REGISTRY


class TextOnlyQwen3VLMoe(Qwen3VLMoeForConditionalGeneration):
    def __init__(self, config):
        super().__init__(config)
        del self.model.visual

    def forward(self, input_ids=None, attention_mask=None, labels=None, **kwargs):
        if kwargs.get("pixel_values") is not None:
            raise ValueError("currently supports text-only inputs; pixel_values is not supported yet")
        return super().forward(input_ids=input_ids, attention_mask=attention_mask, labels=labels, **kwargs)


@MODELING_REGISTRY.register("qwen3_vl_moe")
def register_qwen3_vl_moe_modeling(architecture):
    return TextOnlyQwen3VLMoe
'''


REFUSES_IMAGES = '''"""Stand-in: a VeOmni whose qwen3_vl_moe model has the VL classes but refuses images at run time (#6146)."""
from transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe import Qwen3VLMoeForConditionalGeneration

from ...loader import MODELING_REGISTRY


class RefusesImages(Qwen3VLMoeForConditionalGeneration):
    def forward(self, input_ids=None, attention_mask=None, pixel_values=None, image_grid_thw=None, **kwargs):
        if pixel_values is not None:
            raise ValueError("Qwen3VLMoe currently supports text-only inputs; pixel_values is not supported yet")
        return super().forward(input_ids=input_ids, attention_mask=attention_mask, **kwargs)


@MODELING_REGISTRY.register("qwen3_vl_moe")
def register_qwen3_vl_moe_modeling(architecture):
    return RefusesImages
'''

VARIANTS = {
    "no-entry": "# this VeOmni ships no Qwen3-VL-MoE model\n",
    "text-only": TEXT_ONLY,
    "refuses-images": REFUSES_IMAGES,
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_b19_veomni_without_the_vl_model_is_an_error(veomni_src, tmp_path, monkeypatch, variant):
    from omegaconf import OmegaConf

    from vlgrpo.preflight.report import Report
    from vlgrpo.preflight.veomni_build import check_veomni_build

    monkeypatch.syspath_prepend(veomni_variant(str(tmp_path / "veomni"), {REGISTRATION: VARIANTS[variant]}))
    work = OmegaConf.create({"actor_rollout_ref": {"actor": {"veomni": {"attn_implementation": "flash_attention_2"}}}})
    report = Report()
    summary = check_veomni_build(work, MODEL_30B, report, pinned="0.1.9a5")
    (f,) = _build_findings(report)
    assert f.severity == "error" and f.where.key == "model_engine" and f.where.file.endswith("config.json")
    assert f.fix.startswith("pip install --no-deps veomni==0.1.9a5")
    if variant == "no-entry":
        assert summary["stage"] == "registry"
        assert "no model for model_type 'qwen3_vl_moe'" in f.what and "qwen3_moe" in f.what  # the keys it has
    elif variant == "text-only":
        assert summary["stage"] == "vision"
        assert "TextOnlyQwen3VLMoe has no vision tower" in f.what and "#6146" in f.why
    else:  # builds on meta with a vision tower; only the forward with an image shows it
        assert summary["stage"] == "forward" and summary["model_class"].endswith(".RefusesImages")
        assert "currently supports text-only inputs" in f.what and "#6146" in f.why
