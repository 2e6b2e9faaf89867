"""Issue 20 M3: the inline executor's FairQueue hands work to the tenant served least recently."""

from __future__ import annotations

import threading

from app.jobs.fair_queue import FairQueue


def _drain(queue: FairQueue) -> list[str]:
    stopping = threading.Event()
    out = []
    while len(queue):
        out.append(queue.get(stopping))
    return out


def test_a_backlog_gets_one_turn_per_round() -> None:
    queue = FairQueue()
    for i in range(5):
        queue.put("flood", f"f{i}")
    assert queue.get(threading.Event()) == "f0"  # flood's first audit runs
    queue.put("well", "w0")  # arrives behind a backlog of 4
    queue.put("other", "o0")
    queue.put("other", "o1")
    assert _drain(queue) == ["w0", "o0", "f1", "o1", "f2", "f3", "f4"]


def test_a_tenant_whose_queue_emptied_keeps_its_turn() -> None:
    """The flood's queue was empty when its first audit was taken (its next ones were still being sent):
    a newcomer still goes before the rest of the flood."""
    queue = FairQueue()
    queue.put("flood", "f0")
    assert queue.get(threading.Event()) == "f0"
    for i in range(1, 4):
        queue.put("flood", f"f{i}")
    queue.put("well", "w0")
    assert _drain(queue) == ["w0", "f1", "f2", "f3"]


def test_get_returns_none_once_stopping() -> None:
    stopping = threading.Event()
    stopping.set()
    assert FairQueue().get(stopping) is None
