"""Write counts in shared memory, so that a kept answer to a poll (app.api.poll) is served only while
no write that could change it has begun since it was read.

A writer is a slot: 0 is the API process (any transaction that writes: its sessions do not say which
audit), 1 + i the inline executor's worker process i (which writes only the audit it runs). Each slot counts
writing transactions begun (before COMMIT makes their writes visible) and ended (once the transaction is
over, committed or not). A reader stamps before its database read; what it read is current while the
begun count of the slots it depends on is unchanged and none of them had a commit in flight at the stamp.
The counts are a `RawArray`, written by one process per slot and read by the API process without a
message or a lock.
"""

from __future__ import annotations

import multiprocessing
import threading
from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import Session, SessionTransaction

_WROTE = "iclaudit_wrote"  # session.info: this transaction sent a statement that may write
_COUNTED = "iclaudit_write_counted"  # session.info: this transaction counted as begun


class WriteCounts:
    """Begun and ended commit counts per slot, shared with the worker processes."""

    def __init__(self, slots: int, ctx: Any = None, counts: Any = None) -> None:
        self.counts = counts if counts is not None else (ctx or multiprocessing).RawArray("q", 2 * slots)
        self._lock = threading.Lock()

    def begun(self, slot: int) -> int:
        return int(self.counts[2 * slot])

    def stamp(self, slot: int) -> int | None:
        """The slot's begun count, or None while one of its writes is in flight (begun read first: a write
        begun after it changes the count a later stamp reads)."""
        begun = self.counts[2 * slot]
        return int(begun) if self.counts[2 * slot + 1] == begun else None

    def begin(self, slot: int) -> None:
        with self._lock:
            self.counts[2 * slot] += 1

    def end(self, slot: int) -> None:
        with self._lock:
            self.counts[2 * slot + 1] += 1

    def reset(self, slot: int) -> None:
        """The slot's writer died: nothing of it is in flight any more."""
        with self._lock:
            self.counts[2 * slot] += 1
            self.counts[2 * slot + 1] = self.counts[2 * slot]

    def listen(self, slot: int) -> Any:
        """Count this process's transactions that write, under `slot` (every `Session`): begun just before
        COMMIT (a write is invisible to other connections until then) or at a flush, ended when the
        transaction is over. Returns `unlisten`."""

        def statement(state: Any) -> None:
            if not state.is_select:  # an ORM or Core UPDATE, INSERT, DELETE, or text: may write
                state.session.info[_WROTE] = True

        def before_commit(session: Session) -> None:
            if session.info.get(_WROTE) or session.new or session.dirty or session.deleted:
                self._begin_once(session, slot)

        hooks: list[tuple[str, Any]] = [
            ("do_orm_execute", statement),
            ("before_commit", before_commit),
            ("before_flush", lambda session, _ctx, _instances: self._begin_once(session, slot)),
            ("after_transaction_end", lambda session, txn: self._after_end(session, txn, slot)),
        ]
        for name, hook in hooks:
            event.listen(Session, name, hook)

        def unlisten() -> None:
            for name, hook in hooks:
                event.remove(Session, name, hook)

        return unlisten

    def _begin_once(self, session: Session, slot: int) -> None:
        if not session.info.get(_COUNTED):
            session.info[_COUNTED] = True
            self.begin(slot)

    def _after_end(self, session: Session, transaction: SessionTransaction, slot: int) -> None:
        if transaction.parent is None:
            session.info.pop(_WROTE, None)
            if session.info.pop(_COUNTED, False):
                self.end(slot)
