"""The model folder's chat templates: compared with the model release's, and rendered once to see what they keep.

verl builds every training prompt by rendering the folder's chat template (``RLHFDataset``: the processor's
``apply_chat_template`` when there is a processor, else the tokenizer's). A template is code the folder brings: it
can rewrite every problem ("Ignore the picture. Reply with the word yes."), drop the image, repeat it, or add an
instruction, and the run trains on that without a word. Each template the folder carries, wherever transformers
4.57.6 looks for one (``chat_template.jinja``, ``chat_template.json``, ``tokenizer_config.json``'s
``chat_template``, one string or a list of named ones, and ``additional_chat_templates/*.jinja``):

- differs from every known release template (``known_chat_templates.json``: the Qwen3-VL Instruct template) ->
  ``template.changed`` (warning), with the first differing line, so the plan shows it;
- rendered by transformers' own renderer (``tokenizer.apply_chat_template(..., chat_template=text)``, its sandboxed
  Jinja environment) on a probe conversation of one image and one problem, as verl's dataset structures a
  Geometry3K row, must keep the problem text exactly once and give exactly one image placeholder
  (``<|vision_start|><|image_pad|><|vision_end|>``), else ``template.drops-input`` (error); a template that
  does not render is that error too (verl would fail on the first row).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
from typing import Any

from .report import ERROR, WARNING, Finding, Report, Where

KNOWN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "known_chat_templates.json")
PROBE = "In triangle PQR, find x if PQ = 7 and QR = 9. (probe 5f0c)"
IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"


def known_templates() -> dict[str, str]:
    """sha256 of the template text -> release name, from :data:`KNOWN`."""
    with open(KNOWN, encoding="utf-8") as fh:
        doc = json.load(fh)
    return {t["sha256"]: t["name"] for t in doc["templates"]}


def _known_text() -> str:
    with open(KNOWN, encoding="utf-8") as fh:
        text: str = json.load(fh)["templates"][0]["template"]
    return text


def folder_templates(path: str) -> list[tuple[str, str]]:
    """``(where, template text)`` for every chat template in the model folder ``path`` that transformers reads."""
    from .model_dir import load_json

    out: list[tuple[str, str]] = []
    jinja = os.path.join(path, "chat_template.jinja")
    if os.path.isfile(jinja):
        with open(jinja, encoding="utf-8", errors="replace") as fh:
            out.append(("chat_template.jinja", fh.read()))
    data, _ = (
        load_json(os.path.join(path, "chat_template.json"))
        if os.path.isfile(os.path.join(path, "chat_template.json"))
        else (None, "")
    )
    if isinstance(data, dict) and isinstance(data.get("chat_template"), str):
        out.append(("chat_template.json", data["chat_template"]))
    data, _ = (
        load_json(os.path.join(path, "tokenizer_config.json"))
        if os.path.isfile(os.path.join(path, "tokenizer_config.json"))
        else (None, "")
    )
    tmpl = data.get("chat_template") if isinstance(data, dict) else None
    if isinstance(tmpl, str):
        out.append(("tokenizer_config.json chat_template", tmpl))
    elif isinstance(tmpl, list):
        for item in tmpl:
            if isinstance(item, dict) and isinstance(item.get("template"), str):
                out.append((f"tokenizer_config.json chat_template {item.get('name')!r}", item["template"]))
    extra = os.path.join(path, "additional_chat_templates")
    if os.path.isdir(extra):
        for name in sorted(os.listdir(extra)):
            if name.endswith(".jinja"):
                with open(os.path.join(extra, name), encoding="utf-8", errors="replace") as fh:
                    out.append((f"additional_chat_templates/{name}", fh.read()))
    return out


def probe_messages() -> list[dict[str, Any]]:
    """One Geometry3K-shaped user turn as verl's ``RLHFDataset._build_messages`` structures ``"<image>" + problem``:
    a content list of an image item and a text item."""
    return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": PROBE}]}]


def _first_difference(text: str, known: str) -> str:
    """The first changed block, as ``line N: was '...', now '...'`` (each side cut to 100 characters)."""
    a, b = known.splitlines(), text.splitlines()
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        was = " / ".join(x.strip() for x in a[i1:i2])[:100]
        now = " / ".join(x.strip() for x in b[j1:j2])[:100]
        return f"line {j1 + 1}: was {was!r}, now {now!r}"
    return "white space only"


def check_chat_templates(
    path: str, tokenizer: Any, report: Report, key: str = "actor_rollout_ref.model.path"
) -> dict[str, Any]:
    """Add ``template.changed`` / ``template.drops-input`` findings for the templates of folder ``path``, rendered
    with ``tokenizer`` (a transformers tokenizer; its ``apply_chat_template`` is the renderer). Returns
    ``{"templates": [{"where", "sha256", "known"}]}`` for the summary."""
    known = known_templates()
    out = []
    seen: set[str] = set()
    for where, text in folder_templates(path):
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        out.append({"where": where, "sha256": digest, "known": known.get(digest, "")})
        if digest in seen:
            continue
        seen.add(digest)
        loc = Where(key=key, file=os.path.join(path, where.split(" ")[0]))
        if digest not in known:
            report.add(
                Finding(
                    "template.changed",
                    WARNING,
                    f"the chat template in {where} differs from the "
                    f"{next(iter(known.values()))} release template: {_first_difference(text, _known_text())}",
                    loc,
                    "verl renders every training prompt with it; a changed template changes what the policy sees",
                    "use the model release's template, or check that the difference is intended",
                )
            )
        try:
            rendered = tokenizer.apply_chat_template(
                probe_messages(), chat_template=text, add_generation_prompt=True, tokenize=False
            )
        except Exception as exc:  # any failure of the template is the finding
            report.add(
                Finding(
                    "template.drops-input",
                    ERROR,
                    f"the chat template in {where} does not render a "
                    f"one-image prompt: {type(exc).__name__}: {' '.join(str(exc).split())[:160]}",
                    loc,
                    "verl fails on the first row",
                    "use the model release's template",
                )
            )
            continue
        problems = []
        if rendered.count(PROBE) != 1:
            problems.append(f"the problem text appears {rendered.count(PROBE)} times, not once")
        if rendered.count(IMAGE) != 1:
            problems.append(f"the image placeholder appears {rendered.count(IMAGE)} times, not once")
        if problems:
            report.add(
                Finding(
                    "template.drops-input",
                    ERROR,
                    f"the chat template in {where} does not keep the prompt: " + "; ".join(problems),
                    loc,
                    "every training prompt would lose (or repeat) the problem or the image: the run trains on something "
                    "else without a word",
                    "use the model release's template",
                )
            )
    return {"templates": out}
