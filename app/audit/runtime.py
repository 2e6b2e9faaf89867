"""What a running audit is handed: progress reporting, cancellation, engines and datasets.

The science layer sees only these protocols; the service (app/jobs) implements them over the
database, the CLI over rich, the tests over plain objects. Nothing here imports web, database or
queue code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from app.datasets.types import Dataset
    from app.egress import AllowList
    from app.engines.protocol import Embedder, LLMEngine


class AuditCancelled(Exception):
    """Raised by a progress callback when the audit's cancel flag is set; the runner ends it CANCELLED."""


class AuditError(Exception):
    """An audit cannot run as requested (unknown model, too few exemplars, …); the message is shown to the user."""


class NoSolution(ValueError):
    """A request's arithmetic has no finite answer (a claim that no setting of the free knob reaches): the
    request model turns it into a 422 with reason NO_SOLUTION; the message starts with the field."""


class ProgressFn(Protocol):
    def __call__(self, stage: str, fraction: float, message: str = "") -> None:
        """Report `fraction` ∈ [0, 1] of the whole audit done, now in `stage`.

        Implementations check the cancel flag here and raise `AuditCancelled`; call it between batches.
        """


def no_progress(stage: str, fraction: float, message: str = "") -> None:
    """A ProgressFn that reports nowhere and never cancels (library use, tests)."""


class EngineProvider(Protocol):
    def llm(self, name: str) -> LLMEngine:
        """The engine for a registered model name; raises AuditError naming the model if it cannot load."""

    def embedder(self, name: str | None = None) -> Embedder:
        """The sentence embedder (default all-MiniLM-L6-v2)."""


class DatasetProvider(Protocol):
    def load(self, name: str) -> Dataset:
        """A built-in name (ag_news, trec, …) or a tenant's uploaded dataset id; AuditError if unknown."""


class ResponseStore(Protocol):
    """Answers of a target's calls, kept by the service per audit lineage (app/db/responses.py)."""

    def get(self, keys: Iterable[str]) -> dict[str, Any]:
        """The stored answers among `keys`."""

    def put(self, answers: Mapping[str, Any]) -> None:
        """Store answers (a key already stored keeps its first answer)."""


@dataclass
class RunContext:
    """Everything `kind.run(request, ctx)` may use besides its request."""

    progress: ProgressFn = no_progress
    engines: EngineProvider | None = None
    datasets: DatasetProvider | None = None
    on_counters: Callable[[dict[str, int]], None] | None = None
    egress: AllowList | None = None
    """Where an audit may call out (`http_endpoint`; app/egress.py). The service always sets it from
    ICLAUDIT_ENDPOINT_ALLOWLIST; None = a trusted local run (library, tests) that may call anything."""
    secrets: Callable[[str], str] | None = None
    responses: ResponseStore | None = None
    """Where an endpoint's answered calls are kept, so a resumed audit re-issues only what it lacks;
    None: nothing kept (library runs)."""
    """Secret name → value for an endpoint's headers (app/secrets.py, the audit's tenant); None = the
    ICLAUDIT_SECRET_* environment only."""
    extra: dict[str, object] = field(default_factory=dict)
