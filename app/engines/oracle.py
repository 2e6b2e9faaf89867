"""The `oracle` engine — NOT a language model.

It answers the membership audits' queries by exact string search of the canary in the context it
was given, with probability 1: Yes/No (003 Prompt 1), y1/y0 (003 Prompts 2–3; with an empty context
Prompt 3 asks for a random choice, answered 50/50), "1"/"0" and the python list (002 A.3, context in
the system prompt), the secret query (`CANARY_SECRET`: the number that follows the given handle in the
system prompt, or `SECRET_NOT_FOUND`), and the repeat query (003 Prompt 5: the rest of the context line
holding the prefix, or `REPEAT_NOT_FOUND`). Any other prompt is refused with an error.

Why: with every partition voting deterministically, the clean votes take 003 Lemma 3.1's extreme
pattern ([1, T−1] with the canary vs [0, T] without), so an audit with the oracle measures the
aggregation mechanism's own worst-case leakage and the auditor's tightness, free of model weakness.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import numpy as np

from app.audit.icl import prompts as texts
from app.audit.runtime import AuditError
from app.engines.protocol import EngineCounters, Generation, ModelInfo, Prompt, PromptLike, TokenDistribution

if TYPE_CHECKING:
    from app.engines.protocol import Sampling


class OracleRefusal(AuditError):
    """The oracle was asked something that is not one of the audit queries it can answer."""


_PATTERNS = {
    "inquiry": texts.template_pattern(texts.INQUIRY),
    "signal_white_box": texts.template_pattern(texts.SIGNAL_WHITE_BOX),
    "signal_black_box": texts.template_pattern(texts.SIGNAL_BLACK_BOX),
    "canary_binary": texts.template_pattern(texts.CANARY_BINARY),
    "canary_list": texts.template_pattern(texts.CANARY_LIST),
    "repeat": texts.template_pattern(texts.REPEAT),
    "canary_secret": texts.template_pattern(texts.CANARY_SECRET),
}


def _normal(text: str) -> str:
    return " ".join(text.split()).casefold()


def _complete(prefix: str, context: str) -> str:
    """003 Prompt 5: the rest of the exemplar text that contains `prefix` (whitespace normalized, up to
    the exemplar's next `Label:`/`Summary:`/`Text:` field), else `REPEAT_NOT_FOUND`."""
    flat, prefix = " ".join(context.split()), " ".join(prefix.split())
    at = flat.casefold().find(prefix.casefold()) if prefix else -1
    if at < 0:
        return texts.REPEAT_NOT_FOUND
    rest = re.split(r" (?:Label|Summary|Text): ", flat[at + len(prefix) :], maxsplit=1)[0].strip()
    return rest or texts.REPEAT_NOT_FOUND


class OracleEngine:
    """Exact-search answerer of audit queries; see the module docstring. Deterministic."""

    name = "oracle"

    def __init__(self, info: ModelInfo | None = None) -> None:
        self.info = info or ModelInfo(name="oracle", engine="oracle", chat=False)
        self.counters = EngineCounters()

    def answers(self, prompt: PromptLike) -> dict[str, float]:
        """The answer distribution {answer text: probability} for one audit query."""
        p = prompt if isinstance(prompt, Prompt) else Prompt(prompt)
        for kind, pattern in _PATTERNS.items():
            m = pattern.fullmatch(p.text)
            if m is None:
                continue
            fields = m.groupdict()
            if fields.get("context", "").strip() == texts.CONTEXT_IN_SYSTEM:  # exemplars moved (defenses)
                fields["context"] = p.system or ""
            if kind == "repeat":
                return {_complete(fields["prefix"], fields["context"]): 1.0}
            if kind == "canary_secret":  # the number that follows the handle in the system prompt
                found = re.search(re.escape(fields["handle"]) + r"(\d+)", p.system or "")
                return {found.group(1) if found else texts.SECRET_NOT_FOUND: 1.0}
            canary = fields["canary"].strip()
            in_system = kind in ("canary_binary", "canary_list")
            context = (p.system or "") if in_system else fields["context"]
            present = bool(canary) and _normal(canary) in _normal(context)
            if kind == "inquiry":
                yes, no = texts.INQUIRY_ANSWERS
            elif kind == "canary_binary":
                yes, no = texts.CANARY_BINARY_ANSWERS
            elif kind == "canary_list":
                yes, no = texts.canary_list_answers(canary)
            else:
                yes, no = fields["y1"], fields["y0"]
                if kind == "signal_black_box" and not context.strip():
                    return {yes: 0.5, no: 0.5}
            return {yes: 1.0} if present else {no: 1.0}
        raise OracleRefusal(
            "the oracle engine answers only the membership-audit queries (Inquiry, signal texts, "
            "ContextLeak canary prompts, repeat); it is not a language model. Refused prompt starting "
            f"{p.text[:80]!r}"
        )

    def label_logprobs(self, prompts: Sequence[PromptLike], labels: Sequence[str]) -> np.ndarray:
        """log P(label) per prompt: 0 for the oracle's answer, −inf for every other label."""
        out = np.full((len(prompts), len(labels)), -np.inf)
        normal_labels = [_normal(label) for label in labels]
        for i, prompt in enumerate(prompts):
            for answer, prob in self.answers(prompt).items():
                if _normal(answer) not in normal_labels:
                    raise OracleRefusal(
                        f"the oracle's answer {answer!r} is not among the labels {list(labels)}"
                    )
                out[i, normal_labels.index(_normal(answer))] = np.log(prob)
        self.counters.forward_passes += len(prompts)
        return out

    def generate(self, prompts: Sequence[PromptLike], sampling: Sampling) -> list[list[Generation]]:
        """`n` answers per prompt; a 50/50 answer is drawn with a generator seeded by (seed, prompt)."""
        out = []
        for prompt in prompts:
            dist = self.answers(prompt)
            text = prompt.text if isinstance(prompt, Prompt) else prompt
            digest = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
            rng = np.random.default_rng([sampling.seed, digest])
            options = list(dist)
            picks = rng.choice(len(options), size=sampling.n, p=list(dist.values()))
            out.append([Generation(options[k], (), ()) for k in picks])
        self.counters.forward_passes += len(prompts)
        return out

    def next_token_logprobs(
        self, prompts: Sequence[PromptLike], top_k: int | Literal["all"] = "all"
    ) -> list[TokenDistribution]:
        raise OracleRefusal(
            "the oracle engine has no vocabulary or token distribution; it is not a language model"
        )

    def decode(self, token_ids: Sequence[int]) -> str:
        raise OracleRefusal("the oracle engine has no tokenizer; it is not a language model")
