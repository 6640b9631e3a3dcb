"""``VLGRPO_OVERRIDES_FILE``: verl keys a user sets beyond the ``VLGRPO_*`` settings, allowlisted and typed.

The file is a YAML mapping of dotted verl keys to plain scalar values (read with PyYAML's safe loader; no anchors,
aliases, tags, nested mappings or lists; at most :data:`MAX_BYTES` bytes and :data:`MAX_KEYS` keys)::

    algorithm.kl_ctrl.kl_coef: 0.001
    actor_rollout_ref.actor.optim.lr_warmup_steps_ratio: 0.05
    trainer.total_epochs: 3
    +actor_rollout_ref.rollout.some_dataclass_field: 1   # '+': a field verl's dataclass has and its YAML lacks

Each key is checked against the installed verl's composed config of the recipe (the preflight's
:func:`vlgrpo.preflight.schema.compose_config` with the recipe's config-group overrides) and refused (exit 2, one
line per problem naming the file, the key, what is wrong and the fix) when it is:

- set by a ``VLGRPO_*`` setting (the registry's Hydra-keys column, python/src/vlgrpo/environment.tsv): the setting
  is named;
- fixed or derived by the entrypoint: a key the recipe's ``--help`` lists as fixed for every launch, a key the recipe
  computes (a lower-case ``{placeholder}`` of its template), or a layout/device key (:data:`LAYOUT_LEAVES`,
  ``ray_kwargs``) the entrypoint plans from the node and the cluster;
- a key whose value reaches code loading or trust, as found by the sweep of the installed verl's source
  (:mod:`vlgrpo.preflight.code_sinks`), any ``_target_``, and the preflight's own code-loading keys
  (:data:`vlgrpo.preflight.rules.CODE_LOADING_KEYS`);
- not in verl's config (with "did you mean", :func:`vlgrpo.preflight.plus_keys.classify`), or a ``+`` key verl
  never reads, or ``+`` on a key the YAML has;
- given a value of the wrong type: the field's annotation in verl's dataclass (the node's ``_target_``), else the
  kind of verl's default; a mapping or list is not replaced by a scalar; the value must merge into the composed
  config in struct mode (OmegaConf);
- a string with ``${`` (an interpolation or resolver, :func:`vlgrpo.preflight.rules.interpolations`), a quote, a
  backslash or a control character.

Accepted overrides are written as Hydra overrides (``key=value``, strings quoted) that Hydra's own parser reads back
to the same value. The entrypoint puts each in place of the template's element of the same key (or appends it),
shows it in the dry-run plan, and the whole argv goes through the preflight.

CLI (the entrypoints): ``python3 -m vlgrpo.preflight.overrides --owner fa|vo --module M --prog NAME --file PATH
[--fixed TEXT] -- TEMPLATE_ELEMENT...``: the accepted overrides on stdout, NUL-terminated; exit 0, 2 (problems, on
stderr), 1 (the check itself failed).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import typing
from typing import Any

SETTING = "VLGRPO_OVERRIDES_FILE"
MAX_BYTES = 65536
MAX_KEYS = 256
MAX_VALUE_LEN = 4096
#: key leaves the entrypoint plans from the node and the cluster (layout, devices); any key with one is refused
LAYOUT_LEAVES = re.compile(r"nnodes|n_gpus_per_node|nproc_per_node|world_size|device|fsdp_size|[a-z_]*parallel_size")
#: subtrees the entrypoint owns as a whole (Ray's start-up: the address comes from VLGRPO_RAY_ADDRESS)
OWNED_TREES = ("ray_kwargs", "hydra")
_KEY = re.compile(r"(\+)?([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)")
_BAD_TEXT = re.compile(r"[\x00-\x1f\x7f'\"\\]")
#: the only text values an override may have: a plain word (verl's enum-like options, names of runs and projects).
#: Paths, URLs, module names with '/' or ':', commands and anything non-ASCII go through the VLGRPO_* settings that
#: check them (a tokenizer_path of 'hdfs://x;cmd' reaches os.system in verl's hdfs_io; a plain 'org/repo' a Hub
#: download)
_PLAIN_WORD = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
#: key leaves whose value names a file, a folder, a URL or a model to load: a path is a setting's, checked by the
#: one path rule (rollout_data_dir, validation_data_dir, save_path, tokenizer_path, hf_config_path, model.path, ...)
_PATH_LEAF = re.compile(r"(.*_)?(path|paths|dir|dirs|file|files|url|uri|root|folder|repo|repo_id|model_id)")
#: subtrees handed to another program's own argument parser without verl's config types: vLLM and SGLang read
#: unique prefixes of their options (trust-remote-cod is --trust-remote-code) and import classes they name
#: (worker_extension_cls, logits_processors); they are the recipe's, through its settings
_ENGINE_TREES = ("engine_kwargs",)


#: keys (a trailing run of dotted parts) whose value makes verl trust, or delete, what another user can reach
#: (verl 0.8.0, read for this list; an attack review planted the first): the sweep of code_sinks does not see them
UNSAFE_KEYS = {
    "use_shm": "verl copies the model to /dev/shm/verl-cache/<md5 of the path>/ and reuses a copy found there by file "
    "names and sizes alone (utils/fs.py copy_to_local): /dev/shm is shared by every user of the host "
    "(compose's ipc: host), so another user's planted copy is loaded",
    "del_local_ckpt_after_load": "verl deletes the checkpoint folder a resume loaded (trainer/ppo/ray_trainer.py "
    "_load_checkpoint): a failed run after it cannot resume from that step",
    "reward_manager.source": "the reward manager's source 'importlib' imports the module the config names "
    "(workers/config/reward.py)",
}


#: keys of the model's Hugging Face config that decide what is built or imported; refused under override_config
MODEL_IDENTITY_KEYS = frozenset(
    (
        "auto_map",
        "model_type",
        "architectures",
        "quantization_config",
        "_name_or_path",
        "name_or_path",
        "trust_remote_code",
        "torch_dtype",
        "dtype",
    )
)


class OverridesError(Exception):
    """The file cannot be read as an overrides file at all (message names the file and the fix)."""


@dataclasses.dataclass
class Entry:
    """One line of the file: the key as written (``+`` included), its value, the 1-based line."""

    key: str
    value: Any
    line: int

    @property
    def plus(self) -> bool:
        return self.key.startswith("+")

    @property
    def name(self) -> str:
        return self.key.lstrip("+")


@dataclasses.dataclass
class Problem:
    """A refused entry: ``key`` (as written), what is wrong, the fix."""

    key: str
    line: int
    what: str
    fix: str

    def text(self, path: str) -> str:
        return f"{SETTING} ({path}, line {self.line}): {self.key}: {self.what}; fix: {self.fix}"


# ---- reading ---------------------------------------------------------------------------------------------------
def read_file(path: str) -> list[Entry]:
    """The entries of the overrides file at ``path``, in file order.

    Raises:
        OverridesError: unreadable, over :data:`MAX_BYTES`, not UTF-8, not YAML, not one mapping of plain scalar
            keys to plain scalar values, a duplicate key, an anchor, alias or tag, more than :data:`MAX_KEYS` keys;
            a second YAML document (``---``), content after a document end marker (``...``), or an explicitly
            empty document (the line of each is named: ``yaml.safe_load`` takes one document and
            ``yaml.safe_load_all`` every one, so two readers would differ on such a file).
    """
    import yaml

    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise OverridesError(f"cannot be read ({exc.strerror}); point {SETTING} at a readable file") from exc
    if len(data) > MAX_BYTES:
        raise OverridesError(f"is larger than {MAX_BYTES} bytes; keep only the keys you change")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise OverridesError(f"is not UTF-8 text (byte {exc.start}); save it as UTF-8") from exc
    documents = started_at = 0
    ended_at = 0  # the line of an explicit document end marker ('...'), once one was read
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.DocumentStartEvent):
                documents += 1
                if documents == 1:
                    started_at = event.start_mark.line + 1
                else:
                    raise OverridesError(
                        f"line {event.start_mark.line + 1}: a second YAML document starts here; readers differ on "
                        "a file of several documents (yaml.safe_load refuses it, yaml.safe_load_all reads each): "
                        "keep one mapping of 'dotted.verl.key: value' lines, without '---' between them"
                    )
            elif isinstance(event, yaml.DocumentEndEvent) and event.explicit:
                ended_at = event.start_mark.line + 1
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise OverridesError(
                    f"line {event.start_mark.line + 1}: YAML anchors and aliases are not accepted; "
                    "write every value out"
                )
            tag = getattr(event, "tag", None)
            explicit = isinstance(event, yaml.ScalarEvent) or not getattr(event, "implicit", True)
            if tag is not None and explicit:
                raise OverridesError(
                    f"line {event.start_mark.line + 1}: YAML tags ({tag}) are not accepted; write plain values"
                )
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        # the problem and where, never PyYAML's snippet of the text (the file may be a secret that was pointed at)
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        what = getattr(exc, "problem", None) or type(exc).__name__
        if ended_at and mark is not None and str(what).startswith("expected '<document start>'"):
            raise OverridesError(
                f"line {mark.line + 1}: more content after the document end marker '...' of line {ended_at}, "
                "which a single-document reader drops or refuses: remove the '...' line (the file is one mapping)"
            ) from exc
        raise OverridesError(f"is not valid YAML ({what}{where}); write one 'key: value' per line") from exc
    if root is None:
        return []
    if isinstance(root, yaml.ScalarNode) and root.tag == "tag:yaml.org,2002:null" and root.value == "":
        raise OverridesError(
            f"line {started_at}: an empty YAML document (a '---' or '...' marker and no keys); "
            "write the 'dotted.verl.key: value' lines, or unset VLGRPO_OVERRIDES_FILE"
        )
    if not isinstance(root, yaml.MappingNode):
        raise OverridesError("is not a YAML mapping; write one 'dotted.verl.key: value' per line")
    if len(root.value) > MAX_KEYS:
        raise OverridesError(f"has {len(root.value)} keys (at most {MAX_KEYS})")
    constructor = yaml.SafeLoader("")
    entries: list[Entry] = []
    seen: dict[str, int] = {}
    for knode, vnode in root.value:
        line = knode.start_mark.line + 1
        if not isinstance(knode, yaml.ScalarNode) or knode.tag != "tag:yaml.org,2002:str":
            raise OverridesError(f"line {line}: a key must be a dotted verl key (text), e.g. trainer.total_epochs")
        key = knode.value
        if not isinstance(vnode, yaml.ScalarNode):
            raise OverridesError(
                f"line {line}: {key}: the value is a mapping or a list; give one plain value per "
                "key (set nested keys one by one, as dotted keys)"
            )
        if key.lstrip("+") in seen:
            raise OverridesError(f"line {line}: {key} is given twice (first on line {seen[key.lstrip('+')]}); keep one")
        seen[key.lstrip("+")] = line
        entries.append(Entry(key, constructor.construct_object(vnode, deep=True), line))
    return entries


# ---- what the recipe owns ----------------------------------------------------------------------------------------
def _template_key(element: str) -> str:
    key = element.split("=", 1)[0]
    return key.lstrip("+~")


def owned_keys(owner: str) -> dict[str, str]:
    """Hydra key -> the ``VLGRPO_*`` setting of entrypoint ``owner`` that sets it (environment.tsv)."""
    from vlgrpo import environment

    out: dict[str, str] = {}
    for row in environment.settings(owner):
        for key in filter(None, row.hydra.split(";")):
            out[key.lstrip("+")] = row.name
    return out


def recipe_keys(template: list[str], fixed_note: str) -> tuple[dict[str, str], set[str]]:
    """From the recipe's template elements and its fixed-keys note (``VG_FIXED_NOTE``): (key -> why the
    entrypoint fixes or derives it) and the set of every template key."""
    keys = {_template_key(e) for e in template if "=" in e}
    fixed: dict[str, str] = {}
    noted = re.findall(r"`([^`=]+)=", fixed_note or "")
    for element in template:
        if "=" not in element:
            continue
        key = _template_key(element)
        value = element.split("=", 1)[1]
        if re.search(r"\{[a-z][a-z0-9_]*\}", value):
            fixed[key] = "derived by the entrypoint from other settings"
        elif not re.search(r"\{[A-Z][A-Z0-9_]*\}", value) and any(key == n or key.endswith("." + n) for n in noted):
            fixed[key] = f"fixed for every launch of this recipe ({element}; its --help lists the fixed keys)"
    return fixed, keys


def _compose_base(module: str, template: list[str]) -> Any:
    """The composed defaults of the recipe (its config-group overrides applied), with verl's ``_target_``s."""
    from .launch import parse_launch
    from .report import Report
    from .schema import compose_config

    groups = [e for e in template if "=" in e and "." not in e.split("=", 1)[0] and "{" not in e]
    report = Report()
    result = compose_config(parse_launch(["python3", "-m", module] + groups), report)
    if result.base is None:
        raise OverridesError(
            "verl's config for this recipe could not be composed: " + "; ".join(f.what for f in report.findings)
        )
    return result.base


