"""Rate limits: per-tenant requests and failed-authentication throttling (429 with Retry-After, in the
API's error shape with the setting that sets it). The body limit (413) is app/api/middleware/body_limit.py.

`Guard`: sliding-window-counter limits (O(1) per hit), keyed by tenant, key id and client address.
Storage: ICLAUDIT_RATE_LIMIT_STORAGE, else the broker's Redis when there is one (so every API process
shares the counts; the `limits` library), else this process's memory (the embedded default:
`LocalWindows`, the same arithmetic in a dict, since `limits`' MemoryStorage starts a timer thread every
10 ms under load, which was a tenth of a poll's CPU).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from limits import RateLimitItem, parse_many
from limits.storage import MemoryStorage, Storage, storage_from_string
from limits.strategies import SlidingWindowCounterRateLimiter

from app.api.errors import TooManyRequests

if TYPE_CHECKING:
    from limits.aio.strategies import RateLimiter as AsyncRateLimiter

    from app.config import Settings

log = logging.getLogger(__name__)

QUOTA_RETRY_SECONDS = 10  # Retry-After when ICLAUDIT_MAX_ACTIVE_AUDITS is reached (a polling hint)
_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass(frozen=True)
class WindowStats:
    reset_time: float
    remaining: int


class LocalWindows:
    """Sliding-window counters in this process's memory, with `limits`' strategy interface (`hit`, `test`,
    `get_window_stats`) and its arithmetic: the previous window's count weighted by the part of it still
    inside the sliding window, plus the current window's count. Thread-safe; entries of windows long past
    are dropped as the table grows."""

    _PRUNE_AT = 10_000

    def __init__(self) -> None:
        self._counts: dict[str, tuple[int, int, int]] = {}  # key → (window index, previous, current)
        self._ends: dict[str, float] = {}  # key → when its counts are all past (two windows after its own)
        self._lock = threading.Lock()
        self._pruned = 0.0

    def _state(self, key: str, expiry: int, now: float) -> tuple[int, int, int]:
        index = int(now // expiry)
        at, previous, current = self._counts.get(key, (index, 0, 0))
        if at == index:
            return index, previous, current
        return index, current if at == index - 1 else 0, 0

    @staticmethod
    def _weighted(previous: int, current: int, expiry: int, now: float) -> float:
        return previous * (1 - (now % expiry) / expiry) + current

    def hit(self, item: RateLimitItem, *identifiers: str, cost: int = 1) -> bool:
        key, expiry, now = item.key_for(*identifiers), item.get_expiry(), time.time()
        with self._lock:
            index, previous, current = self._state(key, expiry, now)
            if math.floor(self._weighted(previous, current, expiry, now)) + cost > item.amount:
                self._counts[key] = (index, previous, current)
                return False
            self._counts[key] = (index, previous, current + cost)
            self._ends[key] = (index + 2) * expiry
            if len(self._counts) > self._PRUNE_AT and now - self._pruned > 1.0:
                self._prune(now)
        return True

    def test(self, item: RateLimitItem, *identifiers: str, cost: int = 1) -> bool:
        key, expiry, now = item.key_for(*identifiers), item.get_expiry(), time.time()
        with self._lock:
            _, previous, current = self._state(key, expiry, now)
        return math.floor(self._weighted(previous, current, expiry, now)) + cost <= item.amount

    def get_window_stats(self, item: RateLimitItem, *identifiers: str) -> WindowStats:
        """When one more hit would be allowed (`reset_time`, epoch seconds) and how many are left now."""
        key, expiry, now = item.key_for(*identifiers), item.get_expiry(), time.time()
        with self._lock:
            index, previous, current = self._state(key, expiry, now)
        remaining = max(0, item.amount - math.floor(self._weighted(previous, current, expiry, now)))
        if current >= item.amount or previous == 0:
            return WindowStats((index + 1) * expiry, remaining)
        # the previous window's weight falls below what the limit leaves: previous·(1 − f) < amount − current
        return WindowStats(index * expiry + expiry * (1 - (item.amount - current) / previous), remaining)

    def _prune(self, now: float) -> None:
        self._pruned = now
        for key in [k for k, end in self._ends.items() if end <= now]:
            del self._ends[key]
            self._counts.pop(key, None)


class BatchedHits:
    """One Redis round trip for the hits of a window that arrive together (one event loop): while a batch
    is in flight the next gathers, and the k hits of one key in a batch are one `hit(cost=k)`. The window
    arithmetic is exact: k hits all pass one after another exactly when `cost=k` passes (the count only
    grows), and when it does not, the batch's hits are sent one by one, each answered as alone."""

    def __init__(self, limiter: AsyncRateLimiter) -> None:
        self.limiter = limiter
        self._pending: dict[tuple[RateLimitItem, tuple[str, ...]], list[asyncio.Future[bool]]] = {}
        self._sender: asyncio.Task[None] | None = None

    async def hit(self, item: RateLimitItem, *identifiers: str) -> bool:
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending.setdefault((item, identifiers), []).append(future)
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._send())
        return await future

    async def _send(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, {}
            await asyncio.gather(
                *(self._settle(item, ids, futures) for (item, ids), futures in batch.items())
            )

    async def _settle(
        self, item: RateLimitItem, ids: tuple[str, ...], futures: list[asyncio.Future[bool]]
    ) -> None:
        hit = self.limiter.hit
        try:
            if await hit(item, *ids, cost=len(futures)):
                answers = [True] * len(futures)
            elif len(futures) == 1:
                answers = [False]
            else:
                answers = [await hit(item, *ids) for _ in futures]
        except Exception as exc:  # the storage is away: each caller decides (Guard lets them through)
            for future in futures:
                if not future.done():
                    future.set_exception(exc)
            return
        for future, allowed in zip(futures, answers, strict=True):
            if not future.done():
                future.set_result(allowed)


@dataclass(frozen=True)
class _Rule:
    items: tuple[RateLimitItem, ...]
    setting: str

    @classmethod
    def of(cls, text: str, setting: str) -> _Rule:
        return cls(tuple(parse_many(text)) if text.strip() else (), setting)


class Guard:
    """Per-tenant rate limits and failed-authentication throttles (sliding-window counters)."""

    _GOOD_KEYS_MAX = 4096

    def __init__(
        self,
        *,
        storage: Storage,
        rate: str,
        write_rate: str,
        auth_failures_per_key: str,
        auth_failures_per_address: str,
        url: str = "memory://",
    ) -> None:
        self.local = isinstance(storage, MemoryStorage)
        self._url = url  # the shared storage's URL, for the event loop's own client (`request_async`)
        self._async: BatchedHits | None = None  # limits.aio's limiter on the same Redis (`request_async`)
        self._limiter: SlidingWindowCounterRateLimiter | LocalWindows = (
            LocalWindows() if self.local else SlidingWindowCounterRateLimiter(storage)
        )
        """Counts in this process's memory: checking a limit costs no I/O (may run on the event loop)."""
        self._rate = _Rule.of(rate, "ICLAUDIT_RATE_LIMIT")
        self._write_rate = _Rule.of(write_rate, "ICLAUDIT_WRITE_RATE_LIMIT")
        self._per_key = _Rule.of(auth_failures_per_key, "ICLAUDIT_AUTH_FAILURE_LIMIT")
        self._per_address = _Rule.of(auth_failures_per_address, "ICLAUDIT_AUTH_FAILURE_ADDRESS_LIMIT")
        # sha256 of keys that authenticated here: they skip the failure throttles, so someone guessing
        # secrets for a key id cannot lock its owner out (the key is still verified on every request).
        self._good: OrderedDict[bytes, None] = OrderedDict()

    @classmethod
    def from_settings(cls, settings: Settings) -> Guard:
        url = settings.rate_limit_storage or settings.broker_url or "memory://"
        storage = storage_from_string(url)
        if not isinstance(storage, Storage):  # an async+… URL: the guard's checks are synchronous
            raise ValueError(f"ICLAUDIT_RATE_LIMIT_STORAGE: {url!r} is an asynchronous storage; drop async+")
        return cls(
            storage=storage,
            rate=settings.rate_limit,
            write_rate=settings.write_rate_limit,
            auth_failures_per_key=settings.auth_failure_limit,
            auth_failures_per_address=settings.auth_failure_address_limit,
            url=url,
        )

    def _retry_after(self, item: RateLimitItem, *keys: str) -> int:
        reset_at = self._limiter.get_window_stats(item, *keys).reset_time
        return math.ceil(reset_at - time.time())

    def _check(self, rule: _Rule, keys: tuple[str, ...], consume: bool, message: str) -> None:
        """Hit (or only test) every window of `rule`; a storage outage lets the request through (logged)."""
        for item in rule.items:
            try:
                allowed = self._limiter.hit(item, *keys) if consume else self._limiter.test(item, *keys)
                retry_after = 0 if allowed else self._retry_after(item, *keys)
            except Exception as exc:  # Redis down: limits are protection, not availability
                log.warning("rate-limit storage unavailable (%s: %s); not limiting", type(exc).__name__, exc)
                return
            if not allowed:
                raise TooManyRequests(
                    f"{message} is limited to {item} ({rule.setting}); retry after Retry-After seconds.",
                    retry_after,
                )

    def request(self, tenant_id: str, method: str) -> None:
        """Count one request of the tenant; TooManyRequests when over ICLAUDIT_RATE_LIMIT (or the write limit)."""
        self._check(self._rate, ("tenant", tenant_id), True, "Too many requests: this tenant")
        if method in _WRITES:
            self._check(self._write_rate, ("tenant-writes", tenant_id), True, "Too many writes: this tenant")

    async def request_async(self, tenant_id: str, method: str) -> None:
        """`request` for a shared (Redis) storage, counted on the event loop (limits.aio, the same keys and
        Lua scripts as the synchronous limiter, so every process and both paths count in one window): a
        poll answered before the stack (app/api/poll.py) needs no thread for its limit. A storage
        outage lets the request through (logged), as `request` does."""
        checks = [(self._rate, ("tenant", tenant_id), "Too many requests: this tenant")]
        if method in _WRITES:
            checks.append((self._write_rate, ("tenant-writes", tenant_id), "Too many writes: this tenant"))
        limiter = self._async_limiter()
        for rule, keys, message in checks:
            for item in rule.items:
                try:
                    allowed = await limiter.hit(item, *keys)
                    retry_after = 0 if allowed else await self._retry_after_async(item, *keys)
                except Exception as exc:  # Redis down: limits are protection, not availability
                    log.warning(
                        "rate-limit storage unavailable (%s: %s); not limiting", type(exc).__name__, exc
                    )
                    return
                if not allowed:
                    raise TooManyRequests(
                        f"{message} is limited to {item} ({rule.setting}); retry after Retry-After seconds.",
                        retry_after,
                    )

    def _async_limiter(self) -> BatchedHits:
        """limits.aio's sliding-window-counter limiter on this guard's Redis, its hits batched (made on
        first use, on the event loop of this process; redis-py's asyncio client)."""
        if self._async is None:
            from limits.aio.strategies import SlidingWindowCounterRateLimiter as AioLimiter

            url = self._url.removeprefix("async+")
            self._async = BatchedHits(
                AioLimiter(storage_from_string(f"async+{url}", implementation="redispy"))
            )
        return self._async

    async def _retry_after_async(self, item: RateLimitItem, *keys: str) -> int:
        reset_at = (await self._async_limiter().limiter.get_window_stats(item, *keys)).reset_time
        return math.ceil(reset_at - time.time())

    def known_good(self, key: str) -> bool:
        """Whether `key` authenticated here lately (`before_authentication` then checks nothing)."""
        return self._digest(key) in self._good

    @staticmethod
    def _digest(key: str) -> bytes:
        return hashlib.sha256(key.encode()).digest()

    def before_authentication(self, key: str, key_id: str | None, address: str) -> None:
        """TooManyRequests when this address has failed too often, or too often for this key id (checked
        before any scrypt). Failures are counted against the source that makes them, never against a key
        id alone: guessing secrets for someone's key id from one address cannot lock its owner out from
        another, after a restart or not."""
        if self._digest(key) in self._good:
            return
        failures = "Too many failed authentications from this address"
        self._check(self._per_address, ("auth-address", address), False, failures)
        if key_id:
            self._check(self._per_key, ("auth-key", address, key_id), False, f"{failures} for this key id")

    def authentication_failed(self, key: str, key_id: str | None, address: str) -> None:
        """Count a failure against the address, and against the address with the key id (the next check
        refuses once over)."""
        self._good.pop(self._digest(key), None)
        counted: list[tuple[_Rule, tuple[str, ...]]] = [(self._per_address, ("auth-address", address))]
        if key_id:
            counted.append((self._per_key, ("auth-key", address, key_id)))
        for rule, keys in counted:  # already over: this request is answered 401, the next one 429
            with contextlib.suppress(TooManyRequests):
                self._check(rule, keys, True, "Too many failed authentications")

    def authenticated(self, key: str) -> None:
        digest = self._digest(key)
        self._good[digest] = None
        self._good.move_to_end(digest)
        while len(self._good) > self._GOOD_KEYS_MAX:
            self._good.popitem(last=False)
