"""Check the overrides against the installed verl's Hydra config, and compose it.

Source of truth: the YAML files inside the installed ``verl`` package (never a copy), composed with
Hydra's public compose API (``hydra.initialize_config_dir`` + ``hydra.compose``) with the exact overrides.
Because Hydra stops at the first bad override, each config override is also applied one by one to the
composed defaults with Hydra's own override code (``ConfigLoaderImpl._apply_overrides_to_config`` of
hydra-core 1.3.2, the function ``compose`` runs), so every bad override is reported with Hydra's message.

Checks: override syntax, unknown keys, ``+``/``++``/missing ``+`` as this schema requires, duplicates
after stripping ``+``/``++`` (same value too), and values of the wrong kind (a list, dict, bool or number
given as a quoted string).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from .launch import LaunchSpec
from .report import ERROR, Finding, Report, Where


@dataclasses.dataclass
class ParsedOverride:
    """An override with Hydra's parse result. ``parsed`` is a hydra Override."""

    position: int
    text: str
    parsed: Any
    key: str
    is_group: bool = False


@dataclasses.dataclass
class ComposeResult:
    """config: the composed DictConfig (None when the schema check failed); base: defaults before config
    overrides; overrides: the parsed overrides; groups: config group names of the primary config."""

    config: Any
    base: Any
    overrides: list[ParsedOverride]
    groups: set[str]


def verl_version() -> str:
    """Version of the installed verl distribution (``importlib.metadata``; no import), ``"unknown"`` if absent."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("verl")
    except PackageNotFoundError:  # pragma: no cover - verl is always installed where this runs
        return "unknown"


def _plain(value: Any) -> Any:
    from omegaconf import OmegaConf

    if OmegaConf.is_config(value):
        return OmegaConf.to_container(value, resolve=False)
    return value


def _deepest_existing(cfg: Any, key: str) -> tuple[str, Any]:
    from omegaconf import DictConfig

    parts = key.split(".")
    node, found = cfg, []
    for part in parts[:-1]:
        if isinstance(node, DictConfig) and part in node:
            node = node[part]
            found.append(part)
        else:
            break
    return ".".join(found), node


def _list_fix(key: str, text: str) -> str:
    """Suggest the Hydra list form for a list given as a string, e.g. ``k=[console,wandb]``."""
    try:
        items = json.loads(text)
    except ValueError:
        try:
            import yaml

            items = yaml.safe_load(text)
        except Exception:  # only a suggestion
            items = None
    if isinstance(items, list):
        return f"{key}=[{','.join(str(i) for i in items)}]"
    return f"{key}=[a,b] (Hydra list syntax, no quotes around the brackets)"


def parse_overrides(spec: LaunchSpec, report: Report) -> list[ParsedOverride]:
    """Parse each override with Hydra's own grammar; report syntax errors and duplicate keys."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    parsed: list[ParsedOverride] = []
    for ov in spec.overrides:
        try:
            p = parser.parse_override(ov.text)
        except Exception as exc:  # hydra raises OverrideParseException / HydraException
            report.add(
                Finding(
                    "schema.syntax",
                    ERROR,
                    f"Hydra cannot parse this override: {str(exc).splitlines()[0]}",
                    Where(position=ov.position, override=ov.text),
                    "Hydra rejects the whole command line at start-up (quoted key segments such as rollout.'n' "
                    "are a lexer error in hydra-core)",
                    "write it as key=value with a plain dotted key",
                )
            )
            continue
        key = p.key_or_group if p.package is None else f"{p.key_or_group}@{p.package}"
        parsed.append(ParsedOverride(ov.position, ov.text, p, key))
    first: dict[str, ParsedOverride] = {}
    for po in parsed:
        if po.key in first:
            prev = first[po.key]
            same = (
                _plain(prev.parsed.value()) == _plain(po.parsed.value())
                if not (prev.parsed.is_delete() or po.parsed.is_delete())
                else False
            )
            report.add(
                Finding(
                    "schema.duplicate-key",
                    ERROR,
                    f"key {po.key!r} is given twice: argv[{prev.position}] {prev.text!r} and argv[{po.position}] "
                    f"{po.text!r}" + (" (same value)" if same else " (different values; Hydra keeps the last)"),
                    Where(position=po.position, override=po.text, key=po.key),
                    "Hydra applies overrides in order and the last one wins without a warning "
                    "(hydra-ecosystem/hydra #3283, verl #6094)",
                    f"keep exactly one override of {po.key} (remove argv[{prev.position}] or argv[{po.position}])",
                )
            )
        else:
            first[po.key] = po
    return parsed


