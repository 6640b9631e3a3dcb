"""Run the checks the pinned verl would run after Ray start, on the composed config, now.

- The entry steps of the module's ``main``: for fully async, ``actor_rollout_ref.rollout.nnodes/n_gpus_per_node``
  copied from ``rollout.*`` (verl 0.8.0 ``fully_async_main.py::main``), then verl's
  ``migrate_legacy_reward_impl`` and ``OmegaConf.resolve`` (as ``TaskRunner.run`` does).
- The dataclass conversions the workers do with verl's ``omega_conf_to_dataclass``: actor, ref (with the
  key renames of ``verl/workers/engine_workers.py::ActorRolloutRefWorker.init_model``), rollout, checkpoint
  engine, critic when used, and the model (``HFModelConfig``: loads the folder's config, tokenizer and
  processor) -- their ``__post_init__`` asserts are verl's own rules.
- ``verl.utils.config.validate_config`` for ``main_ppo`` (called by ``TaskRunner.run``).
- For fully async: the ``assert`` statements at the top level of ``FullyAsyncRollouter.__init__``,
  ``FullyAsyncRollouter._validate_config`` and ``FullyAsyncTrainer.__init__`` are read from the installed
  verl source and evaluated against the config (so their messages are verl's, for whatever version is
  installed), together with the asserts of ``ActorRolloutRefWorker.init_model`` whose conditions can be
  decided from the config alone.
- Facts about the installed verl: which checkpoint-engine backends it registers (B13). (Whether verl or a
  vlgrpo patch covers the vision placeholder tokens, B05, is :mod:`vlgrpo.preflight.patch_checks`.)
"""

from __future__ import annotations

import ast
import contextlib
import copy
import io
import os
import types
from typing import TYPE_CHECKING, Any

from .launch import FULLY_ASYNC_MODULE, MAIN_PPO_MODULE, LaunchSpec
from .report import ERROR, WARNING, Finding, Report, Where

if TYPE_CHECKING:
    from .rules import Locator
from .schema import verl_version

_VERL_ERRORS = (AssertionError, ValueError, TypeError, RuntimeError, NotImplementedError, KeyError, AttributeError)


def _verl_dir() -> str:
    import verl

    return os.path.dirname(str(verl.__file__))


def _msg(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.split())


def load_function(
    rel: str, name: str, extra_globals: dict[str, Any] | None = None, import_fallback: bool = True
) -> Any:
    """A top-level function of an installed verl module, compiled from its source alone.

    Used for functions whose module is expensive or impossible to import here: ``migrate_legacy_reward_impl``
    (a pure OmegaConf function whose module imports Ray, aiohttp and the reward stack, 1.5 s) and
    ``build_cli_args_from_config`` (its module imports vLLM). Globals available to it: omegaconf's names and
    ``extra_globals``. Falls back to a real import when the function needs other module globals (or raises
    LookupError when ``import_fallback`` is False); OSError/StopIteration when the file or function is absent.
    """
    import importlib

    path = os.path.join(_verl_dir(), rel)
    try:
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), filename=path)
        node = _strip_annotations(next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name))
        import omegaconf

        ns: dict[str, Any] = {
            "open_dict": omegaconf.open_dict,
            "OmegaConf": omegaconf.OmegaConf,
            "DictConfig": omegaconf.DictConfig,
            "ListConfig": omegaconf.ListConfig,
            **(extra_globals or {}),
        }
        free = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        local = {a.arg for a in node.args.args} | {
            n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
        }
        import builtins

        if free - local - set(ns) - set(dir(builtins)):
            raise LookupError("needs module globals")
        exec(compile(ast.Module(body=[node], type_ignores=[]), path, "exec"), ns)  # verl's source
        return ns[name]
    except (StopIteration, LookupError, SyntaxError, OSError):
        if not import_fallback:
            raise
        module = importlib.import_module("verl." + rel[:-3].replace("/", "."))
        return getattr(module, name)


def _strip_annotations(node: ast.FunctionDef) -> ast.FunctionDef:
    """The function without annotations (they may name types of its module that are not loaded here)."""
    import copy as _copy

    node = _copy.deepcopy(node)
    node.returns = None
    for a in node.args.args + node.args.kwonlyargs + node.args.posonlyargs:
        a.annotation = None
    return node


