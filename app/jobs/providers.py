"""What the runner hands a kind besides progress: engines from app.engines.registry (each loaded once
per process), datasets (built-in names from ICLAUDIT_DATA_DIR, uploaded ids from the tenant's rows) and the
tenant's secrets."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from sqlalchemy.orm import Session, sessionmaker

from app import secrets
from app.audit.runtime import AuditError, ProgressFn
from app.config import Settings
from app.db import datasets
from app.db.models import Tenant

if TYPE_CHECKING:
    from app.datasets.types import Dataset
    from app.engines.protocol import Embedder, LLMEngine

log = logging.getLogger(__name__)
_lock = threading.Lock()
_llms: dict[str, LLMEngine] = {}
_embedders: dict[str | None, Embedder] = {}


class RegistryEngines:
    """EngineProvider over app.engines.registry; engines are cached for the life of the process.

    A model loaded for the first time (the packaged GGUF is converted once, ~15 s) shows the stage
    `loading model` on the audit through `progress`; loading problems are AuditErrors that say what to fix.
    """

    def __init__(self, progress: ProgressFn | None = None, check: Callable[[], None] | None = None) -> None:
        self._progress = progress
        self._check = check
        self._used: dict[str, Any] = {}
        self.load_seconds = 0.0
        """Seconds this audit waited for engines not yet loaded in this process (0 when all were warm):
        each model's load is paid once per process, and a plan counts it apart from the per-call time."""

    def _loading(self, name: str) -> None:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # no tqdm bars (weights, GGUF conversion) in the service's log
        if self._progress is not None:
            self._progress("loading model", 0.0, f"{name} (first use in this process)")

    def llm(self, name: str) -> LLMEngine:
        from app.engines.registry import ModelLoadError, ModelsFileError, UnknownModel, load_llm

        cold = name not in _llms
        if cold:
            self._loading(name)
        start = time.monotonic()
        with _lock:
            if name not in _llms:
                try:
                    _llms[name] = load_llm(name)
                except UnknownModel as exc:
                    raise AuditError(f"unknown model {name!r} (GET /v1/models lists them)") from exc
                except ModelLoadError as exc:
                    raise AuditError(str(exc)) from exc
                except ModelsFileError as exc:
                    raise AuditError(f"the models file (ICLAUDIT_MODELS_FILE) is invalid: {exc}") from exc
            if cold:
                self.load_seconds += time.monotonic() - start
            self._used[name] = _llms[name]
            return _checked(_llms[name], self._check)

    def runtimes(self) -> dict[str, dict[str, Any]]:
        """{model: how its engine computed (threads, library versions…)} for the models this audit used
        whose engine reports it (`runtime()`): a result records them beside its scores."""
        return {name: e.runtime() for name, e in sorted(self._used.items()) if hasattr(e, "runtime")}

    def embedder(self, name: str | None = None) -> Embedder:
        from app.engines.registry import ModelLoadError, ModelsFileError, UnknownModel, load_embedder

        cold = name not in _embedders
        if cold:
            self._loading(name or "the sentence embedder")
        start = time.monotonic()
        with _lock:
            if name not in _embedders:
                try:
                    _embedders[name] = load_embedder(name)
                except UnknownModel as exc:
                    raise AuditError(
                        f"unknown embedder {exc.name!r}; registered: {', '.join(exc.known)}"
                    ) from exc
                except (ModelLoadError, ModelsFileError) as exc:
                    raise AuditError(str(exc)) from exc
            if cold:
                self.load_seconds += time.monotonic() - start
            return _checked(_embedders[name], self._check)


_MODEL_CALLS = frozenset({"label_logprobs", "next_token_logprobs", "generate", "embed"})


class _Checked:
    """An engine whose every model call first runs the runner's `check` (cancel, deadline, lease,
    shutdown), so a stage that spends its time in the model — mia's collect, iclinf, synthetic
    generation — stops within one call even where the kind reports no progress."""

    def __init__(self, engine: Any, check: Callable[[], None]) -> None:
        self._engine, self._check = engine, check

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._engine, name)
        if name not in _MODEL_CALLS or not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self._check()
            return attr(*args, **kwargs)

        return call