def compose_config(spec: LaunchSpec, report: Report) -> ComposeResult:
    """Compose ``spec`` against the installed verl and report schema findings.

    Returns the composed config (``config`` None if any override was rejected). Imports verl (its
    fully-async config reaches the base through ``pkg://verl.trainer.config``).
    """
    from hydra import compose, initialize_config_dir
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import ConfigCompositionException
    from omegaconf import OmegaConf

    version = verl_version()
    parsed = parse_overrides(spec, report)
    syntax_ok = len(parsed) == len(spec.overrides)

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=spec.config_dir, version_base=None, job_name="vlgrpo_preflight"):
        # Config groups (e.g. model_engine) select files in the defaults list; Hydra applies them before the
        # config overrides. Candidates: dot-free keys with a non-dict value; confirmed against the groups
        # Hydra reports in hydra.runtime.choices of the composed defaults.
        # (a package, as in actor@actor_rollout_ref.actor=dp_actor, may hold dots: test the group part only)
        candidates = [
            po
            for po in parsed
            if "." not in po.parsed.key_or_group
            and not po.parsed.is_delete()
            and not isinstance(po.parsed.value(), dict)
        ]
        try:
            base = compose(spec.config_name, overrides=[po.text for po in candidates], return_hydra_config=True)
        except Exception as exc:
            base = None
            group_error = exc
        if base is not None:
            groups = {str(k).split("@")[0] for k in base.hydra.runtime.choices.keys()}
        else:
            defaults = compose(spec.config_name, overrides=[], return_hydra_config=True)
            groups = {str(k).split("@")[0] for k in defaults.hydra.runtime.choices.keys()}
        for po in candidates:
            po.is_group = po.parsed.key_or_group in groups
        group_ovs = [po for po in parsed if po.is_group]
        if base is None or len(group_ovs) != len(candidates):
            try:
                base = compose(spec.config_name, overrides=[po.text for po in group_ovs], return_hydra_config=True)
            except Exception as exc:
                group_error = exc
                culprits = []
                for po in group_ovs:  # name the override(s) Hydra refuses on their own, not every group override
                    try:
                        compose(spec.config_name, overrides=[po.text], return_hydra_config=True)
                    except Exception as alone:
                        culprits.append((po, alone))
                for po, group_error in culprits or [(po, group_error) for po in group_ovs]:
                    report.add(
                        Finding(
                            "schema.bad-group",
                            ERROR,
                            f"config group override rejected by Hydra: {' '.join(str(group_error).split())}",
                            Where(position=po.position, override=po.text, key=po.key),
                            f"verl {version} has no such option for this group",
                            "use an option the group provides",
                        )
                    )
                return ComposeResult(None, None, parsed, groups)
        from omegaconf import open_dict

        _check_hydra_overrides(spec, base, report, version)
        with open_dict(base):
            del base["hydra"]

        cfg = copy_config(base)
        bad = 0
        for po in parsed:
            if po.is_group:
                continue
            ov = po.parsed
            try:
                old = OmegaConf.select(cfg, ov.key_or_group, default=None, throw_on_missing=False)
            except Exception:  # an unresolvable interpolation in the default
                old = None
            _check_value_kind(po, old, report)  # reported, but Hydra composes it: keep going
            try:
                ConfigLoaderImpl._apply_overrides_to_config([ov], cfg)
            except ConfigCompositionException as exc:
                bad += 1
                report.add(_composition_finding(po, str(exc), base, spec, version))
            except Exception as exc:
                bad += 1
                report.add(
                    Finding(
                        "schema.rejected",
                        ERROR,
                        f"Hydra rejected the override: {exc}",
                        Where(position=po.position, override=po.text, key=po.key),
                        f"verl {version} ({spec.config_name}) cannot take this value",
                        "fix the value",
                    )
                )
        bad += _check_new_keys(parsed, base, report, spec, version)
        if bad or not syntax_ok:
            return ComposeResult(None, base, parsed, groups)
        try:
            final = compose(spec.config_name, overrides=[o.text for o in spec.overrides])
        except Exception as exc:  # should not happen after the per-override pass
            report.add(
                Finding(
                    "schema.compose",
                    ERROR,
                    f"Hydra compose failed: {exc}",
                    Where(),
                    f"verl {version} ({spec.config_name}) does not accept the overrides together",
                    "fix the overrides Hydra names",
                )
            )
            return ComposeResult(None, base, parsed, groups)
    return ComposeResult(final, base, parsed, groups)


