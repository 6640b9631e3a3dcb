"""The patch module's switches follow the registry's rules: ``VLGRPO_POS_EMBED_TRITON`` and
``VLGRPO_POS_EMBED_CACHE_MB`` are rows of python/src/vlgrpo/environment.tsv, so the value an entrypoint accepts is
the value the patch reads the same way, and one it refuses the patch refuses too."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from vlgrpo import environment
from vlgrpo.patches import qwen3_vl_pos_embed as pe


@pytest.mark.parametrize("raw", ["false", "False", "0"])
def test_triton_switch_off_by_every_false_the_entrypoints_accept(raw, monkeypatch):
    calls = []
    monkeypatch.setenv("VLGRPO_POS_EMBED_TRITON", raw)
    monkeypatch.setattr(pe, "_TRITON", None)
    monkeypatch.setattr(pe, "_define_triton", lambda: calls.append("built") or object())
    assert pe._triton() is False
    assert calls == [], f"{raw!r}: the Triton kernel was still built"


@pytest.mark.parametrize("raw", ["true", "1", ""])
def test_triton_switch_on(raw, monkeypatch):
    kernel = object()
    monkeypatch.setenv("VLGRPO_POS_EMBED_TRITON", raw)
    monkeypatch.setattr(pe, "_TRITON", None)
    monkeypatch.setattr(pe, "_define_triton", lambda: kernel)
    assert pe._triton() is kernel


@pytest.mark.parametrize("raw,mib", [("0", 0), ("0.5", 0.5), ("64", 64), ("", 64), ("65536", 65536)])
def test_cache_bound_in_mib(raw, mib, monkeypatch):
    monkeypatch.setenv("VLGRPO_POS_EMBED_CACHE_MB", raw)
    assert pe._env_cache_bytes() == int(mib * (1 << 20))


@pytest.mark.parametrize("raw", ["abc", "-1", "65537", "1e9", "nan", "inf", " 1"])
def test_cache_bound_refused_as_the_entrypoints_refuse_it(raw, monkeypatch):
    monkeypatch.setenv("VLGRPO_POS_EMBED_CACHE_MB", raw)
    with pytest.raises(ValueError, match="VLGRPO_POS_EMBED_CACHE_MB"):
        pe._env_cache_bytes()
    row = environment.setting_row("VLGRPO_POS_EMBED_CACHE_MB", "fa")
    with pytest.raises(ValueError):
        environment.validate(row, raw)


def test_both_are_settings_of_every_entrypoint_and_the_patches():
    for name in ("VLGRPO_POS_EMBED_TRITON", "VLGRPO_POS_EMBED_CACHE_MB"):
        for owner in ("fa", "vo", "node", "patches"):
            assert environment.setting_row(name, owner) is not None, (name, owner)
