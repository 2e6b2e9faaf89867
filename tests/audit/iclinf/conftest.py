"""A RunContext over the real SmolLM2 engine and the shared datasets (for the iclinf/synthetic kinds)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from app.audit.runtime import RunContext
from app.datasets.types import Dataset, Example


class JsonlDatasets:
    """DatasetProvider reading `<name>/{train,test}.jsonl` ({text, label}) from the shared datasets."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir

    def load(self, name: str) -> Dataset:
        def rows(split: str) -> tuple[Example, ...]:
            lines = (self.data_dir / name / f"{split}.jsonl").read_text().splitlines()
            return tuple(Example(r["text"], r["label"]) for r in map(json.loads, lines))

        train, test = rows("train"), rows("test")
        return Dataset(name, "classification", train, test, tuple(sorted({e.label for e in train})))


class OneEngine:
    def __init__(self, engine) -> None:
        self.engine = engine

    def llm(self, name: str):
        return self.engine


@pytest.fixture
def jsonl_datasets(data_dir) -> JsonlDatasets:
    return JsonlDatasets(data_dir)


@pytest.fixture
def real_ctx(smollm2, jsonl_datasets) -> RunContext:
    return RunContext(engines=OneEngine(smollm2), datasets=jsonl_datasets)


@pytest.fixture
def direct_logprobs(smollm2):
    """Independent reference: one plain forward pass of the HF model on the engine's token ids
    (no batching, padding, prefix KV reuse or result cache). Returns log-softmax rows (n, V)."""
    import torch

    def run(ids: tuple[int, ...]) -> np.ndarray:
        with torch.inference_mode():
            logits = smollm2.model(input_ids=torch.tensor([ids])).logits[0]
        return torch.log_softmax(logits.to(torch.float64), dim=-1).numpy()

    return run
