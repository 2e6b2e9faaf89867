"""The dataset every audit reads: rows of text with a label (classification) or a summary (generation)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Example:
    text: str
    label: str | None = None  # classification
    summary: str | None = None  # generation


@dataclass(frozen=True)
class Dataset:
    name: str
    task: Literal["classification", "generation", "unlabelled"]  # unlabelled: text alone (uploads)
    train: tuple[Example, ...]
    test: tuple[Example, ...]
    labels: tuple[str, ...] = ()  # the label set, in a stable order (classification only)
