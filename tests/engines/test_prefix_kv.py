"""The longest-cached-prefix machinery without a model: the KV store and the wave planner."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from app.engines.prefix_kv import KVStore, lcp, next_wave


def kv(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A fake 2-layer KV cache of n positions, (1, 1, n, 2) float32: 32 bytes per position."""
    return [(torch.zeros(1, 1, n, 2), torch.zeros(1, 1, n, 2)) for _ in range(2)]


def test_lcp() -> None:
    assert lcp((1, 2, 3), (1, 2, 4)) == 2
    assert lcp((1, 2, 3), (1, 2, 3, 4)) == 3
    assert lcp((1, 2, 3), (1, 2, 3, 4), limit=1) == 1
    assert lcp((), (1,)) == 0
    assert lcp((5,), (1,)) == 0


seqs = st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=8).map(tuple), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(stored=seqs, query=st.lists(st.integers(0, 3), max_size=8).map(tuple), limit=st.integers(0, 9))
def test_longest_prefix_equals_brute_force(stored, query, limit) -> None:
    store = KVStore(max_bytes=10**9)
    for ids in stored:
        store.put(ids, kv(len(ids)))
    r, key = store.longest_prefix(query, limit)
    assert r == max(lcp(query, s, limit) for s in stored)
    assert key in store and lcp(query, key, limit) == r


def test_store_is_a_byte_bounded_lru() -> None:
    store = KVStore(max_bytes=3 * 32 * 4)  # room for three 4-token entries
    for first in range(3):
        store.put((first, 9, 9, 9), kv(4))
    assert store.nbytes == 3 * 32 * 4
    store.get((0, 9, 9, 9))  # now the most recently used
    store.put((5, 9, 9, 9), kv(4))
    assert (1, 9, 9, 9) not in store and (0, 9, 9, 9) in store and len(store) == 3
    assert store.longest_prefix((1, 9), 5)[0] == 0  # the evicted (1, 9, 9, 9) is no source
    store.put((7,) * 40, kv(40))  # larger than the whole budget: not kept
    assert (7,) * 40 not in store and len(store) == 3
    store.clear()
    assert len(store) == 0 and store.nbytes == 0 and store.longest_prefix((0,), 3) == (0, None)
    assert len(KVStore(0)) == 0


def iclinf_prompts(k: int, header: int = 20, block: int = 10, query: int = 6) -> list[tuple[int, ...]]:
    """Token sequences shaped like ICLInf's: header, k exemplar blocks, query; full first, then S ∖ e_i."""
    head = tuple(range(1000, 1000 + header))
    blocks = [tuple(range(100 * (i + 1), 100 * (i + 1) + block)) for i in range(k)]
    tail = tuple(range(50, 50 + query))
    full = head + sum(blocks, ()) + tail
    return [full] + [head + sum(blocks[:i] + blocks[i + 1 :], ()) + tail for i in range(k)]


def simulate(order, caps, storable, min_gain, stored=()):
    """Run next_wave to the end against a store that keeps what runs; return waves and fed tokens."""
    store = KVStore(10**9)
    for ids in stored:
        store.put(ids, kv(len(ids)))
    todo, waves, fed = list(range(len(order))), [], 0
    while todo:
        found = [store.longest_prefix(order[i], caps[i]) for i in todo]
        avail = [r if r >= min_gain else 0 for r, _ in found]
        wave = next_wave(
            [order[i] for i in todo], [caps[i] for i in todo], [storable[i] for i in todo], avail, min_gain
        )
        assert wave, "a wave is never empty"
        waves.append(sorted(todo[w] for w in wave))
        for w in wave:
            fed += len(order[todo[w]]) - avail[w]
            if storable[todo[w]]:
                store.put(order[todo[w]], kv(len(order[todo[w]])))
        todo = [i for j, i in enumerate(todo) if j not in set(wave)]
    return waves, fed


def test_iclinf_waves_run_the_full_context_first_then_every_leave_one_out() -> None:
    k = 5
    prompts = iclinf_prompts(k)
    caps = [len(p) - 1 for p in prompts]
    waves, fed = simulate(prompts, caps, [True] * (k + 1), min_gain=4)
    assert waves == [[0], list(range(1, k + 1))]
    full = prompts[0]
    assert fed == len(full) + sum(len(p) - lcp(p, full) for p in prompts[1:])
    # ≈ (k + 1)L/2 tokens instead of (k + 1)L
    assert fed < 0.6 * sum(len(p) for p in prompts)
    # with the header already stored, S ∖ e_0 (which shares only the header) need not wait
    waves, _ = simulate(prompts, caps, [True] * (k + 1), min_gain=4, stored=[(*full[:20], 7)])
    assert waves == [[0, 1], list(range(2, k + 1))]


def test_label_continuations_wait_for_their_prompt() -> None:
    prompts = iclinf_prompts(2)
    labels = [(*p, 8, 8) for p in prompts]  # prompt + label[:-1], scoring 2 positions, not kept
    order = prompts + labels
    caps = [len(p) - 1 for p in prompts] + [len(x) - 2 for x in labels]
    waves, fed = simulate(order, caps, [True] * 3 + [False] * 3, min_gain=4)
    assert waves[0] == [0]
    wave_of = {i: w for w, wave in enumerate(waves) for i in wave}
    assert all(wave_of[3 + i] > wave_of[i] for i in range(3))  # each continuation after its prompt
    assert fed == len(prompts[0]) + sum(len(p) - lcp(p, prompts[0]) for p in prompts[1:]) + 3 * 2


def test_nothing_waits_when_reuse_is_off() -> None:
    prompts = iclinf_prompts(3)
    caps = [len(p) - 1 for p in prompts]
    assert simulate(prompts, caps, [True] * 4, min_gain=10**9)[0] == [[0, 1, 2, 3]]
    assert simulate(prompts, caps, [False] * 4, min_gain=4)[0] == [[0, 1, 2, 3]]


@settings(max_examples=200, deadline=None)
@given(
    bodies=st.lists(st.lists(st.integers(0, 2), max_size=8), min_size=1, max_size=10),
    data=st.data(),
)
def test_waves_feed_each_distinct_prefix_once(bodies, data) -> None:
    """Random prefix-free sets (a distinct last token each): every sequence runs exactly once; with
    everything kept and min_gain = 1 the tokens fed are exactly the number of distinct prefixes
    (the token trie's size), whatever the order; with some not kept, never more than from scratch."""
    order = [(*body, 50 + i) for i, body in enumerate(bodies)]
    caps = [len(p) - 1 for p in order]
    trie = len({p[:j] for p in order for j in range(1, len(p) + 1)})
    waves, fed = simulate(order, caps, [True] * len(order), min_gain=1)
    assert sorted(i for w in waves for i in w) == list(range(len(order)))
    assert fed == trie
    storable = data.draw(st.lists(st.booleans(), min_size=len(order), max_size=len(order)))
    waves, fed = simulate(order, caps, storable, min_gain=1)
    assert sorted(i for w in waves for i in w) == list(range(len(order)))
    assert trie <= fed <= sum(len(p) for p in order)