def prepare_runtime_config(spec: LaunchSpec, cfg: Any, report: Report) -> Any:
    """Return a resolved copy of ``cfg`` as verl's main would hand it to the task runner (or None)."""
    from omegaconf import OmegaConf, open_dict

    work = copy.deepcopy(cfg)
    if spec.module == FULLY_ASYNC_MODULE:
        with open_dict(work):
            work.actor_rollout_ref.rollout.nnodes = work.rollout.nnodes
            work.actor_rollout_ref.rollout.n_gpus_per_node = work.rollout.n_gpus_per_node
    try:
        migrate_legacy_reward_impl = load_function(
            "experimental/reward_loop/reward_loop.py", "migrate_legacy_reward_impl"
        )
        work = migrate_legacy_reward_impl(work)
    except _VERL_ERRORS + (Exception,) as exc:  # report whatever verl raises
        report.add(
            Finding(
                "verl.reward-migration",
                ERROR,
                f"verl's migrate_legacy_reward_impl fails: {_msg(exc)}",
                Where(key="reward_model"),
                "verl runs this in main() before Ray starts the trainer",
                "fix the reward/reward_model settings it names",
            )
        )
        return None
    try:
        missing = sorted(k for k in OmegaConf.missing_keys(work) if not _in_disabled_section(work, k))
    except Exception as exc:  # an interpolation that cannot resolve (missing key, unset oc.env)
        key = getattr(exc, "full_key", None)
        report.add(
            Finding(
                "verl.interpolation",
                ERROR,
                f"the config does not resolve: {_msg(exc)}",
                Where(key=str(key)) if key else Where(),
                "verl resolves every ${...} interpolation in the task runner and stops there",
                "fix the interpolation (the key it names must exist; oc.env needs the variable set)",
            )
        )
        return None
    for key in missing:
        report.add(
            Finding(
                "schema.missing-value",
                ERROR,
                f"{key} is mandatory ('???') in verl's config and not set",
                Where(key=key),
                "verl raises MissingMandatoryValue when it first reads it, after Ray start",
                f"add {key}=<value> to the launch",
            )
        )
    if missing:
        return None
    try:
        OmegaConf.resolve(work)
    except Exception as exc:
        report.add(
            Finding(
                "verl.interpolation",
                ERROR,
                f"the config does not resolve: {_msg(exc)}",
                Where(),
                "verl resolves every ${...} interpolation in the task runner",
                "fix the interpolation",
            )
        )
        return None
    return work


def _in_disabled_section(cfg: Any, key: str) -> bool:
    """True when an enclosing node has ``enable`` False/None (e.g. reward.reward_model with enable=False):
    verl does not read mandatory values there."""
    from omegaconf import DictConfig

    node = cfg
    for part in key.split(".")[:-1]:
        if not isinstance(node, DictConfig) or part not in node:
            return False
        node = node._get_node(part)
        if isinstance(node, DictConfig) and "enable" in node:
            try:
                if not node.get("enable"):
                    return True
            except Exception:  # unresolvable enable flag: do not skip
                return False
    return False


def _convert(report: Report, key: str, node: Any, what: str) -> Any:
    from verl.utils.config import omega_conf_to_dataclass

    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return omega_conf_to_dataclass(node)
    except Exception as exc:  # verl's own assertion / validation message
        report.add(
            Finding(
                "verl.dataclass",
                ERROR,
                f"verl's {what} rejects {key}: {_msg(exc)}",
                Where(key=key),
                "the worker converts this node with omega_conf_to_dataclass after Ray placed it and loaded weights",
                "change the settings the message names",
            )
        )
        return None


def _need_reference_policy(cfg: Any) -> bool:
    """verl 0.8.0 ``verl/trainer/ppo/utils.py::need_reference_policy`` (that module costs 0.8 s to import):
    KL in reward or KL loss."""
    return bool(cfg.algorithm.get("use_kl_in_reward", False) or cfg.actor_rollout_ref.actor.use_kl_loss)


def _need_critic(cfg: Any) -> bool:
    """verl 0.8.0 ``verl/trainer/ppo/utils.py::need_critic``: ``critic.enable`` if set, else GAE needs one."""
    if cfg.critic.get("enable") is not None:
        return bool(cfg.critic.enable)
    return str(cfg.algorithm.adv_estimator) == "gae"


def run_dataclass_checks(spec: LaunchSpec, work: Any, report: Report) -> dict[str, Any]:
    """Convert actor/ref/rollout/checkpoint-engine/critic nodes with verl's dataclasses. Returns them."""
    from omegaconf import open_dict

    out: dict[str, Any] = {}
    arr = work.actor_rollout_ref
    out["actor"] = _convert(report, "actor_rollout_ref.actor", arr.actor, "actor config")
    if _need_reference_policy(work):
        ref = copy.deepcopy(arr.ref)
        with open_dict(ref):  # the renames ActorRolloutRefWorker.init_model applies before converting
            ref.ppo_mini_batch_size = arr.actor.ppo_mini_batch_size
            ref.ppo_micro_batch_size = ref.pop("log_prob_micro_batch_size", None)
            ref.ppo_micro_batch_size_per_gpu = ref.pop("log_prob_micro_batch_size_per_gpu", None)
            ref.use_dynamic_bsz = ref.pop("log_prob_use_dynamic_bsz", False)
            ref.ppo_max_token_len_per_gpu = ref.pop("log_prob_max_token_len_per_gpu", None)
        out["ref"] = _convert(report, "actor_rollout_ref.ref", ref, "ref config")
    out["rollout"] = _convert(report, "actor_rollout_ref.rollout", arr.rollout, "RolloutConfig")
    out["checkpoint_engine"] = _convert(
        report, "actor_rollout_ref.rollout.checkpoint_engine", arr.rollout.checkpoint_engine, "CheckpointEngineConfig"
    )
    if spec.module == MAIN_PPO_MODULE and _need_critic(work):
        out["critic"] = _convert(report, "critic", work.critic, "critic config")
    return out