# ---- types -----------------------------------------------------------------------------------------------------
_MISSING = object()


def _node(cfg: Any, key: str) -> Any:
    from omegaconf import DictConfig

    node = cfg
    for part in key.split("."):
        if not isinstance(node, DictConfig) or part not in node:
            return _MISSING
        node = node._get_node(part)
    return node


def _annotation(base: Any, key: str) -> Any:
    """The type verl's dataclass declares for ``key`` (the parent node's ``_target_``), or _MISSING."""
    from .plus_keys import _dataclass_of, _field_types

    parent, _, leaf = key.rpartition(".")
    node = _node(base, parent) if parent else base
    if node is _MISSING:
        return _MISSING
    cls = _dataclass_of(node)
    if cls is None:
        return _MISSING
    return _field_types(cls).get(leaf, _MISSING)


def _allowed(tp: Any) -> tuple[tuple[type, ...], bool] | None:
    """(python types a scalar may have, None allowed) for an annotation; None when it is not a scalar type."""
    origin = typing.get_origin(tp)
    if origin is typing.Union or (origin is not None and str(origin) == "<class 'types.UnionType'>"):
        args = typing.get_args(tp)
        nullable = type(None) in args
        types: tuple[type, ...] = ()
        for a in args:
            if a is type(None):
                continue
            got = _allowed(a)
            if got is None:
                return None
            types += got[0]
        return types, nullable
    if origin is typing.Literal:
        return tuple({type(a) for a in typing.get_args(tp)}), None in typing.get_args(tp)
    if tp is typing.Any:
        return (bool, int, float, str), True
    if tp is bool:
        return (bool,), False
    if tp is int:
        return (int,), False
    if tp is float:
        return (int, float), False
    if tp is str:
        return (str,), False
    if isinstance(tp, type) and issubclass(tp, str):  # str enums
        return (str,), False
    return None


