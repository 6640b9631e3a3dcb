"""Field case B17 (c), every file the case names: an ``auto_map`` in any of the model folder's config files
makes transformers' Auto* classes (and verl's reward loop, which forces trust_remote_code on) import the
folder's code, so the preflight must refuse it whichever of the five files carries it. The shipped folder
has no ``processor_config.json``; the test writes one (a JSON object holding only the ``auto_map``)."""

from __future__ import annotations

import json
import os

import pytest

from vlgrpo.preflight.model_dir import check_model_dir
from vlgrpo.preflight.report import Report

FILES = [
    "config.json",
    "tokenizer_config.json",
    "preprocessor_config.json",
    "processor_config.json",
    "video_preprocessor_config.json",
]
AUTO_MAP = {"AutoProcessor": "processing_x.XProcessor"}


@pytest.mark.parametrize("name", FILES)
def test_b17_auto_map_in_any_config_file_is_refused_naming_the_file(model_copy, name):
    path = os.path.join(model_copy, name)
    data = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    assert "auto_map" not in data  # the real Qwen3-VL-30B-A3B files carry none
    data["auto_map"] = AUTO_MAP
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
    report = Report()
    info = check_model_dir(model_copy, report)
    assert not info["clean"]
    hits = [f for f in report.findings if f.code == "model.auto-map"]
    assert len(hits) == 1, [f.line() for f in report.findings]
    assert hits[0].where.file == path and hits[0].severity == "error"
    assert "auto_map" in hits[0].what