def run_validate_config(spec: LaunchSpec, work: Any, report: Report) -> None:
    """``verl.utils.config.validate_config`` as ``main_ppo.TaskRunner.run`` calls it (main_ppo only)."""
    if spec.module != MAIN_PPO_MODULE:
        return
    from verl.utils.config import validate_config

    try:
        with contextlib.redirect_stdout(io.StringIO()):
            validate_config(
                config=copy.deepcopy(work),
                use_reference_policy=_need_reference_policy(work),
                use_critic=_need_critic(work),
            )
    except Exception as exc:
        report.add(
            Finding(
                "verl.validate-config",
                ERROR,
                f"verl's validate_config fails: {_msg(exc)}",
                Where(),
                "main_ppo's TaskRunner runs it after Ray start",
                "change the settings the message names",
            )
        )


# --- asserts read from the installed verl source ------------------------------------------------------------

#: (file relative to the verl package, class, method) whose asserts preflight evaluates, per module.
ASSERT_SITES = {
    FULLY_ASYNC_MODULE: [
        ("experimental/fully_async_policy/fully_async_rollouter.py", "FullyAsyncRollouter", "__init__"),
        ("experimental/fully_async_policy/fully_async_rollouter.py", "FullyAsyncRollouter", "_validate_config"),
        ("experimental/fully_async_policy/fully_async_trainer.py", "FullyAsyncTrainer", "__init__"),
        ("workers/engine_workers.py", "ActorRolloutRefWorker", "init_model"),
    ],
    MAIN_PPO_MODULE: [
        ("workers/engine_workers.py", "ActorRolloutRefWorker", "init_model"),
    ],
}


#: an ``assert`` statement and the ``if`` tests above it (``(test, True)`` in its body, ``(test, False)`` in the else)
FoundAssert = tuple[ast.Assert, list[tuple[ast.expr, bool]]]


def _collect_asserts(body: list[ast.stmt], conds: list[tuple[ast.expr, bool]], out: list[FoundAssert]) -> None:
    for stmt in body:
        if isinstance(stmt, ast.Assert):
            out.append((stmt, list(conds)))
        elif isinstance(stmt, ast.If):
            _collect_asserts(stmt.body, conds + [(stmt.test, True)], out)
            _collect_asserts(stmt.orelse, conds + [(stmt.test, False)], out)


def find_asserts(path: str, cls: str, method: str) -> list[FoundAssert]:
    """Asserts in ``cls.method`` of the source file ``path`` (top level or under ``if`` chains)."""
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), filename=path)
    out: list[FoundAssert] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == method:
                    _collect_asserts(item.body, [], out)
    return out


class _Undecidable(Exception):
    pass


def _eval(expr: ast.expr, ns: dict[str, Any], path: str) -> Any:
    names = {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}
    if not names <= {"self", "True", "False", "None", "isinstance", "str", "int", "len"}:
        raise _Undecidable
    try:
        return eval(
            compile(ast.Expression(expr), path, "eval"),
            {"__builtins__": {"isinstance": isinstance, "str": str, "int": int, "len": len}},
            ns,
        )  # verl's own source
    except Exception as exc:  # attribute not on the stand-in object: not decidable
        raise _Undecidable from exc


