"""Built-in datasets from the offline copies, and the seeded synthetic records."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.datasets.builtin import BUILTIN_NAMES, SYNTHETIC_NAME, UnknownDataset, load_builtin
from app.datasets.fake_records import synthetic_records


@pytest.mark.parametrize("name", BUILTIN_NAMES)
def test_every_builtin_loads_from_the_data_dir(name: str, data_dir: Path) -> None:
    ds = load_builtin(name, data_dir)
    assert ds.name == name and len(ds.train) >= 900 and len(ds.test) >= 500
    if name in ("samsum", "xsum"):
        assert ds.task == "generation" and ds.labels == ()
        assert all(e.summary for e in ds.train[:50])
    else:
        assert ds.task == "classification" and len(ds.labels) >= 2
        assert {e.label for e in ds.train} <= set(ds.labels)


def test_known_label_sets(data_dir: Path) -> None:
    assert load_builtin("ag_news", data_dir).labels == ("Business", "Sci/Tech", "Sports", "World")
    assert load_builtin("sst2", data_dir).labels == ("negative", "positive")
    assert len(load_builtin("dbpedia14", data_dir).labels) == 14


def test_default_data_dir_comes_from_settings() -> None:
    assert len(load_builtin("trec").test) == 500  # tests/conftest.py sets ICLAUDIT_DATA_DIR


def test_unknown_or_unavailable_names_say_why(tmp_path: Path) -> None:
    with pytest.raises(UnknownDataset, match="not a built-in name"):
        load_builtin("imdb", tmp_path)
    with pytest.raises(UnknownDataset, match="HF_HUB_OFFLINE"):
        load_builtin("sst2", tmp_path)


def test_synthetic_records_are_seeded_unique_and_learnable() -> None:
    ds = load_builtin(SYNTHETIC_NAME, None)
    assert ds.task == "classification" and len(ds.labels) == 4
    texts = [e.text for e in ds.train + ds.test]
    assert len(set(texts)) == len(texts)
    assert synthetic_records(seed=0) == ds and synthetic_records(seed=1) != ds
    # the label is in the text: two of three symptoms belong to it
    from app.datasets.fake_records import _SYMPTOMS

    for e in ds.train[:100]:
        assert sum(s in e.text for s in _SYMPTOMS[e.label]) >= 2


def test_dbpedia14_ships_in_the_package_with_its_licence(tmp_path: Path, data_dir: Path) -> None:
    """No data directory: dbpedia14 is read from the package, the same rows as the offline copy; its CC BY-SA
    licence and attribution sit beside it."""
    from app.datasets.builtin import PACKAGED_DIR, availability

    assert availability("dbpedia14", None) == ("package", "")
    assert availability("dbpedia14", tmp_path) == ("package", "")
    assert availability("dbpedia14", data_dir) == ("data_dir", "")
    assert availability("ag_news", None)[0] is None  # non-commercial terms: not shipped
    packaged, offline = load_builtin("dbpedia14", tmp_path), load_builtin("dbpedia14", data_dir)
    assert (packaged.train, packaged.test, packaged.labels) == (offline.train, offline.test, offline.labels)
    assert len(packaged.train) == 2000 and len(packaged.labels) == 14
    licence = (PACKAGED_DIR / "dbpedia14" / "LICENSE").read_text()
    assert "CC BY-SA 3.0" in licence and "creativecommons.org/licenses/by-sa/3.0" in licence
    assert "Zhang" in (PACKAGED_DIR / "dbpedia14" / "README.md").read_text()