def _checked(engine: Any, check: Callable[[], None] | None) -> Any:
    return engine if check is None else _Checked(engine, check)


def data_dir_of(configured: Path | None) -> Path:
    if configured is None:
        raise AuditError("no built-in datasets: ICLAUDIT_DATA_DIR is not set")
    return configured


class TenantDatasets:
    """DatasetProvider for one tenant: a built-in name, or the id of a dataset this tenant uploaded."""

    def __init__(
        self, *, session_factory: sessionmaker[Session], tenant_id: str, data_dir: Path | None, max_rows: int
    ):
        self._sessions = session_factory
        self._tenant_id = tenant_id
        self._data_dir = data_dir
        self._max_rows = max_rows

    def load(self, name: str) -> Dataset:
        from app.datasets.builtin import BUILTIN_NAMES, SYNTHETIC_NAME, load_builtin

        if name in BUILTIN_NAMES or name == SYNTHETIC_NAME:
            from app.datasets.builtin import UnknownDataset

            try:
                return load_builtin(name, self._data_dir)
            except UnknownDataset as exc:
                raise AuditError(
                    f"{exc}; an operator sets ICLAUDIT_DATA_DIR to a directory holding {name}/train.jsonl "
                    "and test.jsonl (GET /v1/datasets lists what is available)"
                ) from exc
            except (OSError, ValueError) as exc:
                # an OSError's text holds the file's absolute path: the tenant gets the file's name in
                # ICLAUDIT_DATA_DIR and the reason, the operator's log the whole error
                log.warning("offline copy of %r cannot be read: %s", name, exc)
                reason = (
                    f"{name}/{Path(exc.filename).name}: {exc.strerror}"
                    if isinstance(exc, OSError) and exc.filename
                    else (exc.strerror if isinstance(exc, OSError) else str(exc))
                )
                raise AuditError(
                    f"the offline copy of {name!r} in ICLAUDIT_DATA_DIR cannot be read: {reason}"
                ) from exc
        with self._sessions() as session:
            row = datasets.get_dataset(session, tenant_id=self._tenant_id, dataset_id=name)
            if row is None:
                raise AuditError(
                    f"unknown dataset {name!r}: not a built-in name nor one of your uploaded ids"
                )
            content, fmt, ds_name = row.content, row.format, row.name
        from app.datasets.validate import DatasetValidationError, parse_dataset

        try:
            stored = cast(Literal["jsonl", "csv", "json"], fmt)  # the upload validated it
            return parse_dataset(content, fmt=stored, name=ds_name, max_rows=self._max_rows)
        except DatasetValidationError as exc:
            raise AuditError(f"uploaded dataset {name!r} no longer parses: {exc.message}") from exc


def preload_in_background(name: str) -> threading.Thread:
    """Load model `name` in a daemon thread, as a worker does at start-up, so that the embedded default's
    first audit does not wait for it (an audit that needs it meanwhile waits on the engine lock and shows
    `loading model`). A failure is logged; the audit that needs the model then fails with the reason."""

    def load() -> None:
        try:
            RegistryEngines().llm(name)
            log.info("model %s loaded", name)
        except AuditError as exc:
            log.warning("could not preload the default model: %s", exc)

    thread = threading.Thread(target=load, name=f"preload-{name}", daemon=True)
    thread.start()
    return thread


def tenant_name(session: Session, tenant_id: str) -> str | None:
    """The tenant's name (its secrets file is `<name>.json`)."""
    tenant = session.get(Tenant, tenant_id)
    return tenant.name if tenant is not None else None


def tenant_secrets(
    session_factory: sessionmaker[Session], tenant_id: str, settings: Settings
) -> Callable[[str], str]:
    """The running audit's secret resolver (RunContext.secrets): the tenant's file, then the operator's
    environment secrets granted to it (ICLAUDIT_SECRETS_GRANTS); its tenant's name is read once, when
    first needed."""

    @functools.cache
    def name() -> str | None:
        with session_factory() as session:
            return tenant_name(session, tenant_id)

    return secrets.resolver(tenant=name, secrets_dir=settings.secrets_dir, grants=settings.secrets_grants)
