"""A Ray job config (RAY_JOB_CONFIG_JSON_ENV_VAR) typed as Ray 2.48.0 reads it, and its VLGRPO_* env_vars.

References: Ray's own ``JobConfig.from_json`` + ``_get_proto_job_config`` and ``RuntimeEnvConfig`` (what
``ray.init`` runs, after a clean preflight today) raise for the same documents the checker refuses; Ray's
``RuntimeEnv`` sets env_vars in every worker, so a patch switch there must equal the launch's own.
The attack list's Ray job config cases, and more of each kind.
"""

from __future__ import annotations

import json

import pytest

from vlgrpo import environment


def _problems(doc, monkeypatch=None):
    return environment.check_ray_job_config(json.dumps(doc) if not isinstance(doc, str) else doc)


def _ray_accepts(doc) -> bool:
    from ray.job_config import JobConfig
    from ray.runtime_env import RuntimeEnvConfig

    try:
        jc = JobConfig.from_json(doc)
        jc._get_proto_job_config()
        if "config" in (doc.get("runtime_env") or {}):
            RuntimeEnvConfig(**doc["runtime_env"]["config"])
        return True
    except Exception:  # Ray's own verdict
        return False


@pytest.mark.parametrize(
    "doc",
    [
        {"metadata": ["a", "b"]},
        {"metadata": {"k": {"nested": 1}}},
        {"metadata": {"k": 1}},
        {"metadata": "x"},
        {"runtime_env": {"config": {"setup_timeout_seconds": "soon"}}},
        {"runtime_env": {"config": {"eager_install": "yes"}}},
        {"runtime_env": {"config": {"setup_timeout_seconds": 0}}},
        {"runtime_env": {"config": {"log_files": "a.log"}}},
    ],
)
def test_what_ray_rejects_at_ray_init_is_refused_before(doc):
    assert not _ray_accepts(doc)
    assert _problems(doc), doc


@pytest.mark.parametrize(
    "doc",
    [
        {"metadata": {"team": "rl"}},
        {"runtime_env": {"config": {"setup_timeout_seconds": 600, "eager_install": True}}},
        {"runtime_env": {"config": {"setup_timeout_seconds": -1, "log_files": ["a.log"]}}},
    ],
)
def test_what_ray_accepts_passes(doc):
    assert _ray_accepts(doc)
    assert _problems(doc) == []


@pytest.mark.parametrize(
    "env_vars,fragment",
    [
        (
            {"VLGRPO_PATCHES_DISABLED": "checkpoint.manifest,rollout.server_loopback", "VLGRPO_PATCHES": "no"},
            "VLGRPO_PATCHES",
        ),
        ({"VLGRPO_PATCHES": "off"}, "the workers would run with VLGRPO_PATCHES='off'"),
        ({"VLGRPO_PATCHES_STRICT": "nope"}, "not a valid value"),
        ({"VLGRPO_PROBE_DEVICE_MODULE": "antigravity"}, "imports the module"),
        ({"VLGRPO_NOT_A_SETTING": "x"}, "not a setting"),
        ({"\ud800NCCL": "x"}, "not a valid environment variable name"),
        ({"BAD-NAME": "x"}, "not a valid environment variable name"),
    ],
)
def test_env_vars_vlgrpo_names_are_checked(monkeypatch, env_vars, fragment):
    for n in ("VLGRPO_PATCHES", "VLGRPO_PATCHES_DISABLED", "VLGRPO_PATCHES_STRICT"):
        monkeypatch.delenv(n, raising=False)
    problems = _problems({"runtime_env": {"env_vars": env_vars}})
    assert any(fragment in why for _, why, _ in problems), problems


def test_settings_the_entrypoint_reads_pass_as_before(monkeypatch):
    # a submitted job's driver (the entrypoint) gets the same env_vars and validates them itself
    assert _problems({"runtime_env": {"env_vars": {"VLGRPO_LR": "1e-5", "VLGRPO_TRAINER_NNODES": "2"}}}) == []


def test_a_patch_switch_equal_to_the_launchs_passes(monkeypatch):
    monkeypatch.setenv("VLGRPO_PATCHES_DISABLED", "qwen3_vl.vision_pos_embed")
    assert _problems({"runtime_env": {"env_vars": {"VLGRPO_PATCHES_DISABLED": "qwen3_vl.vision_pos_embed"}}}) == []


def test_surrogate_names_print_through_the_cli():
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "vlgrpo.environment", "check-ray-job-config"],
        input='{"runtime_env": {"env_vars": {"\\ud800NCCL": "x"}}}',
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "\\ud800NCCL: not a valid environment variable name" in r.stdout, r.stderr
    assert "Traceback" not in r.stderr


def test_ray_expands_dollar_names_after_the_check_so_they_are_refused():
    """The fresh review's PATH=/x/$LANG with LANG=../evil: Ray's own update_envs (ray/_private/utils.py) expands it
    when it starts a worker; the checker judged the literal text."""
    import os

    from ray._private.utils import update_envs

    saved = dict(os.environ)
    try:
        update_envs({"LANG": "../attack-other", "PATH": "/tmp/attack-w/$LANG:/usr/bin:/bin"})
        assert os.environ["PATH"] == "/tmp/attack-w/../attack-other:/usr/bin:/bin"  # the canary fires in Ray
    finally:
        os.environ.clear()
        os.environ.update(saved)
    for env_vars in (
        {"LANG": "../x", "PATH": "/tmp/$LANG:/usr/bin"},
        {"LANG": "this.x", "PYTHONWARNINGS": "ignore::$LANG"},
        {"HOME": "/tmp/${LANG}"},
        {"NCCL_DEBUG": "$X"},
    ):
        problems = _problems({"runtime_env": {"env_vars": env_vars}})
        assert any("Ray expands $NAME" in why for _, why, _ in problems), (env_vars, problems)


@pytest.mark.parametrize(
    "names,ok",
    [
        (["/tmp/x.log"], False),
        (["../../../tmp/y"], False),
        (["a/b.log"], False),
        ([".."], False),
        (["worker.log", "raylet.out"], True),
    ],
)
def test_log_files_are_plain_names_of_rays_log_folder(names, ok):
    assert (_problems({"runtime_env": {"config": {"log_files": names}}}) == []) == ok


@pytest.mark.parametrize(
    "name,value,ok",
    [
        ("RAY_ADDRESS", "203.0.113.9:6379", False),
        ("PYTHONSAFEPATH", "", False),
        ("PYTHONNOUSERSITE", "0", False),
        ("PYTHONSAFEPATH", "1", True),
    ],
)
def test_values_the_launch_sets_itself(name, value, ok):
    assert (_problems({"runtime_env": {"env_vars": {name: value}}}) == []) == ok
