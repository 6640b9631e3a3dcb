"""Audit of environment values the stack rejects at start (field case C10's kind): a sweep of the installed vLLM,
vllm-ascend, verl and torch Python sources with :mod:`ast`.

A *site* is an ``assert <test>`` or an ``if <test>: raise`` whose test reads an environment variable, directly
(``os.environ.get("X")``, ``os.environ["X"]``, ``os.getenv("X")``, vLLM's ``envs.X``) or through a local name assigned from one in
the same function. A site inside a class is *gated* by the ``if <condition>`` blocks elsewhere in the swept sources
that use the class (vLLM 0.13.0's ``CuMemAllocator.__init__`` asserts on ``PYTORCH_CUDA_ALLOC_CONF``; its GPU worker
builds one only ``if self.vllm_config.model_config.enable_sleep_mode``): the combination of a value with a setting.

:func:`evaluate` runs a site's test on a given value when the test is a plain expression of the value (comparisons,
``in``, ``not``, ``and``/``or``, constants, ``str`` methods); others are counted as not evaluable.
:func:`check_env_values` (the preflight check ``env-values``, code ``rules.env-rejected``) takes the process
environment -- the preflight runs in the launch's built child environment, so these are the values the job gets --
and refuses a value a reachable site rejects, when the site's gates are on in the recipe's config (a gate's last
attribute is looked up as a key of the rollout config, as verl passes ``enable_sleep_mode`` to vLLM's engine). torch
reads its allocator settings under two names (``PYTORCH_ALLOC_CONF``, and ``PYTORCH_CUDA_ALLOC_CONF`` kept as the
older alias: torch/cuda/memory.py), so a site on one is checked against both (:data:`ALIASES`); vLLM 0.13.0 reads only
the older name, which is how the alias gets past its assertion (huggingface/trl PR #5794).

``python -m vlgrpo.preflight.env_audit`` prints the sites (JSON).
"""

from __future__ import annotations

import ast
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict, Union

if TYPE_CHECKING:
    from .report import Report

#: the packages swept (those installed here), the folder of each found without importing it
PACKAGES = ("vllm", "vllm_ascend", "verl", "torch", "torch_npu")
#: names under which the same setting reaches the library (torch's allocator configuration)
ALIASES = {"PYTORCH_CUDA_ALLOC_CONF": ("PYTORCH_ALLOC_CONF",), "PYTORCH_ALLOC_CONF": ("PYTORCH_CUDA_ALLOC_CONF",)}
#: the variables of the sites whose test :func:`evaluate` can run (the only ones a finding can come from), in the
#: pinned sources (vLLM 0.13.0, verl 0.8.0, torch): the check sweeps the sources only when one of them (or an alias)
#: is set, so a launch without them pays nothing; test_env_audit.py recomputes the set from the sources
EVALUABLE_VARIABLES = (
    "ASCEND_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "LEVEL_ZERO_V1_SDK_PATH",
    "MASTER_ADDR",
    "MASTER_PORT",
    "PYTORCH_CUDA_ALLOC_CONF",
    "VERL_TRACKER_HDFS_DIR",
    "VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE",
    "VLLM_CACHE_ROOT",
    "VLLM_CUDART_SO_PATH",
    "VLLM_DEEPEP_BUFFER_SIZE_MB",
)
#: how the reports name each package
DISPLAY = {"vllm": "vLLM", "vllm_ascend": "vllm-ascend", "torch_npu": "torch_npu"}
_SAFE_METHODS = {"lower", "upper", "strip", "split", "startswith", "endswith", "isdigit"}


@dataclass
class Site:
    """One assertion or raise on an environment value: package, file (relative), line, function, the variable, the
    test (source, and the name the value is bound to in it), the message, and the gates (source of each condition)."""

    package: str
    file: str
    line: int
    function: str
    variable: str
    test: str
    bound: str
    kind: str
    message: str
    default: Any = None
    cls: str | None = None
    gates: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class SweepResult(TypedDict):
    """What :func:`sweep` returns."""

    sites: list[Site]
    files: int


#: ``{package: folder holding <package>/}`` (None or "" for a package not installed: skipped)
Roots = Mapping[str, Union[str, None]]


