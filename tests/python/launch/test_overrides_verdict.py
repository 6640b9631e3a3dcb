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
    launch.children = SimpleNamespace(run=lambda cmd, env, capture, limit=None: (0, out), say=said.append)
    if taken is None:
        with pytest.raises(entry.Exit) as end:
            launch.overrides()
        assert end.value.code == entry.EXIT_FAILURE and "without its verdict" in said[0]
    else:
        assert launch.overrides() == taken and said == []


def test_a_check_that_hangs_is_stopped_and_said_not_waited_for(capsys):
    """A check child that never ends (TZ naming another user's FIFO once hung the device counter): killed with its
    process group after the limit, exit status 124, a line saying which command and why."""
    import time

    kids = entry.Children("fully-async-grpo.sh")
    t0 = time.monotonic()
    rc, out = kids.run(["sh", "-c", "sleep 60 & sleep 60"], {"PATH": "/usr/bin:/bin"}, capture=True, limit=1)
    assert rc == 124 and out == b"" and time.monotonic() - t0 < 10
    assert "sh -c sleep 60 & sleep 60 did not finish within 1 s (a hang?) and was stopped" in capsys.readouterr().err
    rc, out = kids.run(["sh", "-c", "echo ok"], {"PATH": "/usr/bin:/bin"}, capture=True, limit=5)
    assert (rc, out) == (0, b"ok\n")
