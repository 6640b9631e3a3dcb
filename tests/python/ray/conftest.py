"""Fixtures for the real-Ray tests (helpers live in ray_harness.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("ray")

from ray_harness import Cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("ray"))
    try:
        yield c
    finally:
        problems = c.close()
        assert not problems, problems
