"""The `openai` engine: any OpenAI-compatible server (vLLM, llama.cpp, SGLang, hosted APIs) over HTTP.

Registry options: `base_url` (…/v1), `model` (the served name), `api_key_env` (name of the env var
holding the key), `top_k` (logprobs asked per step, default 20, the usual server maximum),
`timeout_s` (60), `max_retries` (4), `max_concurrency` (4), `continue_final_message` (false; see below),
`tokens_as_ids` (false; vLLM's `return_tokens_as_token_ids`).

Requests. Chat models (`chat: true`) use `POST /chat/completions` with `logprobs: true,
top_logprobs: k`; base models `POST /completions` with `logprobs: k` (the system message, if any, is
prepended to the text with a blank line, as in the transformers engine). Scoring asks for one token at
temperature 0. `echo` prompt logprobs are never used (llama.cpp shifts them by one token).

Labels, from top-k lists only. The server sees text, not our tokenizer, so a label is matched
greedily: at each step, among the top-k tokens, the longest that is a prefix of what remains of the
label is taken and its logprob added; the next step asks again with the matched text appended
(completions: to the prompt; chat: as a partial assistant message, only when the server continues a
final assistant message — vLLM's `continue_final_message`, enabled by the option of that name).
When no listed token continues the label, the label's next token is outside the top k, so its
logprob is ≤ the k-th listed logprob (`floor`): the score returned is the sum so far + floor, an
UPPER BOUND, flagged in `label_scores(...).is_bound` — never dropped. A chat model without
continuation support gets the same kind of bound after the label's first token
(log p(label) ≤ log p(first token)). Greedy matching scores one tokenization of the label (the
model's usual one); other tokenizations of the same string are not summed.

Next-token distributions are top-k only (`top_k="all"` is refused: servers do not return the
vocabulary). Token ids are returned when the server gives them (`tokens_as_ids`), else -1.

HTTP: one `httpx.Client`, per-request timeout, retries (tenacity) with exponential backoff
(0.5 s · 2^attempt, or `Retry-After` when longer) on 429, 5xx and transport errors, at most `max_concurrency` requests in
flight (a thread pool). Results are cached by (model, request body). Counters: one forward pass per
request; prompt/generated tokens from the server's `usage`.

Determinism: scoring is temperature 0; `generate` forwards `seed`, which servers honour or not.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import httpx
import numpy as np
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt

from app.engines.cache import ResultCache
from app.engines.protocol import EngineCounters, Generation, ModelInfo, Prompt, PromptLike, TokenDistribution

if TYPE_CHECKING:
    from app.engines.protocol import Sampling

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


class OpenAIServerError(RuntimeError):
    """The server refused or failed a request after the retries; the message has its status and body."""


class _RetryableAnswer(Exception):
    def __init__(self, response: httpx.Response) -> None:
        super().__init__(f"HTTP {response.status_code}")
        self.response = response


class JsonClient:
    """POST JSON to an OpenAI-compatible base URL with timeouts, retries and bounded concurrency."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 4,
        backoff_s: float = 0.5,
        max_concurrency: int = 4,
        headers: dict[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
        show_body: bool = True,
    ) -> None:
        sent = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        sent.update(headers or {})
        self.base_url = base_url.rstrip("/")
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_concurrency = max_concurrency
        self.show_body = show_body  # False for a tenant's target: its reply never reaches the error
        self._client = httpx.Client(
            timeout=httpx.Timeout(timeout_s),
            headers=sent,
            limits=httpx.Limits(max_connections=max_concurrency),
            transport=transport,
            follow_redirects=False,
            trust_env=transport is None,
        )

    def _wait(self, state: RetryCallState) -> float:
        """backoff_s · 2^(attempt − 1), or the server's Retry-After (seconds) when that is longer."""
        delay = self.backoff_s * 2 ** (state.attempt_number - 1)
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, _RetryableAnswer):
            with contextlib.suppress(ValueError, TypeError):
                delay = max(delay, float(exc.response.headers.get("retry-after")))
        return delay

    def post(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        """POST JSON, retried (tenacity) on transport errors and RETRY_STATUS answers."""
        url = self.base_url + path

        def once() -> httpx.Response:
            response = self._client.post(url, json=payload)
            if response.status_code in RETRY_STATUS:
                raise _RetryableAnswer(response)
            return response

        retrying = Retrying(
            retry=retry_if_exception_type((httpx.TransportError, _RetryableAnswer)),
            stop=stop_after_attempt(self.max_retries + 1),
            wait=self._wait,
            reraise=True,
        )
        try:
            response = retrying(once)
        except _RetryableAnswer as exc:
            response = exc.response
        except httpx.TransportError as exc:
            raise OpenAIServerError(f"POST {url}: {type(exc).__name__}: {exc}") from exc
        if response.status_code >= 400 or (300 <= response.status_code < 400 and not self.show_body):
            body = f": {response.text[:500]}" if self.show_body else " (the reply is not shown)"
            raise OpenAIServerError(f"POST {url}: HTTP {response.status_code}{body}")
        return response.json()

    def map(self, fn: Any, items: Sequence[Any]) -> list[Any]:
        """`fn` over `items` in order, at most `max_concurrency` calls (requests) in flight."""
        if len(items) <= 1 or self.max_concurrency <= 1:
            return [fn(item) for item in items]
        with ThreadPoolExecutor(max_workers=self.max_concurrency) as pool:
            return list(pool.map(fn, items))

    def post_many(self, path: str, payloads: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """The responses in order, at most `max_concurrency` requests in flight."""
        return self.map(lambda p: self.post(path, p), payloads)

    def close(self) -> None:
        self._client.close()


@dataclass(frozen=True)
class LabelScores:
    """Label log-probabilities; where `is_bound` is true the value is an upper bound (label outside top k)."""

    logprobs: np.ndarray
    is_bound: np.ndarray


@dataclass(frozen=True)
class _TopK:
    tokens: tuple[str, ...]
    logprobs: tuple[float, ...]
    token_ids: tuple[int, ...]


def _token_id(token: str) -> int:
    return int(token.removeprefix("token_id:")) if token.startswith("token_id:") else -1


class OpenAIEngine:
    """An OpenAI-compatible HTTP server behind the `LLMEngine` protocol (see the module docstring)."""

    label_bound_is_upper = True
    vocab_size: int | None = None

    def __init__(self, info: ModelInfo, *, client: JsonClient | None = None) -> None:
        opts = info.options
        if "base_url" not in opts or "model" not in opts:
            raise ValueError(f"model {info.name!r}: the openai engine needs options base_url and model")
        key_env = opts.get("api_key_env")
        self.name = info.name
        self.info = info
        self.model = str(opts["model"])
        self.chat = info.chat
        self.top_k = int(opts.get("top_k", 20))
        self.continue_final_message = bool(opts.get("continue_final_message", False))
        self.tokens_as_ids = bool(opts.get("tokens_as_ids", False))
        self.eos_retries = int(opts.get("eos_retries", 8))
        self.counters = EngineCounters()
        self.cache = ResultCache(64 * 2**20)
        self._lock = threading.Lock()
        self.client = client or JsonClient(
            str(opts["base_url"]),
            api_key=os.environ.get(str(key_env)) if key_env else None,
            timeout_s=float(opts.get("timeout_s", 60.0)),
            max_retries=int(opts.get("max_retries", 4)),
            max_concurrency=int(opts.get("max_concurrency", 4)),
        )

    # ------------------------------------------------------------------ requests
    def _body(self, prompt: Prompt, partial: str, extra: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if prompt.continuation:
            raise ValueError(
                "the openai engine has no tokenizer: Prompt.continuation (token ids) is not supported"
            )
        if self.chat:
            messages: list[dict[str, str]] = (
                [{"role": "system", "content": prompt.system}] if prompt.system else []
            )
            messages.append({"role": "user", "content": prompt.text})
            body: dict[str, Any] = {"model": self.model, "messages": messages, **extra}
            if partial:
                messages.append({"role": "assistant", "content": partial})
                body.update(continue_final_message=True, add_generation_prompt=False)
            return "/chat/completions", body
        text = prompt.text if prompt.system is None else f"{prompt.system}\n\n{prompt.text}"
        return "/completions", {"model": self.model, "prompt": text + partial, **extra}

    def _count(self, response: dict[str, Any]) -> None:
        usage = response.get("usage") or {}
        with self._lock:
            self.counters.forward_passes += 1
            self.counters.prompt_tokens += int(usage.get("prompt_tokens") or 0)
            self.counters.generated_tokens += int(usage.get("completion_tokens") or 0)

    def _top_k(self, items: Sequence[tuple[Prompt, str]], k: int) -> list[_TopK]:
        """The top-k next tokens after each (prompt, partial answer), one token at temperature 0."""
        if self.chat:
            extra: dict[str, Any] = {"max_tokens": 1, "temperature": 0.0, "logprobs": True, "top_logprobs": k}
        else:
            extra = {"max_tokens": 1, "temperature": 0.0, "logprobs": k}
        if self.tokens_as_ids:
            extra["return_tokens_as_token_ids"] = True
        requests = [self._body(p, partial, extra) for p, partial in items]
        out: list[_TopK | None] = [None] * len(items)
        todo: dict[str, list[int]] = {}
        bodies: dict[str, tuple[str, dict[str, Any]]] = {}
        for i, (path, body) in enumerate(requests):
            key = repr((path, sorted(body.items())))
            hit = self.cache.get((self.name, key))
            if hit is not None:
                out[i] = hit
                with self._lock:
                    self.counters.cache_hits += 1
            else:
                todo.setdefault(key, []).append(i)
                bodies[key] = (path, body)
        keys = list(todo)
        by_path: dict[str, list[str]] = {}
        for key in keys:
            by_path.setdefault(bodies[key][0], []).append(key)
        for path, path_keys in by_path.items():
            tops = self.client.map(lambda key, path=path: self._fetch_top(path, bodies[key][1], k), path_keys)
            for key, top in zip(path_keys, tops, strict=True):
                self.cache.put((self.name, key), top)
                for i in todo[key]:
                    out[i] = top
        return out  # type: ignore[return-value]

    def _fetch_top(self, path: str, body: dict[str, Any], k: int) -> _TopK:
        """One top-k request. A server that ends the answer at once (end-of-sequence was the greedy
        token) returns no logprobs (llama.cpp); then the step is asked again sampling at temperature 1
        with seeds 0, 1, …: the listed logprobs are the model's raw ones whichever token is sampled."""
        for attempt in range(self.eos_retries + 1):
            response = self.client.post(path, body)
            self._count(response)
            pairs = self._parse_top(response)
            if pairs:
                pairs.sort(key=lambda p: -p[1])
                pairs = pairs[:k]  # a sampled token appended beyond the top k would void the floor
                tokens = tuple(t for t, _ in pairs)
                ids = tuple(_token_id(t) for t in tokens)
                if self.tokens_as_ids:
                    tokens = tuple(f"<{i}>" for i in ids)
                return _TopK(tokens=tokens, logprobs=tuple(lp for _, lp in pairs), token_ids=ids)
            body = {**body, "temperature": 1.0, "seed": attempt}
        raise OpenAIServerError(
            f"model {self.name!r}: the server returned no logprobs for the next token "
            f"(after {self.eos_retries} retries; the model keeps ending its answer immediately)"
        )

    def _parse_top(self, response: dict[str, Any]) -> list[tuple[str, float]]:
        choice = response["choices"][0]
        logprobs = choice.get("logprobs") or {}
        if self.chat:
            content = logprobs.get("content") or []
            return (
                [(t["token"], float(t["logprob"])) for t in (content[0].get("top_logprobs") or [])]
                if content
                else []
            )
        tops = logprobs.get("top_logprobs") or []
        return [(tok, float(lp)) for tok, lp in tops[0].items()] if tops else []

    # ------------------------------------------------------------------ protocol
    def label_scores(self, prompts: Sequence[PromptLike], labels: Sequence[str]) -> LabelScores:
        """Label log-probabilities with the bound flags (see the module docstring)."""
        if self.tokens_as_ids:
            raise ValueError("label scoring needs token strings: turn tokens_as_ids off for this model")
        ps = [p if isinstance(p, Prompt) else Prompt(p) for p in prompts]
        values = np.zeros((len(ps), len(labels)))
        bound = np.zeros((len(ps), len(labels)), dtype=bool)
        # state per (prompt, label): text matched so far; active cells advance one token per round
        if any(not label for label in labels):
            raise ValueError("labels must be non-empty strings")
        matched = {(i, j): "" for i in range(len(ps)) for j in range(len(labels))}
        active = sorted(matched)
        while active:
            tops = self._top_k([(ps[i], matched[(i, j)]) for i, j in active], self.top_k)
            still = []
            for (i, j), top in zip(active, tops, strict=True):
                remaining = labels[j][len(matched[(i, j)]) :]
                best = max(
                    (n for n, tok in enumerate(top.tokens) if tok and remaining.startswith(tok)),
                    key=lambda n: len(top.tokens[n]),
                    default=None,
                )
                if best is None:
                    values[i, j] += top.logprobs[-1]
                    bound[i, j] = True
                    continue
                values[i, j] += top.logprobs[best]
                matched[(i, j)] += top.tokens[best]
                if len(matched[(i, j)]) == len(labels[j]):
                    continue
                if self.chat and not self.continue_final_message:
                    bound[i, j] = True  # log p(label) ≤ log p(tokens matched so far)
                    continue
                still.append((i, j))
            active = still
        return LabelScores(logprobs=values, is_bound=bound)

    def label_logprobs(self, prompts: Sequence[PromptLike], labels: Sequence[str]) -> np.ndarray:
        """log p(label | prompt), exact where the label is in the top-k lists, else an upper bound."""
        return self.label_scores(prompts, labels).logprobs

    def next_token_logprobs(
        self, prompts: Sequence[PromptLike], top_k: int | Literal["all"] = "all"
    ) -> list[TokenDistribution]:
        """Top-k next tokens (`floor` = the k-th logprob); `"all"` is refused (servers return top k only)."""
        if top_k == "all":
            raise ValueError(
                f"model {self.name!r} is served over HTTP: only top-k next-token logprobs are available (k ≤ {self.top_k})"
            )
        ps = [p if isinstance(p, Prompt) else Prompt(p) for p in prompts]
        tops = self._top_k([(p, "") for p in ps], int(top_k))
        return [
            TokenDistribution(
                logprobs=np.array(t.logprobs),
                token_ids=np.array(t.token_ids),
                tokens=t.tokens,
                floor=t.logprobs[-1],
            )
            for t in tops
        ]

    def generate(self, prompts: Sequence[PromptLike], sampling: Sampling) -> list[list[Generation]]:
        """`n` samples per prompt with their token logprobs (token ids only with `tokens_as_ids`)."""
        extra: dict[str, Any] = {
            "max_tokens": sampling.max_new_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "seed": sampling.seed,
            "n": sampling.n,
            "logprobs": True if self.chat else 1,
            **({"top_logprobs": 1} if self.chat else {}),
        }
        if self.tokens_as_ids:
            extra["return_tokens_as_token_ids"] = True
        requests = [self._body(p if isinstance(p, Prompt) else Prompt(p), "", extra) for p in prompts]
        result: list[list[Generation]] = [[] for _ in requests]
        for path in {path for path, _ in requests}:
            idx = [i for i, (p, _) in enumerate(requests) if p == path]
            responses = self.client.post_many(path, [requests[i][1] for i in idx])
            for i, response in zip(idx, responses, strict=True):
                self._count(response)
                for choice in sorted(response["choices"], key=lambda c: c.get("index", 0)):
                    result[i].append(self._generation(choice))
        return result

    def _generation(self, choice: dict[str, Any]) -> Generation:
        logprobs = choice.get("logprobs") or {}
        if self.chat:
            text = (choice.get("message") or {}).get("content") or ""
            steps = [(t["token"], float(t["logprob"])) for t in logprobs.get("content") or []]
        else:
            text = choice.get("text") or ""
            steps = list(
                zip(
                    logprobs.get("tokens") or [],
                    map(float, logprobs.get("token_logprobs") or []),
                    strict=False,
                )
            )
        ids = tuple(_token_id(t) for t, _ in steps) if self.tokens_as_ids else ()
        return Generation(text=text, token_ids=ids, token_logprobs=tuple(lp for _, lp in steps))

    def decode(self, token_ids: Sequence[int]) -> str:
        raise NotImplementedError(
            f"model {self.name!r} is served over HTTP: no tokenizer to decode token ids"
        )


def chat_target_engine(
    *,
    base_url: str,
    model: str,
    headers: dict[str, str],
    egress: Any = None,
    top_k: int = 20,
    timeout_s: float = 60.0,
    max_concurrency: int = 1,
) -> OpenAIEngine:
    """The engine for a deployed chat-completions app audited directly: its base URL (…/v1)
    and served model, the tenant's headers (secrets resolved), every connection through the service's
    egress policy when `egress` is given (app/egress.py: allow-list, connect-time address check, no
    redirects), and errors that never quote the app's reply."""
    from app.egress import EgressTransport

    transport = EgressTransport(egress, retries=0) if egress is not None else None
    client = JsonClient(
        base_url,
        timeout_s=timeout_s,
        max_concurrency=max_concurrency,
        headers=headers,
        transport=transport,
        show_body=False,
    )
    info = ModelInfo(
        name=f"target:{model}",
        engine="openai",
        chat=True,
        source=base_url,
        options={"base_url": base_url, "model": model, "top_k": top_k},
    )
    return OpenAIEngine(info, client=client)
