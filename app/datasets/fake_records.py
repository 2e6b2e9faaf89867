"""A seeded dataset of fake "sensitive records": fictitious patient intake notes with a diagnosis label.

Every record is made up by this module from small word lists (no real person, no real data): a name,
an age, a town, a record number, a date of birth and the presenting symptoms; the label is the
department the note is routed to (`cardiology`, `respiratory`, `gastroenterology`, `neurology`),
determined by the symptoms (two of three symptoms come from the label's own list, one from any list), so
a model can learn it in context. The identifiers make each record unique and "private-looking",
which is what membership and extraction audits need; the embedded demo runs fully offline on it.

Same `seed` → the same records (numpy `Generator`).
"""

from __future__ import annotations

import numpy as np

from app.datasets.types import Dataset, Example

NAME = "synthetic_records"

_FIRST = [
    "Amara",
    "Bruno",
    "Chiara",
    "Dmitri",
    "Elena",
    "Farid",
    "Greta",
    "Hugo",
    "Ines",
    "Jonas",
    "Kaito",
    "Leila",
    "Mateo",
    "Nadia",
    "Oskar",
    "Priya",
    "Quentin",
    "Rosa",
    "Samir",
    "Tove",
    "Umar",
    "Vera",
    "Wen",
    "Ximena",
    "Yusuf",
    "Zofia",
]
_LAST = [
    "Abara",
    "Berg",
    "Castillo",
    "Dubois",
    "Eriksen",
    "Fontaine",
    "Galli",
    "Haddad",
    "Ivanova",
    "Jensen",
    "Kowalski",
    "Laurent",
    "Moreau",
    "Novak",
    "Okafor",
    "Petrov",
    "Quispe",
    "Rossi",
    "Silva",
    "Tanaka",
    "Urquhart",
    "Varga",
    "Weber",
    "Xu",
    "Yilmaz",
    "Zhang",
]
_TOWNS = [
    "Alderbrook",
    "Birchfield",
    "Cedarmoor",
    "Dunwick",
    "Elmstead",
    "Fernvale",
    "Glenholm",
    "Harrowgate",
    "Ivybridge",
    "Juniper Falls",
    "Kestrel Bay",
    "Larkspur",
    "Millbrook",
    "Northcliff",
    "Oakhaven",
    "Pinecrest",
]
_SYMPTOMS = {
    "cardiology": (
        "chest pain on exertion",
        "palpitations",
        "swollen ankles",
        "shortness of breath lying flat",
        "fainting episodes",
        "irregular pulse",
    ),
    "respiratory": (
        "persistent dry cough",
        "wheezing at night",
        "coughing up phlegm",
        "breathlessness climbing stairs",
        "chest tightness in cold air",
        "recurrent chest infections",
    ),
    "gastroenterology": (
        "heartburn after meals",
        "abdominal cramps",
        "bloating",
        "blood in stool",
        "difficulty swallowing",
        "unexplained weight loss",
    ),
    "neurology": (
        "recurring headaches",
        "numbness in the left hand",
        "blurred vision",
        "memory lapses",
        "tremor at rest",
        "dizziness on standing",
    ),
}
LABELS = tuple(sorted(_SYMPTOMS))


def _record(rng: np.random.Generator, index: int) -> Example:
    label = LABELS[int(rng.integers(len(LABELS)))]
    own = rng.choice(len(_SYMPTOMS[label]), size=2, replace=False)
    other_label = LABELS[int(rng.integers(len(LABELS)))]
    symptoms = [_SYMPTOMS[label][int(i)] for i in own]
    extra = _SYMPTOMS[other_label][int(rng.integers(len(_SYMPTOMS[other_label])))]
    if extra not in symptoms:
        symptoms.insert(int(rng.integers(3)), extra)
    age = int(rng.integers(19, 91))
    year = 2026 - age
    month, day = int(rng.integers(1, 13)), int(rng.integers(1, 29))
    name = f"{_FIRST[int(rng.integers(len(_FIRST)))]} {_LAST[int(rng.integers(len(_LAST)))]}"
    town = _TOWNS[int(rng.integers(len(_TOWNS)))]
    record_no = f"MRN-{int(rng.integers(10**6, 10**7))}-{index:04d}"
    text = (
        f"Patient {name} ({record_no}), born {year}-{month:02d}-{day:02d}, age {age}, from {town}, "
        f"reports {', '.join(symptoms[:-1])} and {symptoms[-1]}."
    )
    return Example(text=text, label=label)


def synthetic_records(*, n_train: int = 600, n_test: int = 200, seed: int = 0) -> Dataset:
    """The synthetic patient-intake dataset (`n_train` + `n_test` unique records, 4 labels)."""
    rng = np.random.default_rng(seed)
    rows = [_record(rng, i) for i in range(n_train + n_test)]
    return Dataset(
        name=NAME,
        task="classification",
        train=tuple(rows[:n_train]),
        test=tuple(rows[n_train:]),
        labels=LABELS,
    )
