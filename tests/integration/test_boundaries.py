"""The capability folders' import boundaries, checked on the source and on a real interpreter.

- the core (``include/streamwarden``) imports no Airflow: it runs inside spark-submit and in plain scripts;
- ``warden/``, ``local/``, ``runfiles/``, ``logs/``, ``kafka/``, ``tables/``, ``maintenance/``, ``validation/``,
  ``control/``, ``session_restarts/``, ``recovery/``, ``dashboard/`` and the shared top-level modules import no pyspark:
  the Airflow workers and ``streamwarden up`` need no Spark to judge, stop or start the stream, to read, maintain,
  validate and recover the tables, or to ask the sites for new sessions;
- ``stream/`` (the Spark job) imports neither the warden nor the local platform;
- ``tables/`` and what reads or repairs the tables (maintenance, validation, recovery, session restarts, the page)
  do not import ``stream/``: offset ranges, commits and content hashes are the tables' own;
- the core stands in floors (:data:`FLOORS`): no module imports one of a floor above its own;
- the Airflow plugins and DAG files import no pyspark.

An import counts wherever it stands (module level, inside a function, under ``TYPE_CHECKING``), and
transitively through the project's own modules, parent packages included.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from fixtures import REPO

SHARED = ("streamwarden", "streamwarden.settings", "streamwarden.settings_loading", "streamwarden.failures",
          "streamwarden.wire", "streamwarden.atomic", "streamwarden.processes", "streamwarden.storage",
          "streamwarden.schedules", "streamwarden.params", "streamwarden.process_setup", "streamwarden.alerts",
          "streamwarden.paths", "streamwarden.session_handler")


@dataclass(frozen=True)
class Rule:
    """Packages in ``scope`` (and everything under them) and the ``modules`` named must not reach ``forbidden``."""

    scope: tuple[str, ...]
    forbidden: tuple[str, ...]
    why: str
    modules: tuple[str, ...] = ()

    def applies_to(self, name: str) -> bool:
        return name in self.modules or any(name == s or name.startswith(s + ".") for s in self.scope)


RULES = (
    Rule(("streamwarden",), ("airflow",), "the core runs without Airflow"),
    Rule(("streamwarden.warden", "streamwarden.local", "streamwarden.runfiles", "streamwarden.logs",
          "streamwarden.kafka", "streamwarden.tables", "streamwarden.maintenance", "streamwarden.validation",
          "streamwarden.control", "streamwarden.session_restarts", "streamwarden.recovery", "streamwarden.upgrade",
          "streamwarden.dashboard", "streamwarden.stream_host"),
         ("pyspark",),
         "the warden side runs without Spark",
         modules=SHARED),
    Rule(("streamwarden.stream",), ("streamwarden.warden", "streamwarden.local"),
         "the Spark job does not depend on its supervisor"),
    Rule(("streamwarden_airflow", "dags"), ("pyspark",), "Airflow workers run without Spark"),
    Rule(("streamwarden.tables", "streamwarden.maintenance", "streamwarden.validation", "streamwarden.recovery",
          "streamwarden.session_restarts", "streamwarden.upgrade", "streamwarden.dashboard", "streamwarden.runfiles"),
         ("streamwarden.stream",),
         "the tables (offset ranges, commits, content) and the run's files are the floor the stream stands on; what "
         "reads or repairs them, or upgrades the stream, does not depend on the job that writes them"),
)


FLOORS = (
    ("streamwarden.settings", "streamwarden.settings_loading", "streamwarden.paths", "streamwarden.session_handler",
     "streamwarden.failures", "streamwarden.wire", "streamwarden.atomic", "streamwarden.processes",
     "streamwarden.storage", "streamwarden.schedules", "streamwarden.params", "streamwarden.process_setup",
     "streamwarden.durations", "streamwarden.secrets", "streamwarden.approvals", "streamwarden.alerts"),
    ("streamwarden.tables", "streamwarden.kafka", "streamwarden.runfiles", "streamwarden.logs",
     "streamwarden.testing"),
    ("streamwarden.stream", "streamwarden.warden", "streamwarden.control"),
    ("streamwarden.maintenance", "streamwarden.session_restarts", "streamwarden.upgrade", "streamwarden.validation",
     "streamwarden.local", "streamwarden.stream_host"),
    ("streamwarden.recovery",),
    ("streamwarden.dashboard", "streamwarden.cli", "streamwarden.__main__", "streamwarden.settings_reference"),
)
"""The core's floors, bottom first: shared contracts; the tables, the broker's client and the run files; the job
and its supervisor; the capabilities around them; recovery, which uses them; the page and the command line."""


@dataclass(frozen=True)
class Violation:
    module: str
    reaches: str
    path: tuple[str, ...]
    why: str

    def __str__(self) -> str:
        return f"{self.module} reaches {self.reaches} via {' -> '.join(self.path)} ({self.why})"


def module_files(roots: dict[str, Path]) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under each root (``{package prefix: folder}``)."""
    modules: dict[str, Path] = {}
    for prefix, folder in roots.items():
        for path in sorted(folder.rglob("*.py")):
            parts = [prefix, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(p for p in parts if p)] = path
    return modules


