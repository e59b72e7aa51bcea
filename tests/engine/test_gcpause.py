"""The GC pause used around archive loading and index building."""

from __future__ import annotations

import gc

from connector.engine.format.gcpause import gc_paused


def test_pause_nests_and_restores() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause is still running
    assert gc.isenabled()


def test_pause_keeps_a_disabled_collector_disabled() -> None:
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_pause_ends_on_error() -> None:
    try:
        with gc_paused():
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert gc.isenabled()
