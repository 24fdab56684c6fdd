"""`settle_heap`: what start-up left alive is hidden from the cyclic collector; later garbage is not."""

from __future__ import annotations

import gc
import weakref


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> weakref.ref[_Node]:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_settle_heap_freezes_start_up_objects_and_still_collects_later_cycles() -> None:
    from engram.runtime.heap import settle_heap

    gc.unfreeze()
    try:
        start_up = _cycle()  # garbage from start-up: collected before the freeze
        kept = [_Node() for _ in range(1000)]  # alive at start-up: frozen
        settle_heap()
        assert start_up() is None
        assert gc.get_freeze_count() >= len(kept)
        later = _cycle()  # a request's garbage: the collector still sees it
        assert later() is not None
        gc.collect()
        assert later() is None
    finally:
        gc.unfreeze()