def _env_read(node: ast.AST) -> tuple[str, Any] | None:
    """``(variable, default)`` when ``node`` reads an environment variable by a constant name, else None."""
    if isinstance(node, ast.Call):
        f = node.func
        dotted = ast.unparse(f) if isinstance(f, (ast.Attribute, ast.Name)) else ""
        if (
            dotted in ("os.environ.get", "os.getenv", "environ.get", "getenv")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            default = node.args[1].value if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) else None
            return node.args[0].value, default
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "envs"
        and node.attr.isupper()
    ):
        return node.attr, None  # vLLM's lazily read vllm.envs (its own parsing of the value: not evaluated here)
    if (
        isinstance(node, ast.Subscript)
        and ast.unparse(node.value) in ("os.environ", "environ")
        and isinstance(node.slice, ast.Constant)
        and isinstance(node.slice.value, str)
    ):
        return node.slice.value, None
    return None


def _first_message(node: ast.AST) -> str:
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and len(n.value) > 3:
            return n.value
        if isinstance(n, ast.JoinedStr):
            return ast.unparse(n)
    return ""


def _sites_in(tree: ast.Module, package: str, rel: str) -> list[Site]:
    sites: list[Site] = []

    def visit(body: list[ast.stmt], prefix: str, cls: str | None) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                visit(node.body, f"{prefix}{node.name}.", node.name)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                scan(node, prefix + node.name, cls)

    def scan(fn: ast.FunctionDef | ast.AsyncFunctionDef, qualname: str, cls: str | None) -> None:
        tainted: dict[str, tuple[str, Any]] = {}
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                for n in ast.walk(node.value):
                    read = _env_read(n)
                    if read:
                        tainted[node.targets[0].id] = read
                        break
        for node in ast.walk(fn):
            if isinstance(node, ast.Assert):
                test, kind, msg = node.test, "assert", _first_message(node.msg) if node.msg else ""
            elif isinstance(node, ast.If) and any(isinstance(b, ast.Raise) for b in node.body):
                test, kind = node.test, "raise-if"
                msg = next((_first_message(b) for b in node.body if isinstance(b, ast.Raise)), "")
            else:
                continue
            found: tuple[tuple[str, Any], str] | None = None
            for n in ast.walk(test):
                read = _env_read(n)
                if read:
                    found = (read, "__value__")
                    break
                if isinstance(n, ast.Name) and n.id in tainted:
                    found = (tainted[n.id], n.id)
                    break
            if found:
                (var, default), bound = found
                sites.append(
                    Site(package, rel, node.lineno, qualname, var, ast.unparse(test), bound, kind, msg, default, cls)
                )

    visit(tree.body, "", None)
    return sites


def _files(root: str, package: str) -> Iterator[str]:
    base = os.path.join(root, package)
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d not in ("__pycache__", "tests", "testing", "test"))
        for name in sorted(filenames):
            if name.endswith(".py"):
                yield os.path.join(dirpath, name)


def _uses_class(body: list[ast.stmt], cls: str) -> bool:
    """The statements call the class or one of its class attributes (``Cls(...)``, ``Cls.get_instance()``)."""
    for b in body:
        for n in ast.walk(b):
            if isinstance(n, ast.Call):
                f = n.func
                if isinstance(f, ast.Name) and f.id == cls:
                    return True
                if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == cls:
                    return True
    return False


def sweep(roots: Roots, names: frozenset[str] | None = None) -> SweepResult:
    """Sweep ``{package: folder holding <package>/}``. Returns ``{"sites": [Site], "files": int}``; each site in a
    class carries its gates: ``if`` blocks of other files of the same package whose body calls the class.

    ``names``: only files whose text mentions one of these variable names are parsed (the preflight passes the
    variables set in its environment: a site on a variable that is not set rejects nothing), so a check costs a read
    of the sources instead of a parse of every file that touches the environment."""
    sites: list[Site] = []
    files = 0
    texts: list[tuple[str, str, str]] = []
    for package, root in roots.items():
        if not root:
            continue
        for path in _files(root, package):
            try:
                with open(path, encoding="utf-8") as fh:
                    text = fh.read()
            except OSError:
                continue
            rel = os.path.relpath(path, root)
            texts.append((package, rel, text))
            if "environ" not in text and "getenv" not in text and "envs." not in text:
                continue
            if names is not None and not any(n in text for n in names):
                continue
            try:
                tree = ast.parse(text)
            except (SyntaxError, ValueError):
                continue
            files += 1
            sites.extend(_sites_in(tree, package, rel))
    by_class: dict[tuple[str, str], list[Site]] = {}
    for site in sites:
        if site.cls:
            by_class.setdefault((site.package, site.cls), []).append(site)
    for package, rel, text in texts:
        wanted = [(pkg, cls) for (pkg, cls) in by_class if pkg == package and cls in text]
        if not wanted:
            continue
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.If):
                continue
            for key in wanted:
                if not _uses_class(node.body, key[1]):
                    continue
                for site in by_class[key]:
                    if site.file == rel:
                        continue  # the class's own module (its singleton getter, its own branches)
                    gate = f"{rel}:{node.lineno}: {ast.unparse(node.test)}"
                    if gate not in site.gates:
                        site.gates.append(gate)
    return {"sites": sites, "files": files}