def _check_new_keys(parsed: list[ParsedOverride], base: Any, report: Report, spec: LaunchSpec, version: str) -> int:
    """B10: a ``+``/``++`` key that is not in the composed YAML must be consumed by verl (a dataclass field, inside a
    free-form mapping, or a name verl reads: :func:`vlgrpo.preflight.plus_keys.classify`). Returns the number refused."""
    from .plus_keys import classify

    bad = 0
    for po in parsed:
        ov = po.parsed
        if po.is_group or ov.is_delete() or not (ov.is_add() or ov.is_force_add()):
            continue
        verdict = classify(base, ov.key_or_group)
        if verdict.known:
            continue
        bad += 1
        where = Where(position=po.position, override=po.text, key=ov.key_or_group)
        owner = (
            f"{verdict.parent} is verl's {verdict.dataclass}, which has no field {verdict.segment!r}"
            if verdict.dataclass
            else f"{verdict.parent or 'the top level'} is a mapping verl reads by name, and no code of it reads "
            f"{verdict.segment!r}"
        )
        hints = list(verdict.suggestions)
        plain = po.text.lstrip("+")
        report.add(
            Finding(
                "schema.unknown-key",
                ERROR,
                f"'+' adds {ov.key_or_group!r}, which verl {version} never reads: {owner}"
                + (f" (did you mean {' or '.join(hints)}?)" if hints else ""),
                where,
                "Hydra composes any key after '+', so a misspelt one is silently ignored by verl and the setting "
                "it was meant for keeps its default",
                (
                    f"use {_prefix_for(base, hints[0])}{hints[0]}"
                    + ("" if "=" not in plain else "=" + plain.split("=", 1)[1])
                    if hints
                    else "remove it"
                )
                + f" ({spec.config_name} of verl {version})",
            )
        )
    return bad


def _prefix_for(base: Any, key: str) -> str:
    """``""`` for a key the YAML has, ``"+"`` for one it lacks (a dataclass field)."""
    from omegaconf import OmegaConf

    return "" if OmegaConf.select(base, key, default=_MISSING, throw_on_missing=False) is not _MISSING else "+"


