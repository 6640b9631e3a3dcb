"""Patch ``reward.tokenizer_remote_code``: verl's reward loop loads the tokenizer without remote code (field case
B17).

verl v0.8.0's ``RewardLoopWorker._init_reward_fn`` (``verl/experimental/reward_loop/reward_loop.py``; the same in
v0.7.1 and v0.9.1) loads the actor's tokenizer (``actor_rollout_ref.model.tokenizer_path``, else ``.path``) and the
reward model's with ``hf_tokenizer(path, trust_remote_code=True)``, a literal, whatever
``actor_rollout_ref.model.trust_remote_code`` says: an ``auto_map`` in the folder's ``tokenizer_config.json`` (or
``config.json``) then imports and runs the folder's ``*.py`` (or a Hub repository's). The manager places one worker
on every node of the cluster, round robin (``RewardLoopManager._init_reward_loop_workers``: ``NodeAffinity`` over
``ray.nodes()``), and each reads the model folder at that path on its own node; the launch checks the folder of the
node it runs on (the preflight's ``model.auto-map``, ``model.python-file`` and ``model.untrusted``), not the other
nodes' copies. The wrapper of the ``hf_tokenizer`` the reward loop module calls passes ``trust_remote_code=False``:
the value of ``actor_rollout_ref.model.trust_remote_code`` in every launch the preflight lets through
(``security.trust-remote-code`` refuses ``True``). A folder that asks for remote code then fails to load in the
worker (transformers raises ValueError) instead of running it.

Standard library at import (the registry imports this module at interpreter start).
"""

import sys

_REWARD_LOOP = "verl.experimental.reward_loop.reward_loop"

RECORD = {
    "id": "reward.tokenizer_remote_code",
    "title": "the reward loop loads the tokenizer with trust_remote_code=True on every node: off (B17)",
    "summary": (
        "verl's reward loop workers (one per node) load the model folder's tokenizer with trust_remote_code=True "
        "whatever the config says, so an auto_map in that node's copy of the folder runs its Python code; the "
        "patch passes trust_remote_code=False, the config's value in every launch the preflight allows"
    ),
    "upstream": "field case B17 (no upstream fix; verl v0.7.1-v0.9.1 reward_loop.py)",
    "safety": "code execution: without it a reward loop worker runs the Python code an auto_map of its node's model "
    "folder names",
    "applies_when": (
        "verl's reward loop module calls hf_tokenizer with trust_remote_code=True as a literal (verl v0.7.1-0.9.1)"
    ),
    "targets": ((_REWARD_LOOP, "hf_tokenizer"),),
    "detector": __name__ + ":is_faulty",
    "replacement": __name__ + ":make_hf_tokenizer",
    "wraps": True,
    "verify": __name__ + ":verify",
    "recheck_after": (),
}


def is_faulty(func, module_source=None):
    """``(faulty, reason)`` for the ``hf_tokenizer`` bound in verl's reward loop module: faulty when that module (its
    source in ``module_source``, else the imported module's) calls ``hf_tokenizer`` with the keyword
    ``trust_remote_code=True`` (the constant, not a config value)."""
    import ast
    import inspect

    if module_source is None:
        module = sys.modules.get(_REWARD_LOOP)
        if module is None:
            return False, f"{_REWARD_LOOP} is not imported"
        module_source = inspect.getsource(module)
    calls = [
        n
        for n in ast.walk(ast.parse(module_source))
        if isinstance(n, ast.Call)
        and getattr(n.func, "id", getattr(n.func, "attr", None)) == "hf_tokenizer"
        and any(
            k.arg == "trust_remote_code" and isinstance(k.value, ast.Constant) and k.value.value is True
            for k in n.keywords
        )
    ]
    if calls:
        return True, (
            f"the reward loop loads its tokenizer with trust_remote_code=True whatever the config says (line "
            f"{calls[0].lineno}; {len(calls)} call(s)): an auto_map in the model folder runs its code"
        )
    return False, "the reward loop module passes no literal trust_remote_code=True to hf_tokenizer"


def make_hf_tokenizer(original):
    """Wrap ``hf_tokenizer(name_or_path, correct_pad_token=True, correct_gemma2=True, **kwargs)`` (verl v0.8.0
    ``verl/utils/tokenizer.py``) as the reward loop module calls it: the same call with ``trust_remote_code=False``;
    returns what the original returns (a transformers tokenizer) and raises what it raises (transformers' ValueError
    for a folder that asks for remote code)."""

    def hf_tokenizer(name_or_path, *args, **kwargs):
        kwargs["trust_remote_code"] = False
        return original(name_or_path, *args, **kwargs)

    return hf_tokenizer


make_hf_tokenizer.__vlgrpo_code__ = make_hf_tokenizer(None).__code__


def verify() -> None:
    """The wrapper hands the original ``trust_remote_code=False`` whatever the caller passed, keeps the other
    arguments and returns the original's result; the detector flags verl's literal and not a call that passes the
    config's value. Raises ``AssertionError``."""
    seen = []

    def original(name_or_path, correct_pad_token=True, correct_gemma2=True, **kwargs):
        seen.append((name_or_path, correct_pad_token, kwargs))
        return "tokenizer"

    wrapped = make_hf_tokenizer(original)
    assert wrapped("/m", trust_remote_code=True) == "tokenizer"
    assert seen[-1] == ("/m", True, {"trust_remote_code": False}), seen[-1]
    wrapped("/m", False, use_fast=True)
    assert seen[-1] == ("/m", False, {"use_fast": True, "trust_remote_code": False}), seen[-1]
    faulty = (
        "from verl.utils import hf_tokenizer\n"
        "class W:\n"
        "    def _init_reward_fn(self):\n"
        "        self.input_tokenizer = hf_tokenizer(p, trust_remote_code=True)\n"
    )
    assert is_faulty(None, faulty)[0]
    fixed = faulty.replace("trust_remote_code=True", "trust_remote_code=self.config.model.trust_remote_code")
    assert not is_faulty(None, fixed)[0]
