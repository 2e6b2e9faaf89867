"""Multi-step targets (issue 22 §4) against a real FastAPI target: each trial creates a session (its id
saved from the reply by JSONPath, a cookie set), sends the message to /sessions/{id}/messages with that
cookie, and closes the session; a step URL outside the allow-list is a 422 naming it."""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path

import numpy as np
from fastapi import Cookie, FastAPI, HTTPException, Response
from pydantic import BaseModel

from app.audit.icl.prompts import CONTEXTLEAK_CANARY
from app.audit.kinds import mia
from app.audit.plan import plan_mia
from app.audit.runtime import no_progress
from app.audit.standalone import local_context
from testkit.target_server import serve

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TRIALS = 40


class Message(BaseModel):
    context: list[str]
    query: str


def session_target(epsilon: float = 1.0) -> tuple[FastAPI, dict]:
    """Sessions with a cookie; messages answered by randomized response; every session must be closed."""
    keep = float(np.exp(epsilon) / (1 + np.exp(epsilon)))
    rng, lock = np.random.default_rng(0), threading.Lock()
    state: dict = {"open": {}, "created": 0, "closed": 0, "messages": 0, "bad_cookie": 0, "most_open": 0}
    app = FastAPI()

    @app.post("/sessions")
    def create(response: Response) -> dict:
        sid, secret = uuid.uuid4().hex, uuid.uuid4().hex
        with lock:
            state["open"][sid] = secret
            state["created"] += 1
            state["most_open"] = max(state["most_open"], len(state["open"]))
        response.set_cookie("sid", secret)
        return {"session": {"id": sid}}

    @app.post("/sessions/{sid}/messages")
    def message(sid: str, ask: Message, sid_cookie: str | None = Cookie(default=None, alias="sid")) -> dict:
        with lock:
            if state["open"].get(sid) is None or state["open"][sid] != sid_cookie:
                state["bad_cookie"] += 1
                raise HTTPException(403, "no such open session for this cookie")
            state["messages"] += 1
            truthful = bool(rng.random() < keep)
        present = any(CONTEXTLEAK_CANARY in e for e in ask.context)
        return {"reply": {"text": "1" if present == truthful else "0"}}

    @app.delete("/sessions/{sid}", status_code=204)
    def close(sid: str) -> Response:
        with lock:
            if state["open"].pop(sid, None) is not None:
                state["closed"] += 1
        return Response(status_code=204)

    return app, state


def multistep_body(base: str) -> dict:
    body = json.loads((EXAMPLES / "mia-http-endpoint.json").read_text())
    body["mechanism"]["endpoint"] = {
        "steps": [{"url": f"{base}/sessions", "body": {}, "save": {"sid": "$.session.id"}}],
        "url": base + "/sessions/{sid}/messages",
        "body": {"context": "{context}", "query": "{query}"},
        "answer_path": "$.reply.text",
        "close": {"url": base + "/sessions/{sid}", "method": "DELETE"},
        "retries": 0,
    }
    return body | {"trials": TRIALS, "seed": 2}


def test_sessions_are_created_used_with_their_cookie_and_closed() -> None:
    app, state = session_target()
    with serve(app) as base:
        request, ctx = mia.Request.model_validate(multistep_body(base)), local_context(progress=no_progress)
        planned = plan_mia(request, datasets=ctx.datasets)["calls"]["endpoint"]
        assert state["created"] == 0  # planning called nothing
        result = mia.run(request, ctx).stored()
    assert state["created"] == state["messages"] == state["closed"] == 2 * TRIALS
    assert state["open"] == {} and state["bad_cookie"] == 0
    assert result["endpoint_calls"] == planned == 3 * 2 * TRIALS  # three requests per trial, as planned
    assert result["black_box"]["counts"]["tp"] + result["black_box"]["counts"]["fn"] == TRIALS
    assert result["black_box"]["tpr"] > result["black_box"]["fpr"]  # the answers were read and scored


def test_concurrent_trials_keep_their_own_sessions_and_cookies() -> None:
    """max_concurrency 4: trials run at once on clients of their own, so sessions overlap, yet each
    message carries its own session's cookie and every session is closed."""
    app, state = session_target()
    with serve(app) as base:
        body = multistep_body(base)
        body["mechanism"]["endpoint"]["max_concurrency"] = 4
        request, ctx = mia.Request.model_validate(body), local_context(progress=no_progress)
        result = mia.run(request, ctx).stored()
    assert state["most_open"] > 1  # the trials did overlap
    assert state["created"] == state["messages"] == state["closed"] == 2 * TRIALS
    assert state["open"] == {} and state["bad_cookie"] == 0
    assert result["endpoint_calls"] == 3 * 2 * TRIALS


def test_a_step_url_outside_the_allow_list_is_422(app_client, make_key) -> None:
    with app_client(endpoint_allowlist=["http://127.0.0.1:9/api/"]) as client:
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        body = multistep_body("http://127.0.0.1:9/api")
        body["mechanism"]["endpoint"]["close"]["url"] = "http://127.0.0.1:9/admin/{sid}"
        response = client.post("/v1/audits", json=body)
        assert response.status_code == 422, response.text
        assert response.json()["error"]["details"][0]["path"] == "$.mechanism.endpoint.close.url"
        assert client.get("/v1/audits").json()["audits"] == []
