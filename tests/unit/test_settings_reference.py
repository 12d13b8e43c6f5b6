"""One source for each setting: ``docs/settings.md`` is what the settings models write, every setting is
described, and no document, DAG or module names a ``STREAMWARDEN_*`` variable that is no setting."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fixtures import REPO
from streamwarden.settings_reference import SECTIONS, duration_text, known_names, reference

DOC = REPO / "docs" / "settings.md"
NAME = re.compile(r"STREAMWARDEN_[A-Z0-9_]*")
NAMED_ON_PURPOSE = {
    "STREAMWARDEN_TRIGER_INTERVAL": "the README's example of a misspelt setting, refused with the closest name",
    "STREAMWARDEN_EXPECTATIONS": "an earlier name, refused with the setting that holds its value",
}


def _documents() -> list[Path]:
    """What a person reads settings in: the README, the docs, the DAGs' doc_md, the core, the plugins, the
    compose file and its environment template."""
    found = [REPO / "README.md", REPO / "docker-compose.yaml", REPO / ".env.example"]
    found += sorted((REPO / "docs").rglob("*.md"))
    for folder in ("dags", "plugins", "include", "jobs", "bench"):
        found += sorted(p for p in (REPO / folder).rglob("*.py") if ".venv" not in p.parts)
    return [p for p in found if p.is_file()]


def test_the_settings_doc_is_what_the_models_write() -> None:
    assert DOC.read_text() == reference(), (
        "docs/settings.md differs from the settings models: run "
        "`.venv/bin/python -m streamwarden.settings_reference > docs/settings.md`")


def test_every_setting_says_what_it_sets() -> None:
    bare = [f"{s.prefix}{name.upper()}" for s in SECTIONS for name, field in s.model.model_fields.items()
            if not (field.description or "").strip()]
    assert bare == []


def _unknown_in(line: str, known: frozenset[str]) -> list[str]:
    """The ``STREAMWARDEN_*`` names in ``line`` that are no setting, no other variable and no prefix of one."""
    return [name for name in NAME.findall(line) if name not in known and name not in NAMED_ON_PURPOSE
            and not (name.endswith("_") and any(k.startswith(name) for k in known))]


def test_no_document_names_a_setting_that_does_not_exist() -> None:
    known = known_names()
    unknown = [f"{path.relative_to(REPO)}:{number}: {name}" for path in _documents()
               for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
               for name in _unknown_in(line, known)]
    assert unknown == []


@pytest.mark.parametrize(("seconds", "text"), [(3.0, "3s"), (0.5, "500ms"), (120.0, "2m"), (3600.0, "1h"),
                                               (604800.0, "7d"), (90.0, "90s"), (0.0, "0")])
def test_a_duration_is_written_in_its_largest_whole_unit(seconds: float, text: str) -> None:
    assert duration_text(seconds) == text


def test_a_misspelt_setting_is_found_and_a_prefix_is_not() -> None:
    line = "set STREAMWARDEN_TRIGGER_INTERVALS=3s, and STREAMWARDEN_WARDEN_* for the warden"
    assert _unknown_in(line, known_names()) == ["STREAMWARDEN_TRIGGER_INTERVALS"]