def _type_name(types: tuple[type, ...], nullable: bool) -> str:
    if float in types:
        types = tuple(t for t in types if t is not int)
    names = sorted(
        {
            "a number" if t is float else {bool: "true/false", int: "a whole number", str: "text"}[t]
            for t in types
            if t in (bool, int, float, str)
        }
    )
    return " or ".join(names) + (" (or null)" if nullable else "")


def _type_problem(base: Any, entry: Entry, default: Any) -> str | None:
    """Why ``entry.value`` does not fit the key's type, or None."""
    from omegaconf import DictConfig, ListConfig

    value = entry.value
    if isinstance(default, DictConfig):
        return "is a mapping in verl's config; a scalar cannot replace it (set the keys below it one by one)"
    if isinstance(default, ListConfig):
        return "is a list in verl's config; the overrides file takes plain values only"
    tp = _annotation(base, entry.name)
    if tp is not _MISSING:
        allowed = _allowed(tp)
        if allowed is None:
            return f"verl's dataclass types it {tp}, which is not a plain value"
        types, nullable = allowed
        source = "verl's dataclass field"
    else:
        raw = default._value() if default is not _MISSING and hasattr(default, "_value") else None
        if raw is None or (isinstance(raw, str) and "${" in raw):
            return None  # no type to hold it to: the preflight composes and checks it
        types = (
            (bool,)
            if isinstance(raw, bool)
            else (int,)
            if isinstance(raw, int)
            else (int, float)
            if isinstance(raw, float)
            else (str,)
        )
        nullable = False
        source = f"verl's default ({raw!r})"
    if value is None:
        return None if nullable else f"is null; {source} needs {_type_name(types, False)}"
    ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
    if not ok:
        return f"is {value!r} ({type(value).__name__}); {source} needs {_type_name(types, nullable)}"
    return None


