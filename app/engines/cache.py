"""The prompt-result cache: asking an engine the same question twice costs no second forward pass.

Keys are built by the engines from (model name, operation, the exact token ids the model would see,
the operation's parameters), so two prompts that format to the same tokens share an entry and a
change of system message, continuation or label set does not. Values are numpy arrays (or small
immutable results). The eviction is cachetools' LRU, bounded by bytes (`getsizeof`); a lock makes it
safe across the engine's threads; one cache per engine instance.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Any

import numpy as np
from cachetools import LRUCache


def nbytes(value: Any) -> int:
    """Approximate bytes held by a cached value (arrays exactly, containers summed, others 256)."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, tuple | list):
        return sum(nbytes(v) for v in value) + 64
    return 256


class ResultCache:
    """A byte-bounded, thread-safe LRU from hashable keys to results (`max_bytes=0` disables it)."""

    def __init__(self, max_bytes: int = 256 * 2**20) -> None:
        self.max_bytes = max_bytes
        self._lru: LRUCache[Hashable, Any] = LRUCache(maxsize=max_bytes, getsizeof=nbytes)
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any | None:
        with self._lock:
            return self._lru.get(key)

    def put(self, key: Hashable, value: Any) -> None:
        if nbytes(value) > self.max_bytes:
            return  # larger than the whole cache: not kept
        with self._lock:
            self._lru[key] = value

    def clear(self) -> None:
        with self._lock:
            self._lru.clear()

    def __len__(self) -> int:
        return len(self._lru)

    @property
    def nbytes(self) -> int:
        return int(self._lru.currsize)