def imports_of(path: Path, module: str) -> set[str]:
    """Every module ``path`` imports, anywhere in the file, as absolute dotted names."""
    found: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def check(roots: dict[str, Path], rules: tuple[Rule, ...] = RULES) -> list[Violation]:
    """Every module of ``roots`` that breaks a rule, with the chain of imports that does it."""
    modules = module_files(roots)
    graph = {name: {m for imported in imports_of(path, name) for m in _parents(imported)}
             for name, path in modules.items()}
    violations = []
    for name in modules:
        for rule in rules:
            if not rule.applies_to(name):
                continue
            reached: set[str] = set()
            trail = {name: (name,)}
            queue = [name, *(p for p in _parents(name)[:-1] if p in modules)]
            for parent in queue[1:]:
                trail[parent] = (name, parent)
            while queue:
                current = queue.pop()
                for target in sorted(graph.get(current, ())):
                    if target in trail:
                        continue
                    trail[target] = (*trail[current], target)
                    hit = next((f for f in rule.forbidden if target == f or target.startswith(f + ".")), None)
                    if hit is not None and hit not in reached:
                        reached.add(hit)
                        violations.append(Violation(name, hit, trail[target], rule.why))
                    elif target in modules:
                        queue.append(target)
    return violations


def project_roots(base: Path = REPO) -> dict[str, Path]:
    return {"streamwarden": base / "include" / "streamwarden",
            "streamwarden_airflow": base / "plugins" / "streamwarden_airflow", "dags": base / "dags"}


def test_the_project_keeps_its_import_boundaries() -> None:
    violations = check(project_roots())
    assert not violations, "\n".join(map(str, violations))


def floor_of(module: str) -> int | None:
    """The index in :data:`FLOORS` of the floor ``module`` stands on (None: the package itself)."""
    return next((i for i, floor in enumerate(FLOORS)
                 for member in floor if module == member or module.startswith(member + ".")), None)


def arrows_back_up(roots: dict[str, Path]) -> list[str]:
    """Every direct import of a module on a higher floor than the importer's own."""
    found = []
    for name, path in module_files(roots).items():
        below = floor_of(name)
        for imported in sorted(imports_of(path, name)):
            above = floor_of(imported)
            if below is not None and above is not None and above > below:
                found.append(f"{name} (floor {below}) imports {imported} (floor {above})")
    return found


def test_every_core_module_stands_on_a_floor_and_imports_nothing_above_it() -> None:
    roots = {"streamwarden": project_roots()["streamwarden"]}
    unplaced = [name for name in module_files(roots) if name != "streamwarden" and floor_of(name) is None]
    assert unplaced == [], "modules on no floor of FLOORS: " + ", ".join(unplaced)
    arrows = arrows_back_up(roots)
    assert arrows == [], "\n".join(arrows)


def test_an_import_from_a_higher_floor_is_found(tmp_path: Path) -> None:
    core = tmp_path / "include" / "streamwarden"
    (core / "tables").mkdir(parents=True)
    (core / "tables" / "ranges.py").write_text("from streamwarden.dashboard.series import f\n")
    (core / "dashboard").mkdir()
    (core / "dashboard" / "series.py").write_text("from streamwarden.tables.ranges import g\n")
    assert arrows_back_up({"streamwarden": core}) == [
        "streamwarden.tables.ranges (floor 1) imports streamwarden.dashboard.series (floor 5)",
        "streamwarden.tables.ranges (floor 1) imports streamwarden.dashboard.series.f (floor 5)"]


def test_a_forbidden_import_is_caught_even_through_another_module(tmp_path: Path) -> None:
    core = tmp_path / "include" / "streamwarden"
    for folder in ("warden", "stream", "runfiles"):
        (core / folder).mkdir(parents=True)
        (core / folder / "__init__.py").write_text('"""x"""\n')
    (core / "__init__.py").write_text('"""x"""\n')
    (core / "runfiles" / "view.py").write_text("def f():\n    from pyspark.sql import SparkSession\n")
    (core / "warden" / "health.py").write_text("from streamwarden.runfiles import view\n")
    (core / "stream" / "runner.py").write_text("from ..warden.health import f\nimport pyspark\n")
    (tmp_path / "plugins" / "streamwarden_airflow").mkdir(parents=True)
    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "d.py").write_text("from airflow.sdk import DAG\nfrom streamwarden.warden import health\n")

    found = {(v.module, v.reaches) for v in check(project_roots(tmp_path))}

    assert found == {
        ("streamwarden.runfiles.view", "pyspark"),
        ("streamwarden.warden.health", "pyspark"),  # through runfiles.view
        ("streamwarden.stream.runner", "streamwarden.warden"),  # a relative import
        ("dags.d", "pyspark"),  # a DAG file reaches Spark through the core
    }
    (violation,) = [v for v in check(project_roots(tmp_path)) if v.module == "streamwarden.warden.health"]
    assert violation.path == ("streamwarden.warden.health", "streamwarden.runfiles.view", "pyspark")


def test_the_warden_side_imports_no_spark_or_airflow_in_a_real_interpreter() -> None:
    modules = [name for name in module_files(project_roots())
               if name.startswith(("streamwarden.warden", "streamwarden.local", "streamwarden.runfiles",
                                   "streamwarden.kafka", "streamwarden.tables")) or name in SHARED]
    script = ("import importlib, json, sys\n"
              f"for name in {modules!r}: importlib.import_module(name)\n"
              "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'pyspark', 'airflow'})))\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert len(modules) > 20 and json.loads(run.stdout.splitlines()[-1]) == []
