"""A RunContext over the real SmolLM2 engine and the shared datasets (for the iclinf/synthetic kinds)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.audit.runtime import RunContext
from app.datasets.builtin import load_builtin
from app.datasets.types import Dataset


class BuiltinDatasets:
    """DatasetProvider over the built-in loader and the shared offline datasets."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir

    def load(self, name: str) -> Dataset:
        return load_builtin(name, self.data_dir)


class OneEngine:
    def __init__(self, engine) -> None:
        self.engine = engine

    def llm(self, name: str):
        return self.engine


@pytest.fixture
def builtin_datasets(data_dir) -> BuiltinDatasets:
    return BuiltinDatasets(data_dir)


@pytest.fixture
def real_ctx(smollm2, builtin_datasets) -> RunContext:
    return RunContext(engines=OneEngine(smollm2), datasets=builtin_datasets)


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
