"""Run contexts for the membership audits over the real engines and the shared datasets (no mocks)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from app.audit.runtime import RunContext
from app.datasets.types import Dataset, Example
from app.engines.oracle import OracleEngine
from app.engines.simulated import SimulatedEngine, is_simulated_name, parse_simulated_name

GENERATION = {"samsum", "xsum"}
SHARED_DATASETS = Path(__file__).resolve().parents[3].parent / "shared" / "datasets"


def read_dataset(name: str, data_dir: Path = SHARED_DATASETS) -> Dataset:
    """A shared JSONL dataset as a `Dataset` (the engines' `load_builtin` does the same for the service)."""

    def rows(split: str) -> tuple[Example, ...]:
        with open(data_dir / name / f"{split}.jsonl", encoding="utf-8") as fh:
            return tuple(Example(**json.loads(line)) for line in fh if line.strip())

    train, test = rows("train"), rows("test")
    if name in GENERATION:
        return Dataset(name, "generation", train, test)
    labels = tuple(dict.fromkeys(e.label for e in train))
    return Dataset(name, "classification", train, test, labels)


@dataclass
class Engines:
    """The oracle and the simulated engines, plus the real SmolLM2/MiniLM when a test asks for them."""

    llms: dict = field(default_factory=dict)
    embed: object | None = None

    def llm(self, name: str):
        if name == "oracle":
            return self.llms.setdefault("oracle", OracleEngine())
        if is_simulated_name(name) and name not in self.llms:
            self.llms[name] = SimulatedEngine(params=parse_simulated_name(name))
        return self.llms[name]

    def embedder(self, name: str | None = None):
        assert self.embed is not None, "this test did not provide an embedder"
        return self.embed


@dataclass
class Datasets:
    def load(self, name: str) -> Dataset:
        return read_dataset(name)


@pytest.fixture
def oracle_ctx() -> RunContext:
    return RunContext(engines=Engines(), datasets=Datasets())


@pytest.fixture
def ag_news() -> Dataset:
    return read_dataset("ag_news")
