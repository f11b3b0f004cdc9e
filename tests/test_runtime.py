"""mt.runtime: the malloc settings the entry points apply."""

from __future__ import annotations

import sys

import pytest

from mt import runtime


def test_tuning_can_be_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "_applied", False)
    monkeypatch.setenv("MT_MALLOC_TUNING", "0")
    assert runtime.tune_malloc() is False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_tuning_applies_on_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "_applied", False)
    monkeypatch.delenv("MT_MALLOC_TUNING", raising=False)
    assert runtime.tune_malloc() is True
    assert runtime.tune_malloc() is True  # idempotent
