"""Longest-cached-prefix KV reuse: a store of KV caches of token sequences already run, and the order
in which to run new sequences so each one reuses the longest prefix any of them has.

Why it is exact. In a causal LM the keys and values at position t depend only on tokens 0..t, so the
KV cache of a sequence `c`, cut after its first r tokens, is the KV cache of any sequence that starts
with c[:r]. A new sequence s then needs only its last len(s) − r tokens fed, with r the longest common
token-id prefix of s with a stored sequence (token-level, so tokenization boundaries are exact).

What it saves. ICLInf's k + 1 prompts (001 Eq. 4) are the full context S and the k leave-one-out
contexts S ∖ e_i; S ∖ e_i shares with S everything before exemplar i (position pos_i). Run S first and
keep its cache, and the k others cost Σ_i (L − pos_i) tokens: about (k + 1)L/2 in all instead of
(k + 1)L. A label continuation (prompt + label tokens) reuses its whole prompt; a DP synthetic
generation step (prompt + tokens so far) reuses the previous step's sequence.

Pure Python + numpy here; the engine supplies the tensors (per layer (keys, values), each of shape
(1, heads, n, head_dim)) and runs the model.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

Ids = tuple[int, ...]
LayerKV = list[tuple[Any, Any]]  # per layer (keys, values), each (1, heads, n, head_dim)


def lcp(a: Ids, b: Ids, limit: int | None = None) -> int:
    """Longest common prefix length of two token sequences, at most `limit`."""
    n = min(len(a), len(b)) if limit is None else min(len(a), len(b), limit)
    if n <= 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if diff.size else n


def _kv_nbytes(layers: LayerKV) -> int:
    return sum(int(k.nelement() * k.element_size() + v.nelement() * v.element_size()) for k, v in layers)


class KVStore:
    """A byte-bounded LRU from token sequences to their KV caches (`max_bytes = 0` keeps nothing).

    Keys are also kept sorted, so the stored sequence with the longest common prefix with a query is
    one of its two neighbours in lexicographic order (`longest_prefix` is O(log n) comparisons).
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[Ids, tuple[LayerKV, int]] = OrderedDict()
        self._sorted: list[Ids] = []
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, ids: object) -> bool:
        return ids in self._items

    @property
    def nbytes(self) -> int:
        return self._bytes

    def clear(self) -> None:
        self._items.clear()
        self._sorted.clear()
        self._bytes = 0

    def put(self, ids: Ids, layers: LayerKV) -> None:
        """Keep the KV cache of `ids` (its full length); evict the least recently used beyond max_bytes."""
        size = _kv_nbytes(layers)
        if size > self.max_bytes:
            return
        if ids in self._items:
            self._bytes -= self._items.pop(ids)[1]
        else:
            insort(self._sorted, ids)
        self._items[ids] = (layers, size)
        self._bytes += size
        while self._bytes > self.max_bytes:
            old, (_, freed) = self._items.popitem(last=False)
            self._sorted.pop(bisect_left(self._sorted, old))
            self._bytes -= freed

    def get(self, ids: Ids) -> LayerKV:
        """The stored KV cache of `ids` (marks it recently used). Crop it with `[..., :r, :]`."""
        self._items.move_to_end(ids)
        return self._items[ids][0]

    def longest_prefix(self, ids: Ids, limit: int) -> tuple[int, Ids | None]:
        """(r, key): the stored sequence `key` sharing the longest token prefix with `ids`, r ≤ limit
        tokens of it; (0, None) when nothing is stored."""
        return _best_neighbour(self._sorted, ids, limit, exclude_self=False)


def _best_neighbour(
    ordered: Sequence[Ids], ids: Ids, limit: int, exclude_self: bool
) -> tuple[int, Ids | None]:
    """The element of the sorted `ordered` with the longest common prefix with `ids` (capped at limit).

    For sorted sequences lcp(ids, ordered[j]) is largest at the insertion point's neighbours."""
    j = bisect_left(ordered, ids)
    candidates = []
    if j > 0:
        candidates.append(ordered[j - 1])
    if j < len(ordered):
        if ordered[j] != ids or not exclude_self:
            candidates.append(ordered[j])
        elif j + 1 < len(ordered):
            candidates.append(ordered[j + 1])
    best, key = 0, None
    for c in candidates:
        r = lcp(ids, c, limit)
        if key is None or r > best:
            best, key = r, c
    return best, key


def next_wave(
    seqs: Sequence[Ids],
    caps: Sequence[int],
    storable: Sequence[bool],
    available: Sequence[int],
    min_gain: int,
) -> list[int]:
    """Which of the (distinct) sequences still to run should run now, as one wave of batches.

    `caps[i]`: at most that many tokens of sequence i may come from a cache (len − positions whose
    logits are needed); `available[i]`: the prefix the store already offers it; `storable[i]`: its
    cache will be kept for others. Sequence i *waits* when another storable sequence still to run
    would offer it at least `min_gain` more tokens than the store does. The wave is every sequence
    that does not wait, plus, to break ties among those that wait on each other (S and S ∖ e_{k−1}
    share almost everything), the first waiting storable sequence in the caller's order — and any
    later one that gains nothing from those already chosen (another cluster). The caller's order
    thus decides who goes first (the iclinf kind passes the full context first). No two sequences
    of a wave could have shared min_gain tokens more by waiting, so with min_gain = 1 and
    everything kept, the tokens fed are the size of the token trie of the set (each distinct
    prefix computed once). Every wave is non-empty, so the loop ends.
    """
    n = len(seqs)
    partners = sorted(seqs[i] for i in range(n) if storable[i])
    want = [
        max(available[i], _best_neighbour(partners, seqs[i], caps[i], exclude_self=True)[0]) for i in range(n)
    ]
    ready = {i for i in range(n) if want[i] - available[i] < min_gain}
    breakers: list[int] = []
    for i in range(n):
        if i in ready or not storable[i]:
            continue
        shared = [lcp(seqs[i], seqs[b], caps[i]) for b in breakers]
        if any(want[i] - r < min_gain or r - available[i] >= min_gain for r in shared):
            continue  # once that breaker has run, i stops waiting, or at least has more to reuse
        breakers.append(i)
    wave = sorted(ready.union(breakers))
    return wave or list(range(n))
