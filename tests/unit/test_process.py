"""The process tuning of gateway/process.py: applied once, and by building the app (not only
by ``lakegate serve``)."""

from __future__ import annotations

import ctypes
import resource
from pathlib import Path

import pytest

import gateway.app
from gateway.cli import open_files_warning
from gateway.process import raise_open_files_limit, tune_malloc
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


def test_the_open_files_limit_is_raised_to_the_hard_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    limits = {resource.RLIMIT_NOFILE: (1024, 524288)}
    monkeypatch.setattr(resource, "getrlimit", lambda which: limits[which])
    monkeypatch.setattr(resource, "setrlimit", lambda which, value: limits.__setitem__(which, value))
    assert raise_open_files_limit() == 524288 and limits[resource.RLIMIT_NOFILE] == (524288, 524288)


def test_an_open_files_limit_that_cannot_be_raised_is_answered_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(which: int, value: tuple[int, int]) -> None:
        raise ValueError("not allowed")

    monkeypatch.setattr(resource, "getrlimit", lambda which: (1024, 4096))
    monkeypatch.setattr(resource, "setrlimit", refuse)
    assert raise_open_files_limit() == 1024


def test_serve_warns_when_the_open_files_limit_leaves_no_room_for_max_connections() -> None:
    assert open_files_warning(1024, 1000) is not None and "LAKEGATE_MAX_CONNECTIONS" in (open_files_warning(1024, 1000) or "")
    assert open_files_warning(524288, 1000) is None
