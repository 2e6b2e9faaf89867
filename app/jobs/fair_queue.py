"""Work waiting per tenant, handed out in turns: the inline executor's audits and the inline planner's plans."""

from __future__ import annotations

import threading
from collections import deque
from typing import Any


class FairQueue:
    """Waiting work per tenant, handed out to the tenant served least recently (thread-safe). A tenant
    that arrives with nothing waiting goes first, and a tenant with a backlog of hundreds gets one turn in
    each round like a tenant with one audit: another tenant's audit waits for the ones running, not the
    backlog. (When a tenant was last served is kept for REMEMBERED tenants, the longest idle forgotten.)"""

    REMEMBERED = 4096

    def __init__(self) -> None:
        self._queues: dict[str, deque[Any]] = {}
        self._served_at: dict[str, int] = {}
        self._turns = 0
        self._ready = threading.Condition()

    def put(self, tenant_id: str, item: Any) -> None:
        with self._ready:
            self._queues.setdefault(tenant_id, deque()).append(item)
            self._ready.notify()

    def get(self, stopping: threading.Event, poll: float = 0.5) -> Any | None:
        """The next item in turn, waiting for one; None once `stopping` is set."""
        with self._ready:
            while not self._queues:
                if stopping.is_set():
                    return None
                self._ready.wait(poll)
            if stopping.is_set():
                return None
            tenant_id = min(self._queues, key=lambda t: self._served_at.get(t, -1))
            queue = self._queues[tenant_id]
            item = queue.popleft()
            self._turns += 1
            self._served_at[tenant_id] = self._turns
            if not queue:
                del self._queues[tenant_id]
            if len(self._served_at) > self.REMEMBERED:  # forget the longest-idle tenants with nothing waiting
                idle = sorted(
                    (t for t in self._served_at if t not in self._queues), key=self._served_at.__getitem__
                )
                for tenant in idle[: len(idle) // 2]:
                    del self._served_at[tenant]
            return item

    def wake_all(self) -> None:
        with self._ready:
            self._ready.notify_all()

    def __len__(self) -> int:
        with self._ready:
            return sum(len(q) for q in self._queues.values())
