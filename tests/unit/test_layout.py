"""The core's layout speaks for itself: every package and module opens with a docstring saying what it holds."""

from __future__ import annotations

import ast

from fixtures import REPO

CORE = REPO / "include" / "streamwarden"


def test_every_core_module_opens_with_a_docstring() -> None:
    missing = [str(path.relative_to(CORE)) for path in sorted(CORE.rglob("*.py"))
               if not (ast.get_docstring(ast.parse(path.read_text())) or "").strip()]
    assert not missing, f"modules without a docstring: {missing}"


def test_the_core_is_grouped_into_capability_folders() -> None:
    folders = {p.name for p in CORE.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert {"stream", "warden", "runfiles", "kafka", "local", "validation", "testing", "tables", "control",
            "session_restarts", "recovery", "upgrade", "dashboard", "stream_host"} <= folders
    flat = sorted(p.stem for p in CORE.glob("*.py"))
    assert flat == ["__init__", "__main__", "alerts", "approvals", "atomic", "cli", "durations", "failures",
                    "params", "paths", "process_setup", "processes", "schedules", "secrets", "session_handler",
                    "settings", "settings_loading", "settings_reference", "storage", "wire"]
