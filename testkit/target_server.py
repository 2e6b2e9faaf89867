"""A deployed target for the audits of real deployments: FastAPI + uvicorn on 127.0.0.1.

POST / {"context": [exemplar, …], "query": "…"} → {"choices": [{"text": "1" | "0"}]}: randomized response
on "the canary is in the context" (exactly (ε, 0)-DP). Its answers are deterministic per request: the k-th
time one body arrives it answers from stream (seed, body, k), so a fresh target with the same seed answers
a fresh audit the same way, and a resumed audit that re-issues only the calls it lacks sees what an
uninterrupted one would have. It records what reached it: each call's Authorization header and body, and
can be taken down (503 with Retry-After), rate limited (429 with Retry-After) or slowed (`delay`).
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections import Counter
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from app.audit.icl.prompts import CONTEXTLEAK_CANARY
from testkit.servers import serve_in_thread


@dataclass
class Target:
    """What the target saw and how it behaves now."""

    epsilon: float = 1.0
    seed: int = 0
    authorization: list[str | None] = field(default_factory=list)
    answered: int = 0  # calls answered 200
    seen: Counter = field(default_factory=Counter)  # body digest → times answered
    down: bool = False  # answer 503 + Retry-After while set
    down_after: int | None = None  # go down once this many calls were answered
    retry_after: float = 0.0
    fail_first: int = 0  # answer the first this many calls 503 + Retry-After (then as usual)
    refused: int = 0  # calls answered 503
    limited: int = 0  # answer the next this many calls 429 + Retry-After (then as usual)
    limited_after: int | None = None  # answer every call 429 + Retry-After once this many were answered
    throttled: int = 0  # calls answered 429
    delay: float = 0.0  # seconds each answer takes (other calls are not held up)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def app(self) -> FastAPI:
        keep = float(np.exp(self.epsilon) / (1.0 + np.exp(self.epsilon)))
        api = FastAPI()

        @api.post("/")
        async def answer(request: Request) -> JSONResponse:
            raw = await request.body()
            body = await request.json()
            if self.delay:
                await asyncio.sleep(self.delay)
            with self.lock:
                self.authorization.append(request.headers.get("authorization"))
                over = self.limited_after is not None and self.answered >= self.limited_after
                if self.limited > 0 or over:
                    self.limited -= self.limited > 0
                    self.throttled += 1
                    headers = {"Retry-After": f"{self.retry_after:g}"}
                    return JSONResponse({"error": "slow down"}, status_code=429, headers=headers)
                if self.down_after is not None and self.answered >= self.down_after:
                    self.down = True
                if self.fail_first > 0:
                    self.fail_first -= 1
                    self.down = True
                    self.refused += 1
                    headers = {"Retry-After": f"{self.retry_after:g}"}
                    self.down = False
                    return JSONResponse({"error": "busy"}, status_code=503, headers=headers)
                if self.down:
                    self.refused += 1
                    headers = {"Retry-After": f"{self.retry_after:g}"}
                    return JSONResponse({"error": "down"}, status_code=503, headers=headers)
                digest = hashlib.sha256(raw).hexdigest()
                k = self.seen[digest]
                self.seen[digest] += 1
                self.answered += 1
            entropy = [self.seed, k, int(digest[:15], 16)]
            truthful = bool(np.random.default_rng(entropy).random() < keep)
            present = any(CONTEXTLEAK_CANARY in e for e in body.get("context", []))
            return JSONResponse({"choices": [{"text": "1" if present == truthful else "0"}]})

        return api


def serve(app: FastAPI) -> AbstractContextManager[str]:
    """Run `app` with uvicorn in a thread on a free 127.0.0.1 port; yields its base URL."""
    return serve_in_thread(app, "the test target")