class _NotEvaluable(Exception):
    pass


#: the comparison operators :func:`evaluate` runs
_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
    ast.Is: lambda a, b: a is b,
    ast.IsNot: lambda a, b: a is not b,
}


def evaluate(site: Site, value: str) -> bool | None:
    """The site's test with the variable's value ``value``: True (passes), False (the stack rejects the value), or
    None when the test is not a plain expression of the value."""
    tree = ast.parse(site.test, mode="eval")

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id == site.bound:
                return value
            raise _NotEvaluable(node.id)
        if isinstance(node, ast.Attribute) and _env_read(node):
            raise _NotEvaluable("vllm.envs parses the value itself")
        read = _env_read(node)
        if read and read[0] == site.variable:
            return value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return not ev(node.operand)
        if isinstance(node, ast.BoolOp):
            vals = [ev(v) for v in node.values]
            return all(vals) if isinstance(node.op, ast.And) else any(vals)
        if isinstance(node, ast.Compare):
            left = ev(node.left)
            for op, right_node in zip(node.ops, node.comparators):
                right = ev(right_node)
                ok = _COMPARE.get(type(op))
                if ok is None:
                    raise _NotEvaluable(type(op).__name__)
                if not ok(left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _SAFE_METHODS:
            obj = ev(node.func.value)
            if not isinstance(obj, str):
                raise _NotEvaluable("method on a non-string")
            return getattr(obj, node.func.attr)(*[ev(a) for a in node.args])
        raise _NotEvaluable(type(node).__name__)

    try:
        result = bool(ev(tree.body))
    except (_NotEvaluable, TypeError, ValueError):
        return None
    return result if site.kind == "assert" else (not result)


def default_roots() -> dict[str, str | None]:
    """``{package: folder}`` of the swept packages installed here (found without importing them)."""
    import importlib.util

    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.submodule_search_locations:
            out[name] = os.path.dirname(list(spec.submodule_search_locations)[0])
    return out


_CACHE: dict[tuple[tuple[tuple[str, str | None], ...], frozenset[str] | None], SweepResult] = {}


def cached_sweep(roots: Roots, names: frozenset[str] | None = None) -> SweepResult:
    key = (tuple(sorted(roots.items())), names)
    if key not in _CACHE:
        _CACHE[key] = sweep(roots, names)
    return _CACHE[key]


def _gate_setting(gate: str) -> str | None:
    """The setting a gate tests: the last name of a plain attribute chain (``...model_config.enable_sleep_mode``)."""
    test = gate.split(": ", 1)[1]
    try:
        node = ast.parse(test, mode="eval").body
    except SyntaxError:
        return None
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def _rollout_value(rollout: Any, name: str | None) -> tuple[bool, Any]:
    """``(known, value)`` of rollout setting ``name``: the config's own value, else the default of the dataclass its
    ``_target_`` names (verl 0.8.0's ``RolloutConfig.enable_sleep_mode = True`` is not in the YAML)."""
    import dataclasses
    import importlib

    if name is None:
        return False, None
    if name in rollout:
        return True, rollout.get(name)
    target = rollout.get("_target_") if "_target_" in rollout else None
    if not isinstance(target, str) or "." not in target:
        return False, None
    module, _, attr = target.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), attr)
        for f in dataclasses.fields(cls):
            if f.name == name and f.default is not dataclasses.MISSING:
                return True, f.default
    except (ImportError, AttributeError, TypeError):
        pass
    return False, None


