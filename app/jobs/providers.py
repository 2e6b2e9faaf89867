"""What the runner hands a kind besides progress: engines from app.engines.registry (each loaded once
per process) and datasets (built-in names from ICLAUDIT_DATA_DIR, uploaded ids from the tenant's rows)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy.orm import Session, sessionmaker

from app.audit.runtime import AuditError
from app.db import datasets

if TYPE_CHECKING:
    from app.datasets.types import Dataset
    from app.engines.protocol import Embedder, LLMEngine

_lock = threading.Lock()
_llms: dict[str, LLMEngine] = {}
_embedders: dict[str | None, Embedder] = {}


class RegistryEngines:
    """EngineProvider over app.engines.registry; engines are cached for the life of the process."""

    def llm(self, name: str) -> LLMEngine:
        from app.engines.registry import ModelLoadError, UnknownModel, load_llm

        with _lock:
            if name not in _llms:
                try:
                    _llms[name] = load_llm(name)
                except UnknownModel as exc:
                    raise AuditError(f"unknown model {name!r} (GET /v1/models lists them)") from exc
                except ModelLoadError as exc:
                    raise AuditError(f"model {name!r} could not be loaded: {exc}") from exc
            return _llms[name]

    def embedder(self, name: str | None = None) -> Embedder:
        from app.engines.registry import load_embedder

        with _lock:
            if name not in _embedders:
                _embedders[name] = load_embedder() if name is None else load_embedder(name)  # type: ignore[call-arg]
            return _embedders[name]


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
            return load_builtin(name, self._data_dir)
        with self._sessions() as session:
            row = datasets.get_dataset(session, tenant_id=self._tenant_id, dataset_id=name)
            if row is None:
                raise AuditError(
                    f"unknown dataset {name!r}: not a built-in name nor one of your uploaded ids"
                )
            content, fmt, ds_name = row.content, row.format, row.name
        from app.datasets.validate import DatasetValidationError, parse_dataset

        try:
            return parse_dataset(content, fmt=fmt, name=ds_name, max_rows=self._max_rows)
        except DatasetValidationError as exc:
            raise AuditError(f"uploaded dataset {name!r} no longer parses: {exc.message}") from exc
