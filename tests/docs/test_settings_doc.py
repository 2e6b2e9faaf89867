"""docs/settings.md is scripts/settings_doc.py's output from the Settings class: every setting, its default
and its description, no row that the class does not have."""

from __future__ import annotations

import re
from pathlib import Path

from app.config import Settings
from testkit.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


def _script():
    return load_script("scripts/settings_doc.py")


def test_settings_doc_is_generated_from_the_settings_class() -> None:
    text = (ROOT / "docs" / "settings.md").read_text()
    assert text == _script().render(), "docs/settings.md is out of date: run scripts/settings_doc.py"
    documented = re.findall(r"^\| `ICLAUDIT_([A-Z0-9_]+)` \|", text, flags=re.M)
    assert documented == [name.upper() for name in Settings.model_fields]


def test_the_readme_points_to_it_instead_of_a_copy() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "docs/settings.md" in readme
    assert not re.search(r"^\| `ICLAUDIT_[A-Z_]+` \|", readme, flags=re.M), "a settings row in the README"
