"""A real deployed DP-ICL system for the `http_endpoint` audits: FastAPI + uvicorn on 127.0.0.1.

POST / {"context": [exemplar, …], "query": "…"} → {"choices": [{"text": answer}]}. Each call
partitions the exemplars afresh (003 Alg. 2 l.1), puts each partition in the system prompt (002 §3),
lets the oracle engine vote over `labels`, and releases through the project's own `PrivateVoting`
(planted bug included), so the audit sees exactly what a deployment of that code would release.

`randomized_response` is the simplest endpoint of known privacy: exactly (ε, 0)-DP, not Gaussian.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

import numpy as np
from fastapi import FastAPI
from pydantic import BaseModel

from app.audit.icl.contexts import partition_disjoint
from app.audit.icl.prompts import CANARY_BINARY_ANSWERS, CONTEXTLEAK_CANARY, SYSTEM_CONTEXT, fill
from app.audit.mechanisms.base import CleanSource, calibrate, draw_votes
from app.audit.mechanisms.private_voting import DEFAULT_SENSITIVITY, PrivateVoting
from app.engines.oracle import OracleEngine
from app.engines.protocol import Prompt
from testkit.servers import serve_in_thread


class Ask(BaseModel):
    context: list[str]
    query: str


def deployed_private_voting(
    *, epsilon: float, delta: float = 1e-5, partitions: int = 4, bug: str | None = None, seed: int = 0
) -> FastAPI:
    """The deployment: private voting over the oracle, claiming (ε, δ) with classic σ."""
    theory = calibrate(epsilon, delta, DEFAULT_SENSITIVITY, "classic")
    mechanism = PrivateVoting(partitions=partitions, theory=theory, bug=bug)
    source = CleanSource(OracleEngine())
    rng = np.random.default_rng(seed)
    labels = CANARY_BINARY_ANSWERS
    app = FastAPI()

    @app.post("/")
    def answer(ask: Ask) -> dict:
        blocks = partition_disjoint(len(ask.context), partitions, rng)
        prompts = [
            Prompt(ask.query, system=fill(SYSTEM_CONTEXT, context="\n\n".join(ask.context[i] for i in b)))
            for b in blocks
        ]
        votes = draw_votes(mechanism.label_probs(prompts, labels, source), 1, rng)
        released = int(mechanism.release(votes, rng).answer[0])
        return {"choices": [{"text": labels[released] if released >= 0 else ""}]}

    @app.post("/flaky")
    def flaky(ask: Ask) -> dict:
        """Fails every other call with 503, to exercise the client's retries."""
        flaky.calls = getattr(flaky, "calls", 0) + 1
        if flaky.calls % 2:
            from fastapi import HTTPException

            raise HTTPException(503, "busy")
        return answer(ask)

    return app


def randomized_response(*, epsilon: float, canary: str = CONTEXTLEAK_CANARY, seed: int = 0) -> FastAPI:
    """Randomized response on "the canary is in the context": the true bit ("1" present, "0" absent) with
    probability e^ε/(1 + e^ε), the other one otherwise. Neighbouring contexts change the bit at most, so
    the endpoint is exactly (ε, 0)-DP, and its best test has TPR = e^ε/(1 + e^ε) = 1 − FPR."""
    keep = float(np.exp(epsilon) / (1.0 + np.exp(epsilon)))
    rng = np.random.default_rng(seed)
    app = FastAPI()

    @app.post("/")
    def answer(ask: Ask) -> dict:
        present = any(canary in exemplar for exemplar in ask.context)
        truthful = bool(rng.random() < keep)
        return {"choices": [{"text": "1" if present == truthful else "0"}]}

    return app


def serve(app: FastAPI) -> AbstractContextManager[str]:
    """Run `app` with uvicorn in a thread on a free 127.0.0.1 port; yields its base URL."""
    return serve_in_thread(app, "the test DP-ICL server")
