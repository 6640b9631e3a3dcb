"""The launch takes VLGRPO_OVERRIDES_FILE's overrides only behind the checker's own verdict (attacker review: a
``python3`` that exited 0 and printed nothing dropped the file silently); exit 1 otherwise, nothing started."""

from __future__ import annotations

import pytest

from vlgrpo.launch import entry


@pytest.mark.parametrize(
    ("out", "taken"),
    [
        (b"", None),  # a stand-in that exits 0 and prints nothing
        (b"trainer.total_epochs=3\0", None),  # stopped before its verdict
        (b"trainer.total_epochs=3\0vlgrpo-overrides-accepted 2\0", None),  # a count that does not match
        (b"vlgrpo-overrides-accepted 0", None),  # not NUL-terminated: cut off
        (b"vlgrpo-overrides-accepted 0\0", []),
        (b"trainer.total_epochs=3\0vlgrpo-overrides-accepted 1\0", ["trainer.total_epochs=3"]),
    ],
)
def test_the_overrides_count_only_behind_the_checkers_verdict(out, taken):
    from types import SimpleNamespace

    launch = entry.Launch("fa", [("PATH", "/usr/bin:/bin")], "/proc/self/environ", True, entry.Hooks())
    launch.st.values["OVERRIDES_FILE"] = "/data/overrides.yaml"
    launch.recipe_file = SimpleNamespace(program=["python3", "-m", "verl.trainer.main_ppo"], fixed="", template=[])
    said = []
    launch.children = SimpleNamespace(run=lambda cmd, env, capture: (0, out), say=said.append)
    if taken is None:
        with pytest.raises(entry.Exit) as end:
            launch.overrides()
        assert end.value.code == entry.EXIT_FAILURE and "without its verdict" in said[0]
    else:
        assert launch.overrides() == taken and said == []
