"""Parse a complete launch argv (``python3 -m <verl module> [hydra flags] overrides...``).

The entrypoints write the argv they are about to exec into a file, one element per line; this module turns
it into a :class:`LaunchSpec`: the verl module, the Hydra config directory and name it resolves to (the way
``@hydra.main(config_path=..., config_name=...)`` of that module and ``--config-path``/``--config-name``
do), and the overrides with their argv positions.

Only the standard library is used; the verl package is located with :func:`importlib.util.find_spec`
without importing it.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os

from .report import ERROR, WARNING, Finding, Where

FULLY_ASYNC_MODULE = "verl.experimental.fully_async_policy.fully_async_main"
MAIN_PPO_MODULE = "verl.trainer.main_ppo"

#: module -> (config directory relative to the installed ``verl`` package, default config name).
#: Mirrors ``@hydra.main(config_path="config", config_name=...)`` in verl 0.8.0
#: ``verl/experimental/fully_async_policy/fully_async_main.py`` and ``verl/trainer/main_ppo.py``.
KNOWN_MODULES: dict[str, tuple[str, str]] = {
    FULLY_ASYNC_MODULE: ("experimental/fully_async_policy/config", "fully_async_ppo_trainer"),
    MAIN_PPO_MODULE: ("trainer/config", "ppo_trainer"),
}


class LaunchError(ValueError):
    """The argv cannot be interpreted as a verl launch (reported as a finding, exit 2)."""


@dataclasses.dataclass
class Override:
    """One Hydra override as given. position: index in the full argv."""

    position: int
    text: str


@dataclasses.dataclass
class LaunchSpec:
    """A parsed launch.

    argv: the complete argv, as given.
    module: the ``-m`` module.
    config_dir: absolute path of the Hydra primary config directory of the installed verl.
    config_name: primary config name (no ``.yaml``).
    overrides: Hydra overrides with their argv positions.
    """

    argv: list[str]
    module: str
    config_dir: str
    config_name: str
    overrides: list[Override]
    notes: list[Finding] = dataclasses.field(default_factory=list)
    #: ``hydra.*`` overrides (Hydra's own settings): checked against Hydra's config, not verl's.
    hydra_overrides: list[Override] = dataclasses.field(default_factory=list)


def read_argv_file(path: str) -> list[str]:
    """Read an argv file: one element per line, ``\\n`` separated, no quoting.

    A single trailing newline is allowed. Raises OSError if unreadable, LaunchError if empty or not UTF-8.
    """
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except UnicodeDecodeError as exc:
        raise LaunchError(f"argv file {path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    if text.endswith("\n"):
        text = text[:-1]
    argv = text.split("\n") if text else []
    if not argv:
        raise LaunchError(f"argv file {path} is empty")
    return argv


def verl_package_dir() -> str:
    """Directory of the installed ``verl`` package (not imported). Raises LaunchError if not installed."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise LaunchError("the verl package is not installed in this interpreter")
    return list(spec.submodule_search_locations)[0]


def _is_python(arg: str) -> bool:
    base = os.path.basename(arg)
    return base.startswith("python")


def parse_launch(argv: list[str]) -> LaunchSpec:
    """Split ``argv`` into module, config location and overrides.

    Accepts ``python3 -m MODULE [--config-path P|-cp P] [--config-name N|-cn N] OVERRIDE...`` (the ``=`` form
    of the flags too). A relative ``--config-path`` is resolved against the module's directory, as Hydra
    does for a ``@hydra.main`` script. Raises LaunchError for anything else.
    """
    if len(argv) < 3 or not _is_python(argv[0]) or argv[1] != "-m":
        raise LaunchError("argv must start with: python3 -m <module> (got " + " ".join(repr(a) for a in argv[:3]) + ")")
    module = argv[2]
    if module not in KNOWN_MODULES:
        raise LaunchError(
            f"module {module!r} is not one of the recipes preflight knows: " + ", ".join(sorted(KNOWN_MODULES))
        )
    verl_dir = verl_package_dir()
    rel_dir, config_name = KNOWN_MODULES[module]
    module_dir = os.path.join(verl_dir, *module.split(".")[1:-1])
    config_dir = os.path.join(verl_dir, rel_dir)
    overrides: list[Override] = []
    notes: list[Finding] = []
    hydra_overrides: list[Override] = []
    i = 3
    while i < len(argv):
        arg = argv[i]
        flag: str | None = None
        value = ""
        for long, short in (("--config-path", "-cp"), ("--config-name", "-cn")):
            if arg in (long, short):
                if i + 1 >= len(argv):
                    raise LaunchError(f"argv[{i}] {arg} has no value")
                flag, value = long, argv[i + 1]
                i += 1
            elif arg.startswith(long + "=") or arg.startswith(short + "="):
                flag, value = long, arg.split("=", 1)[1]
        if flag == "--config-path":
            value = value.strip("'\"")
            config_dir = value if os.path.isabs(value) else os.path.normpath(os.path.join(module_dir, value))
        elif flag == "--config-name":
            value = value.strip("'\"")
            config_name = value[:-5] if value.endswith(".yaml") else value
        elif arg.startswith("-"):
            notes.append(
                Finding(
                    "launch.unsupported-flag",
                    ERROR,
                    f"command-line flag {arg!r} is not a Hydra override",
                    Where(position=i, override=arg),
                    "preflight checks single-run launches; flags such as --multirun or --cfg change what verl runs",
                    "remove the flag from the launch argv",
                )
            )
        elif arg.startswith("hydra.") or arg.startswith("+hydra.") or arg.startswith("++hydra."):
            notes.append(
                Finding(
                    "launch.hydra-override",
                    WARNING,
                    "override of Hydra's own settings is not checked against verl's config",
                    Where(position=i, override=arg),
                    "hydra.* keys configure Hydra (output dirs, logging), not verl",
                    "none needed if intended",
                )
            )
            hydra_overrides.append(Override(i, arg))
        else:
            overrides.append(Override(i, arg))
        i += 1
    if not os.path.isfile(os.path.join(config_dir, config_name + ".yaml")):
        raise LaunchError(f"config {config_name!r} not found in {config_dir}")
    return LaunchSpec(
        argv=list(argv),
        module=module,
        config_dir=config_dir,
        config_name=config_name,
        overrides=overrides,
        notes=notes,
        hydra_overrides=hydra_overrides,
    )