def _check_hydra_overrides(spec: LaunchSpec, base: Any, report: Report, version: str) -> None:
    """Apply each ``hydra.*`` override to the composed config with Hydra's own settings (``base`` still holds
    its ``hydra`` node), as Hydra does at start-up: ``hydra.nope=1`` stops the launch there."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for ov in spec.hydra_overrides:
        try:
            parsed = parser.parse_override(ov.text)
        except Exception as exc:
            report.add(
                Finding(
                    "schema.syntax",
                    ERROR,
                    f"Hydra cannot parse this override: {str(exc).splitlines()[0]}",
                    Where(position=ov.position, override=ov.text),
                    "Hydra rejects the command line",
                    "write it as key=value with a plain dotted key",
                )
            )
            continue
        po = ParsedOverride(ov.position, ov.text, parsed, parsed.key_or_group)
        try:
            ConfigLoaderImpl._apply_overrides_to_config([parsed], copy_config(base))
        except Exception as exc:  # ConfigCompositionException and value errors alike
            report.add(_composition_finding(po, str(exc), base, spec, f"{version} (Hydra's own hydra.* settings)"))


def copy_config(cfg: Any) -> Any:
    """Deep copy keeping flags (struct) as Hydra set them."""
    import copy

    return copy.deepcopy(cfg)


_MISSING = object()


def _composition_finding(po: ParsedOverride, message: str, base: Any, spec: LaunchSpec, version: str) -> Finding:
    from omegaconf import DictConfig

    ov = po.parsed
    key = ov.key_or_group
    where = Where(position=po.position, override=po.text, key=key)
    first_line = message.strip().splitlines()[0] if message.strip() else message
    schema = f"verl {version} {spec.config_name}"
    if first_line.startswith("Could not append to config"):
        return Finding(
            "schema.plus-on-existing",
            ERROR,
            f"'+' adds a key, but {key!r} already exists in {schema}",
            where,
            "Hydra refuses '+' on an existing non-null key and stops the launch",
            f"remove the '+': {po.text.lstrip('+')}",
        )
    if first_line.startswith("Could not override") and "/" in key:
        return Finding(
            "schema.bad-group",
            ERROR,
            f"{key!r} is not a config group of the defaults list of {schema}",
            where,
            "Hydra stops the launch",
            "select a group option as group@package=option, e.g. actor@actor_rollout_ref.actor=dp_actor",
        )
    if first_line.startswith("Could not override"):
        from omegaconf import OmegaConf

        if OmegaConf.select(base, key, default=_MISSING) is not _MISSING:
            return Finding(
                "schema.unknown-key",
                ERROR,
                f"{key!r} was deleted by an earlier '~{key}' override",
                where,
                "Hydra applies overrides in order: after the deletion the key no longer exists and the launch stops",
                f"drop the '~{key}' override and keep {po.text}",
            )
        parent_key, parent = _deepest_existing(base, key)
        open_dict_parent = isinstance(parent, DictConfig) and parent_key == key.rsplit(".", 1)[0] and len(parent) == 0
        if open_dict_parent:
            return Finding(
                "schema.missing-plus",
                ERROR,
                f"{key!r} is not in {schema}; its parent {parent_key!r} is an empty dict meant to be filled",
                where,
                "Hydra refuses to add a new key without '+' and stops the launch",
                f"add a '+': +{po.text}",
            )
        from .plus_keys import classify

        verdict = classify(base, key)
        if verdict.field:
            return Finding(
                "schema.missing-plus",
                ERROR,
                f"{key!r} is a field of verl's {verdict.dataclass} but not in {schema}'s YAML, so it needs '+'",
                where,
                "Hydra refuses to set a key its YAML does not have and stops the launch (verl PR #7430 adds "
                "such fields to the YAML; then the '+' must go)",
                f"add a '+': +{po.text}",
            )
        hints = list(verdict.suggestions)
        return Finding(
            "schema.unknown-key",
            ERROR,
            f"key {key!r} does not exist in {schema}" + (f" (did you mean {' or '.join(hints)}?)" if hints else ""),
            where,
            "Hydra stops the launch; a misspelt key would otherwise never take effect",
            (f"use {hints[0]}" if hints else "remove it") + f", or if the key is meant to be new: +{po.text}",
        )
    if first_line.startswith("Could not delete"):
        return Finding(
            "schema.delete-missing",
            ERROR,
            f"cannot delete {key!r}: not in {schema}",
            where,
            "Hydra stops the launch",
            "remove the override",
        )
    cause = message.strip().replace("\n", " ")
    return Finding(
        "schema.rejected",
        ERROR,
        f"Hydra rejected the override: {cause}",
        where,
        f"{schema} cannot take this value",
        "fix the value's type",
    )


def _bool_fix(key: str, text: str) -> str:
    """``key=True``/``key=False`` for a boolean given as a string (Hydra's grammar knows only true/false)."""
    word = text.strip().lower()
    if word in ("true", "false"):
        return f"{key}={word.capitalize()} without quotes"
    if word in ("1", "yes", "on", "y"):
        return f"{key}=True (Hydra reads only true/false, unquoted, as a boolean)"
    if word in ("0", "no", "off", "n", ""):
        return f"{key}=False (Hydra reads only true/false, unquoted, as a boolean)"
    return f"{key}=True or {key}=False, unquoted"


def _check_value_kind(po: ParsedOverride, old: Any, report: Report) -> int:
    """Report a value whose kind contradicts the default (e.g. a list given as a quoted string)."""
    from omegaconf import DictConfig, ListConfig

    ov = po.parsed
    if ov.is_delete() or old is None:
        return 0
    new = ov.value()
    key = ov.key_or_group
    where = Where(position=po.position, override=po.text, key=key)
    if not isinstance(new, str) or "${" in new:
        return 0
    if isinstance(old, ListConfig):
        report.add(
            Finding(
                "schema.list-as-string",
                ERROR,
                f"{key} is a list in verl's config but is given the string {new!r}",
                where,
                "Hydra stores the quoted text as one string and verl iterates it or checks membership "
                "later (e.g. trainer.logger fails in verl's Tracking at trainer start)",
                _list_fix(key, new),
            )
        )
        return 1
    if isinstance(old, DictConfig):
        report.add(
            Finding(
                "schema.dict-as-string",
                ERROR,
                f"{key} is a mapping in verl's config but is given a string",
                where,
                "verl reads sub-keys of this node",
                f"{key}={{a: 1, b: 2}} or set the sub-keys one by one",
            )
        )
        return 1
    if isinstance(old, bool):
        report.add(
            Finding(
                "schema.bool-as-string",
                ERROR,
                f"{key} is a boolean in verl's config but is given the string {new!r}",
                where,
                "a non-empty string is truthy, so 'False' would act as True",
                _bool_fix(key, new),
            )
        )
        return 1
    if isinstance(old, (int, float)):
        report.add(
            Finding(
                "schema.number-as-string",
                ERROR,
                f"{key} is a number in verl's config but is given the string {new!r}",
                where,
                "verl does arithmetic and comparisons on this value",
                f"{key}=<number> without quotes",
            )
        )
        return 1
    return 0


# --- the composed config, cached by the argv's hash ---------------------------------------------------------------

#: bump when what :func:`compose_config` reports or returns changes in a way its source hash would not show
COMPOSE_CACHE_VERSION = 1


def compose_cache_key(spec: LaunchSpec) -> str:
    """Hex SHA-256 of everything :func:`compose_config`'s result depends on: the argv, the config folder and name,
    the installed verl (version; content of every YAML file and size + mtime of every Python file of the package,
    which ``pkg://`` search paths and the ``+``-key dataclasses read), the hydra-core and omegaconf versions, and
    the source of this module and :mod:`vlgrpo.preflight.plus_keys`."""
    import hashlib
    import importlib.util
    import os
    import sys
    from importlib.metadata import PackageNotFoundError, version

    h = hashlib.sha256()
    versions: dict[str, str | None] = {}
    for dist in ("verl", "hydra-core", "omegaconf"):
        try:
            versions[dist] = version(dist)
        except PackageNotFoundError:
            versions[dist] = None
    h.update(
        json.dumps(
            {
                "v": COMPOSE_CACHE_VERSION,
                "argv": spec.argv,
                "config_dir": spec.config_dir,
                "config_name": spec.config_name,
                "versions": versions,
                "python": sys.version,
            },
            sort_keys=True,
        ).encode()
    )
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("schema.py", "plus_keys.py", "launch.py"):
        with open(os.path.join(here, name), "rb") as fh:
            h.update(hashlib.sha256(fh.read()).digest())
    found = importlib.util.find_spec("verl")
    roots = sorted(
        {os.path.realpath(spec.config_dir)}
        | (
            {os.path.realpath(p) for p in found.submodule_search_locations}
            if found and found.submodule_search_locations
            else set()
        )
    )
    for root in roots:
        for folder, dirs, files in os.walk(root):
            dirs.sort()
            for name in sorted(files):
                path = os.path.join(folder, name)
                if name.endswith((".yaml", ".yml")):
                    with open(path, "rb") as fh:
                        h.update(f"{path} ".encode() + hashlib.sha256(fh.read()).digest())
                elif name.endswith(".py"):
                    st = os.stat(path)
                    h.update(f"{path} {st.st_size} {st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def compose_cached(spec: LaunchSpec, report: Report, cache: Any) -> tuple[ComposeResult, str]:
    """:func:`compose_config`, or its stored result when ``cache`` (a
    :class:`vlgrpo.preflight.count_cache.CountCache`, or None) holds a trusted entry for :func:`compose_cache_key`.
    Only a composed config is stored (with the findings it was composed with). Returns (result, "hit"/"miss"/"off")."""
    if cache is None:
        return compose_config(spec, report), "off"
    from omegaconf import OmegaConf

    key = compose_cache_key(spec)
    entry = cache.get("compose", key)
    if entry is not None:
        try:
            parsed = parse_overrides(spec, Report())
            groups = set(entry["groups"])
            if len(parsed) != len(spec.overrides) or [po.position for po in parsed] != entry["positions"]:
                raise ValueError("overrides differ")
            for po, is_group in zip(parsed, entry["is_group"]):
                po.is_group = bool(is_group)
            config = OmegaConf.create(entry["config"])
            OmegaConf.set_struct(config, True)
            findings = [
                Finding(f["code"], f["severity"], f["what"], Where(**f["where"]), f["why"], f["fix"])
                for f in entry["findings"]
            ]
        except (KeyError, TypeError, ValueError):
            cache.rejected += 1
        else:
            for f in findings:
                report.add(f)
            return ComposeResult(config, None, parsed, groups), "hit"
    before = len(report.findings)
    result = compose_config(spec, report)
    if result.config is not None:
        body = {
            "config": OmegaConf.to_yaml(result.config),
            "groups": sorted(result.groups),
            "positions": [po.position for po in result.overrides],
            "is_group": [po.is_group for po in result.overrides],
            "findings": [dataclasses.asdict(f) for f in report.findings[before:]],
        }
        try:
            cache.put("compose", key, body)
        except OSError:
            pass
    return result, "miss"