def run_source_asserts(spec: LaunchSpec, work: Any, report: Report, loc: Any = None) -> int:
    """Evaluate verl's own asserts (see :data:`ASSERT_SITES`) on ``work``; returns how many were decided."""
    verl_dir = _verl_dir()
    decided = 0
    for rel, cls, method in ASSERT_SITES.get(spec.module, []):
        path = os.path.join(verl_dir, rel)
        if not os.path.isfile(path):
            continue
        if cls == "ActorRolloutRefWorker":
            self_ns = types.SimpleNamespace(config=work.actor_rollout_ref, role="actor_rollout_ref")
        else:
            self_ns = types.SimpleNamespace(config=work, hybrid_engine=work.actor_rollout_ref.hybrid_engine)
        ns = {"self": self_ns}
        for node, conds in find_asserts(path, cls, method):
            try:
                if not all(bool(_eval(test, ns, path)) == want for test, want in conds):
                    continue
                ok = bool(_eval(node.test, ns, path))
            except _Undecidable:
                continue
            decided += 1
            if ok:
                continue
            try:
                message = str(_eval(node.msg, ns, path)) if node.msg is not None else ""
            except _Undecidable:
                message = ""
            check = ast.unparse(node.test).replace("self.config.", "")
            report.add(
                Finding(
                    "verl.assert",
                    ERROR,
                    f"verl's {cls}.{method} asserts `{check}`"
                    + (f": {message}" if message else "")
                    + " -- it is false",
                    _where(loc, _first_key(node.test)),
                    f"{rel}:{node.lineno} raises AssertionError after Ray placed the workers",
                    "set the value the assertion requires",
                )
            )
    return decided


def _where(loc: Locator | None, key: str | None) -> Where:
    if loc is None or key is None:
        return Where(key=key)
    return loc.where(key)


def _first_key(expr: ast.expr) -> str | None:
    for node in ast.walk(expr):
        if isinstance(node, ast.Attribute):
            text = ast.unparse(node)
            if text.startswith("self.config."):
                return text[len("self.config.") :]
            if text == "self.hybrid_engine":
                return "actor_rollout_ref.hybrid_engine"
    return None


# --- facts about the installed verl -------------------------------------------------------------------------


def declared_checkpoint_backends() -> dict[str, list[str]]:
    """Backend names registered with ``@CheckpointEngineRegistry.register("...")`` in the installed verl's
    ``verl/checkpoint_engine/*.py``, read from source (no import). Maps name -> defining files."""
    root = os.path.join(_verl_dir(), "checkpoint_engine")
    names: dict[str, list[str]] = {}
    for fn in sorted(os.listdir(root)):
        if not fn.endswith(".py"):
            continue
        with open(os.path.join(root, fn), encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
        for node in ast.walk(tree):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                for dec in node.decorator_list:
                    if (
                        isinstance(dec, ast.Call)
                        and ast.unparse(dec.func).endswith("CheckpointEngineRegistry.register")
                        and dec.args
                        and isinstance(dec.args[0], ast.Constant)
                    ):
                        names.setdefault(str(dec.args[0].value), []).append(fn)
    return names


def registered_checkpoint_backends() -> tuple[set[str] | None, str]:
    """Backends actually registered after ``import verl.checkpoint_engine`` here (None + reason if it fails)."""
    try:
        import verl.checkpoint_engine as ce
    except Exception as exc:
        return None, _msg(exc)
    return set(ce.CheckpointEngineRegistry._registry), ""


def check_checkpoint_engine(work: Any, report: Report, loc: Any = None) -> None:
    """B13: the backend must be one the pinned verl registers; explain ``nccl`` on Ascend."""
    node = work.actor_rollout_ref.rollout.checkpoint_engine
    backend = node.get("backend")
    custom = node.get("custom_backend_module")
    key = "actor_rollout_ref.rollout.checkpoint_engine.backend"
    declared = declared_checkpoint_backends()
    if custom:
        return  # a plugin registers its own name; the entrypoint allowlist governs custom modules
    version = verl_version()
    if backend not in declared:
        hint = ""
        if str(backend).lower() == "hccl":
            hint = (
                " On Ascend, verl registers its HCCL engine (hccl_checkpoint_engine.py) under the name 'nccl'"
                " (verl issue #6425)."
            )
        report.add(
            Finding(
                "rules.checkpoint-backend",
                ERROR,
                f"checkpoint engine backend {backend!r} is not registered by verl {version}; it registers: "
                + ", ".join(f"{n} ({'/'.join(f)})" for n, f in sorted(declared.items()))
                + "."
                + hint,
                _where(loc, key),
                "CheckpointEngineRegistry.new raises 'Checkpoint engine ... not registered' when the "
                "trainer starts (verl issue #5684)",
                "use backend=nccl (NCCL on GPU, HCCL on Ascend NPU)" if backend != "nccl" else "use a registered name",
            )
        )
        return
    registered, reason = registered_checkpoint_backends()
    if registered is None or backend not in registered:
        why = reason or "its module's imports failed here"
        report.add(
            Finding(
                "rules.checkpoint-backend-import",
                WARNING,
                f"backend {backend!r} is declared by verl {version} ({'/'.join(declared[backend])}) but is not "
                f"registered in this interpreter: {why}",
                Where(key=key),
                "verl swallows the ImportError; in an image without the engine's dependencies "
                "(GPU: cupy and pyzmq; NPU: torch_npu) the trainer fails later with 'not registered'",
                "run preflight inside the training image (its smoke test imports verl.checkpoint_engine)",
            )
        )