def check_env_values(
    work: Any, report: Report, environ: Mapping[str, str] | None = None, roots: Roots | None = None
) -> dict[str, Any]:
    """C10: an ERROR ``rules.env-rejected`` for every environment value (of ``environ``, default the process's) that a
    swept site rejects, where the site's gates are on in ``work``'s rollout config (a vLLM/vllm-ascend site counts
    only with a vLLM rollout). Returns the summary: the sweep's counts and the rejected variables."""
    from .report import ERROR, Finding, Where

    env = os.environ if environ is None else environ
    roots = default_roots() if roots is None else roots
    names = {n for n, v in env.items() if v}
    names |= {a for n in list(names) for a in ALIASES.get(n, ())}
    if not names & set(EVALUABLE_VARIABLES):
        return {
            "sites_on_set_variables": 0,
            "files": 0,
            "packages": sorted(roots),
            "rejected": [],
            "skipped": "none of the variables a checkable site tests is set",
        }
    result = cached_sweep(roots, frozenset(names))
    rollout = work.actor_rollout_ref.rollout
    rejected: list[str] = []
    summary: dict[str, Any] = {
        "sites_on_set_variables": len(result["sites"]),
        "files": result["files"],
        "packages": sorted(roots),
        "rejected": rejected,
    }
    for site in result["sites"]:
        if site.package.startswith("vllm") and rollout.get("name") != "vllm":
            continue
        gates_on = True
        gate_names: list[str] = []
        for gate in site.gates:
            name = _gate_setting(gate)
            known, value = _rollout_value(rollout, name)
            if not known:
                gates_on = False  # a gate this check cannot map to the recipe: not claimed
                break
            gate_names.append(f"actor_rollout_ref.rollout.{name}={value}")
            gates_on = gates_on and bool(value)
        if not gates_on:
            continue
        for variable in (site.variable,) + ALIASES.get(site.variable, ()):
            value = env.get(variable)
            if not value or evaluate(site, value) is not False:
                continue
            version = _version(roots.get(site.package), site.package)
            via = "" if variable == site.variable else f" (torch reads {variable} as {site.variable}; "
            via += "" if variable == site.variable else f"{site.package} checks only {site.variable})"
            with_gate = f" with {', '.join(gate_names)}" if gate_names else ""
            rejected.append(variable)
            report.add(
                Finding(
                    "rules.env-rejected",
                    ERROR,
                    f"{variable}={value!r}{with_gate}: {DISPLAY.get(site.package, site.package)} {version} rejects it "
                    "at start"
                    f" ({site.file}:{site.line} {site.function}: {site.kind} {site.test}"
                    + (f": {site.message!r}" if site.message else "")
                    + ")"
                    + via,
                    Where(key=variable),
                    "every rollout worker fails at model load, after Ray placed the workers and the trainer started "
                    "building the actor",
                    f"a value of {variable} that passes `{site.test}` (unset it, or drop the rejected entry)"
                    + (f", or turn {gate_names[0].split('=')[0]} off" if gate_names else ""),
                )
            )
    return summary


def reach(variable: str) -> str:
    """How the launch treats ``variable`` (vlgrpo/environment.tsv, either recipe): ``"passed"`` (kinds pass/set),
    ``"on request"`` (pass-on-request: only when VLGRPO_PASS_ENV names it) or ``"not passed"``."""
    from vlgrpo import environment

    kinds = set()
    for owner in ("fa", "vo"):
        row = environment.env_row(variable, owner)
        kinds.add(row.kind if row is not None else "")
    if kinds & {"pass", "set"}:
        return "passed"
    if "pass-on-request" in kinds or "" in kinds:
        return "on request"  # an unlisted variable can be named in VLGRPO_PASS_ENV
    return "not passed"


def _version(root: str | None, package: str) -> str:
    try:
        for entry in sorted(os.listdir(root or "")):
            if entry.startswith(f"{package}-") and entry.endswith(".dist-info"):
                return entry[len(package) + 1 : -len(".dist-info")]
    except OSError:
        pass
    return "?"


def main(argv: Sequence[str] | None = None) -> int:
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m vlgrpo.preflight.env_audit", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--root",
        action="append",
        default=[],
        metavar="PACKAGE=DIR",
        help="folder holding PACKAGE/ (default: the installed packages)",
    )
    args = parser.parse_args(argv)
    roots = default_roots()
    for item in args.root:
        name, _, root = item.partition("=")
        roots[name] = root
    result = sweep(roots)
    print(
        json.dumps(
            {"files": result["files"], "sites": [s.as_dict() for s in result["sites"]], "roots": roots},
            indent=1,
            default=str,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