def hydra_text(entry: Entry) -> str:
    """``key=value`` in Hydra's override grammar (``+`` kept; strings single-quoted; floats in repr form)."""
    v = entry.value
    if v is None:
        text = "null"
    elif isinstance(v, bool):
        text = "true" if v else "false"
    elif isinstance(v, (int, float)):
        text = repr(v)
    else:
        text = f"'{v}'"
    return f"{entry.key}={text}"


# ---- the check -------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Result:
    """``accepted``: Hydra override texts in file order; ``problems``: refused entries."""

    accepted: list[str]
    problems: list[Problem]


def check(
    entries: list[Entry], *, owner: str, module: str, template: list[str], fixed_note: str = "", base: Any = None
) -> Result:
    """Check ``entries`` for recipe ``owner`` (``fa``/``vo``) whose verl module is ``module`` and whose argv template
    (the recipe's ``VG_TEMPLATE`` elements) is ``template``. ``base``: the composed defaults (composed when None)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf, open_dict

    from . import code_sinks
    from .plus_keys import classify
    from .rules import CODE_LOADING_KEYS, interpolations
    from .schema import copy_config, verl_version

    if base is None:
        base = _compose_base(module, template)
    owned = owned_keys(owner)
    fixed, _ = recipe_keys(template, fixed_note)
    sweep = code_sinks.sweep()
    code = code_sinks.keys_in_config(sweep.hits, base, sweep.copies)
    trust_leaves = {h.segs[-1] for h in sweep.hits if h.sink == "trust_remote_code=" and h.segs}
    version = verl_version()
    parser = OverridesParser.create()
    accepted: list[str] = []
    problems: list[Problem] = []

    for e in entries:

        def bad(what: str, fix: str) -> None:
            problems.append(Problem(e.key, e.line, what, fix))  # noqa: B023 - used at once

        m = _KEY.fullmatch(e.key)
        if not m:
            bad(
                "is not a dotted verl key (letters, digits and '_' between dots, an optional leading '+')",
                "write the key as verl's config names it, e.g. trainer.total_epochs",
            )
            continue
        key = e.name
        parts = key.split(".")
        if len(parts) == 1:
            bad(
                "is a top-level key of verl's config: it selects a config group (model_engine picks which files "
                "Hydra composes) or replaces a whole section",
                "set the keys inside it one by one, e.g. trainer.total_epochs",
            )
            continue
        if isinstance(e.value, str):
            if len(e.value) > MAX_VALUE_LEN:
                bad(f"the value is longer than {MAX_VALUE_LEN} characters", "shorten it")
                continue
            found = interpolations(e.value) or ([("interpolation", "${")] if "${" in e.value else [])
            if found:
                kinds = ", ".join(sorted({f"{k} {n}" for k, n in found}))
                bad(
                    f"the value is computed at run time ({kinds}): no interpolation or resolver is accepted",
                    "write the value itself",
                )
                continue
            if _BAD_TEXT.search(e.value):
                bad("the value has a quote, a backslash or a control character", "write it without them")
                continue
        if (
            isinstance(e.value, float)
            and e.value != e.value
            or isinstance(e.value, float)
            and e.value in (float("inf"), float("-inf"))
        ):
            bad("the value is not a finite number", "write a finite number")
            continue
        hit = code.get(key) or next((code[k] for k in code if key.startswith(k + ".")), None)
        if hit is not None or parts[-1] == "_target_" or parts[-1] in trust_leaves or key in CODE_LOADING_KEYS:
            where = (
                f"verl {version} passes it to {hit.sink} (verl/{hit.file}:{hit.line}"
                + (f", from verl/{hit.via[-1]}" if hit.via else "")
                + ")"
                if hit is not None
                else "Hydra instantiates what a _target_ names"
                if parts[-1] == "_target_"
                else "verl passes it as trust_remote_code"
                if parts[-1] in trust_leaves
                else "the preflight's code-loading keys"
            )
            bad(
                f"its value reaches code loading or trust: {where}",
                "remove it; a vlgrpo launch runs no user code (docs/recipes.md, overrides)",
            )
            continue
        if key in owned:
            layout = (
                " (a layout key: the entrypoint plans and checks the layout from it)"
                if LAYOUT_LEAVES.fullmatch(parts[-1])
                else ""
            )
            bad(f"is set by {owned[key]}{layout}", f"set {owned[key]} instead and remove the key from the file")
            continue
        if parts[0] in OWNED_TREES:
            bad(
                f"{parts[0]}.* is the entrypoint's ({'Ray start-up' if parts[0] == 'ray_kwargs' else 'Hydra itself'})",
                "remove it (VLGRPO_RAY_ADDRESS names the cluster)" if parts[0] == "ray_kwargs" else "remove it",
            )
            continue
        if key in fixed:
            bad(f"is {fixed[key]}", "remove it from the file")
            continue
        if LAYOUT_LEAVES.fullmatch(parts[-1]):
            bad(
                "is a layout/device key: the entrypoint plans nodes, devices and parallel sizes from the VLGRPO_* "
                "layout settings and the node, and checks them together",
                "use the recipe's layout settings (--help lists them), or remove it",
            )
            continue
        engine = next((p for p in parts if p in _ENGINE_TREES), None)
        if engine is not None:
            bad(
                f"{engine}.* goes to the inference engine's own argument parser, not through verl's typed config "
                "(vLLM takes unique prefixes of its options, e.g. trust-remote-cod for --trust-remote-code, and "
                "imports the classes some of them name)",
                "remove it; the engine options the recipe supports are VLGRPO_* settings (--help)",
            )
            continue
        if "override_config" in parts:
            below = parts[parts.index("override_config") + 1 :]
            what = next((p for p in below if p in MODEL_IDENTITY_KEYS or p.endswith("_implementation")), None)
            if what is not None:
                bad(
                    f"sets {what} of the model's Hugging Face config: verl 0.8.0 setattr()s override_config onto the "
                    "config it loaded (utils/model.py update_model_config), so the model built and saved would not "
                    "be the one the preflight checked (a class to import, another architecture or quantization)",
                    "remove it; the model's identity comes from the folder VLGRPO_MODEL_PATH names",
                )
                continue
        unsafe = next((why for k, why in UNSAFE_KEYS.items() if key == k or key.endswith("." + k)), None)
        if unsafe is not None:
            bad(f"its value changes what the job trusts or keeps: {unsafe}", "remove it")
            continue
        if _PATH_LEAF.fullmatch(parts[-1]):
            bad(
                "names a file, folder, URL or model to load: paths are set through the VLGRPO_* settings, which "
                "check them by the one path rule (VLGRPO_MODEL_PATH, VLGRPO_CHECKPOINT_DIR, ...)",
                "use the setting that owns it, or remove it",
            )
            continue
        if isinstance(e.value, str) and not _PLAIN_WORD.fullmatch(e.value):
            bad(
                "the text value is not a plain word (ASCII letters, digits, '_', '.', '-'; at most 128): paths, "
                "URLs and commands are not override values",
                "write a number, true/false or a plain word; paths go through the VLGRPO_* settings that check them",
            )
            continue
        node = _node(base, key)
        if e.plus:
            if node is not _MISSING:
                bad("has '+' but verl's config already has this key (Hydra refuses '+' on it)", f"drop the '+': {key}")
                continue
            verdict = classify(base, key)
            if not verdict.known:
                hints = list(verdict.suggestions)
                bad(
                    "is not a key verl reads" + (f" (did you mean {' or '.join(hints)}?)" if hints else ""),
                    f"use {hints[0]}" if hints else "remove it",
                )
                continue
        elif node is _MISSING:
            verdict = classify(base, key)
            if verdict.field:
                bad(f"is a field of verl's {verdict.dataclass} that its YAML lacks", f"write it with a '+': +{key}")
            elif verdict.known:
                bad(f"is a new key ({verdict.how}), which Hydra adds only with a '+'", f"write it with a '+': +{key}")
            else:
                hints = list(verdict.suggestions)
                bad(
                    f"is not in verl {version}'s config for this recipe"
                    + (f" (did you mean {' or '.join(hints)}?)" if hints else ""),
                    f"use {hints[0]}"
                    if hints
                    else "check the key against the recipe's config (python -m vlgrpo "
                    "preflight --argv-file shows the composed keys' findings)",
                )
            continue
        why = _type_problem(base, e, node)
        if why:
            fix = "write a value of that type (YAML: 3, 0.5, true, text)"
            if isinstance(e.value, str) and re.fullmatch(r"[+-]?\d+[eE][+-]?\d+", e.value):
                fix = f"write {e.value.replace('e', '.0e', 1).replace('E', '.0E', 1)} (YAML reads {e.value} as text)"
            bad(why, fix)
            continue
        text = hydra_text(e)
        try:
            parsed = parser.parse_override(text)
            same = parsed.value() == e.value and type(parsed.value()) is type(e.value)
        except Exception as exc:  # Hydra's OverrideParseException
            same, parsed = False, exc
        if not same:
            bad(f"Hydra's grammar does not read {text!r} back as the value ({parsed})", "write a plainer value")
            continue
        trial = copy_config(base)
        OmegaConf.set_struct(trial, True)
        try:
            if e.plus:
                with open_dict(trial):
                    OmegaConf.update(trial, key, e.value, merge=True, force_add=True)
            else:
                OmegaConf.update(trial, key, e.value, merge=True)
        except Exception as exc:  # OmegaConf's ValidationError / ConfigKeyError
            bad(
                f"verl's config does not take it ({' '.join(str(exc).split()).split(' full_key:')[0]})",
                "write a value of the key's type",
            )
            continue
        accepted.append(text)
    return Result(accepted, problems)


#: the last NUL-terminated element of an accepting verdict on stdout, with the number of overrides before it
END_MARK = "vlgrpo-overrides-accepted"


def main(argv: list[str] | None = None) -> int:
    """The entrypoints' call (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="python3 -m vlgrpo.preflight.overrides")
    ap.add_argument("--owner", required=True, choices=("fa", "vo"))
    ap.add_argument("--module", required=True)
    ap.add_argument("--prog", default="vlgrpo")
    ap.add_argument("--file", required=True)
    ap.add_argument("--fixed", default="")
    ap.add_argument("template", nargs="*")
    args = ap.parse_args(argv)
    out = sys.stdout
    try:
        from vlgrpo.pathrule import check_path

        problem = check_path(args.file, kind="file")
        if problem is not None:
            print(f"{args.prog}: error: {SETTING}: {problem.text()}; fix: {problem.fix}", file=sys.stderr)
            return 2
        entries = read_file(args.file)
        result = check(entries, owner=args.owner, module=args.module, template=args.template, fixed_note=args.fixed)
    except OverridesError as exc:
        print(f"{args.prog}: error: {SETTING} ({args.file}) {exc}", file=sys.stderr)
        return 2
    for p in result.problems:
        print(f"{args.prog}: error: {p.text(args.file)}", file=sys.stderr)
    if result.problems:
        print(f"{args.prog}: {len(result.problems)} problem(s) in {SETTING}; nothing was started", file=sys.stderr)
        return 2
    for text in result.accepted:
        out.write(text + "\0")
    # the verdict's last element: the launch takes the overrides only behind it (a checker that stopped early, or a
    # stand-in that printed nothing, is no "accepted, none")
    out.write(f"{END_MARK} {len(result.accepted)}\0")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
