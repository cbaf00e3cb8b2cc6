"""The process tuning of gateway/process.py: applied once, and by building the app (not only
by ``lakegate serve``)."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

import gateway.app
from gateway.process import tune_malloc
from gateway.settings import Settings

REPO = Path(__file__).resolve().parents[2]


def test_tune_malloc_applies_once_on_glibc() -> None:
    try:
        ctypes.CDLL("libc.so.6")  # (ctypes.util.find_library would run ldconfig: not in this tier)
    except OSError:
        pytest.skip("not glibc")
    assert tune_malloc() is True
    assert tune_malloc() is True
    assert tune_malloc.cache_info().misses <= 1  # later calls only answer


def test_building_the_app_tunes_malloc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[None] = []
    monkeypatch.setattr(gateway.app, "tune_malloc", lambda: calls.append(None) or True)
    settings = Settings.load(_env_file=None, tenants_file=REPO / "deploy" / "tenants.example.toml", lake=f"dir:{tmp_path}", cache=False)
    gateway.app.LakegateApp(settings)
    assert calls == [None]
