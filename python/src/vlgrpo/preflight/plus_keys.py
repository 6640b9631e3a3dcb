"""B10: override keys against what consumes them, and suggestions that are plausible.

Hydra composes ``+section.anything=value`` for any new key, so a typo under ``+`` (``+data.max_prompt_lenght=4096``)
reaches verl, which never reads it. A key that is not in the composed YAML must be one of:

- a field of the dataclass verl converts that node into: the node's ``_target_`` in verl's own YAML (e.g.
  ``actor_rollout_ref.rollout`` -> ``verl.workers.config.RolloutConfig``, which has ``enable_sleep_mode`` while
  ``rollout.yaml`` does not list it, verl PR #7430);
- a key inside a free-form dict: a node that is an empty mapping in verl's YAML (``override_config``,
  ``engine_kwargs.vllm``, ``apply_chat_template_kwargs``, ...) or a dataclass field typed as a dict;
- on a section verl reads as a plain mapping (``data``, ``trainer``, ``reward_model``, ...): a name the installed
  verl reads with ``.get("name")`` / ``getattr(..., "name")`` somewhere in its source (``reward_model.reward_kwargs``
  is read so by ``migrate_legacy_reward_impl``).

Suggestions come only from the same node (its YAML keys and its dataclass's fields) within a small edit distance of
the misspelt segment (optimal string alignment: a swap of two letters counts 1); two equally near candidates are both
shown; none when nothing is near. The dataclass is looked up only from verl's own YAML (the defaults before the
overrides), never from a ``_target_`` an override sets.
"""

from __future__ import annotations

import dataclasses
import os
import re
import typing
from typing import Any

_READS: dict[str, bool] = {}


def verl_reads(name: str) -> bool:
    """Does the installed verl read ``name`` from a mapping somewhere in its source: ``.get("name"...)`` or
    ``getattr(obj, "name"...)``? The files are read until the first match (a name verl reads is usually found in
    the first few; a misspelt one reads them all, about 0.2 s); cached per name for this process."""
    if name not in _READS:
        from .launch import verl_package_dir

        pattern = re.compile(r"""(?:\.get\(|getattr\(\s*[\w.\[\]"']+\s*,)\s*["']""" + re.escape(name) + r"""["']""")
        found = False
        for root, _dirs, files in os.walk(verl_package_dir()):
            for fn in files:
                if not fn.endswith(".py"):
                    continue
                try:
                    with open(os.path.join(root, fn), encoding="utf-8") as fh:
                        text = fh.read()
                except (OSError, UnicodeDecodeError):
                    continue
                if name in text and pattern.search(text):
                    found = True
                    break
            if found:
                break
        _READS[name] = found
    return _READS[name]


def osa_distance(a: str, b: str) -> int:
    """Edit distance with adjacent transpositions (optimal string alignment)."""
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        prev2, prev = prev, cur
    return prev[-1]


def _max_distance(name: str) -> int:
    return 1 if len(name) <= 5 else 2 if len(name) <= 12 else 3


def _dataclass_of(node: Any) -> type | None:
    """The dataclass verl's YAML names in ``node._target_`` (verl's own modules only), or None."""
    from omegaconf import DictConfig

    if not isinstance(node, DictConfig) or "_target_" not in node:
        return None
    target = node._get_node("_target_")._value()
    if not isinstance(target, str) or not target.startswith("verl."):
        return None
    try:
        from hydra.utils import get_class

        cls = get_class(target)
    except Exception:  # not importable here: no dataclass to check against
        return None
    return cls if isinstance(cls, type) and dataclasses.is_dataclass(cls) else None


def _is_dict_type(tp: Any) -> bool:
    origin = typing.get_origin(tp) or tp
    if origin in (dict, typing.Dict):  # older annotations
        return True
    if origin is typing.Union:
        return any(_is_dict_type(a) for a in typing.get_args(tp) if a is not type(None))
    return isinstance(tp, str) and tp.replace(" ", "").startswith(("dict", "Optional[dict", "dict|"))


def _field_types(cls: type) -> dict[str, Any]:
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # forward references that do not resolve
        hints = {}
    return {f.name: hints.get(f.name, f.type) for f in dataclasses.fields(cls)}


@dataclasses.dataclass
class KeyVerdict:
    """Where an override key lands. ``known``: it is consumed (in the YAML, a dataclass field, inside a free-form dict,
    or read by verl); ``parent``: the deepest existing node's dotted key; ``segment``: the first missing segment;
    ``dataclass``: the class name of ``parent``'s node (None for a plain mapping); ``field``: ``segment`` is a field of
    that dataclass (the key needs ``+``); ``suggestions``: nearest real keys (full dotted keys)."""

    known: bool
    parent: str
    segment: str | None
    dataclass: str | None = None
    field: bool = False
    suggestions: tuple[str, ...] = ()
    how: str = ""


def classify(base: Any, key: str) -> KeyVerdict:
    """Classify ``key`` against the composed defaults ``base`` (see the module docstring)."""
    from omegaconf import DictConfig

    parts = key.split(".")
    node, found = base, []
    for part in parts:
        if isinstance(node, DictConfig) and part in node:
            node = node._get_node(part)
            found.append(part)
            continue
        break
    parent = ".".join(found)
    if len(found) == len(parts):
        return KeyVerdict(True, parent, None, how="in the YAML")
    segment = parts[len(found)]
    if not isinstance(node, DictConfig):
        return KeyVerdict(False, parent, segment, how="below a value that is not a mapping")
    # free-form: an empty mapping in verl's YAML, or any mapping below one (walk up)
    walk, chain = base, [base]
    for part in found:
        walk = walk._get_node(part)
        chain.append(walk)
    for i, n in enumerate(chain[1:], start=1):
        if isinstance(n, DictConfig) and len(n) == 0:
            return KeyVerdict(True, parent, segment, how=f"inside the free-form mapping {'.'.join(found[:i])}")
        owner = chain[i - 1]
        cls = _dataclass_of(owner)
        if cls is not None and _is_dict_type(_field_types(cls).get(found[i - 1])):
            return KeyVerdict(
                True, parent, segment, how=f"inside {'.'.join(found[:i])}, a dict field of {cls.__name__}"
            )
    cls = _dataclass_of(node)
    candidates = [str(k) for k in node.keys() if str(k) != "_target_"]
    if cls is not None:
        fields = _field_types(cls)
        if segment in fields:
            return KeyVerdict(True, parent, segment, cls.__name__, field=True, how=f"a field of verl's {cls.__name__}")
        candidates += [f for f in fields if not f.startswith("_")]
        known = False
    else:
        known = verl_reads(segment)
    if known:
        return KeyVerdict(True, parent, segment, how="a name the installed verl reads from this mapping")
    return KeyVerdict(
        False,
        parent,
        segment,
        cls.__name__ if cls else None,
        suggestions=tuple(_nearest(segment, candidates, parent, parts[len(found) + 1 :])),
        how="unknown",
    )


def _nearest(segment: str, candidates: list[str], parent: str, rest: list[str]) -> list[str]:
    limit = _max_distance(segment)
    scored = sorted({(osa_distance(segment.lower(), c.lower()), c) for c in set(candidates)})
    scored = [(d, c) for d, c in scored if d <= limit]
    if not scored:
        return []
    best = scored[0][0]
    tail = "." + ".".join(rest) if rest else ""
    return [(f"{parent}.{c}" if parent else c) + tail for d, c in scored if d == best][:2]
