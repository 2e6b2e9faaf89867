"""Run any audit kind from a request file, without the web service.

    python -m app.audit.standalone examples/iclinf-dbpedia-k4.json [--out result.json]

`local_context()` builds a RunContext over the real engine registry and the built-in datasets (the
directory of ICLAUDIT_DATA_DIR); `run_request(body)` validates a request body with its kind's
`Request` model, runs it and returns its typed result as the service stores it (`stored()`); progress
goes to stderr. Kind modules may expose the same entry point with
`if __name__ == "__main__": raise SystemExit(main())`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.audit.kinds.registry import kind_module
from app.audit.results.base import ResultBase
from app.audit.runtime import AuditError, ProgressFn, RunContext

if TYPE_CHECKING:
    from app.datasets.types import Dataset
    from app.engines.protocol import Embedder, LLMEngine


class LocalEngines:
    """EngineProvider over `app.engines.registry` (which loads each model once per process)."""

    def llm(self, name: str) -> LLMEngine:
        from app.engines.registry import ModelLoadError, UnknownModel, load_llm

        try:
            return load_llm(name)
        except (UnknownModel, ModelLoadError) as exc:
            raise AuditError(str(exc)) from exc

    def embedder(self, name: str | None = None) -> Embedder:
        from app.engines.registry import ModelLoadError, UnknownModel, load_embedder

        try:
            return load_embedder(name)
        except (UnknownModel, ModelLoadError) as exc:
            raise AuditError(str(exc)) from exc


@dataclass
class LocalDatasets:
    """DatasetProvider over the built-in datasets in `data_dir` (the loader caches them per process)."""

    data_dir: Path

    def load(self, name: str) -> Dataset:
        from app.datasets.builtin import UnknownDataset, load_builtin

        try:
            return load_builtin(name, self.data_dir)
        except UnknownDataset as exc:
            raise AuditError(str(exc)) from exc


def stderr_progress(stage: str, fraction: float, message: str = "") -> None:
    """A ProgressFn printing one line per call to stderr."""
    print(f"[{fraction:6.1%}] {stage}: {message}", file=sys.stderr, flush=True)


def default_data_dir() -> Path:
    """ICLAUDIT_DATA_DIR, else the shared offline copies next to the checkout (../shared/datasets)."""
    from app.config import get_settings

    return get_settings().data_dir or Path(__file__).resolve().parents[3] / "shared" / "datasets"


def local_context(progress: ProgressFn = stderr_progress, data_dir: Path | None = None) -> RunContext:
    """A RunContext over the real engine registry and the built-in datasets (HF hub kept offline)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    datasets = LocalDatasets(Path(data_dir) if data_dir is not None else default_data_dir())
    return RunContext(progress=progress, engines=LocalEngines(), datasets=datasets)


def run_request(body: dict[str, Any], ctx: RunContext | None = None) -> dict[str, Any]:
    """Validate `body` with its kind's Request model (pydantic ValidationError if invalid), run it, and
    return the typed result as the service stores it (strict JSON, the kind's fields in its order)."""
    module = kind_module(body["kind"])
    request = module.Request.model_validate(body)
    result: ResultBase = module.run(request, ctx or local_context())
    return result.stored()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run an audit request file locally and print its result.")
    parser.add_argument("request", type=Path, help="JSON request body (examples/*.json)")
    parser.add_argument("--out", type=Path, default=None, help="also write the result JSON here")
    args = parser.parse_args(argv)
    body = json.loads(args.request.read_text())
    started = time.perf_counter()
    result = run_request(body)
    result = {**result, "wall_seconds": round(time.perf_counter() - started, 2)}
    text = json.dumps(result, indent=2)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
