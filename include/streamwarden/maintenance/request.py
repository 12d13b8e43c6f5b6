"""What one maintenance run is asked to do: the validated form of the DAG's Params (or the CLI's flags)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from streamwarden.failures import ConfigError
from streamwarden.maintenance.plan import parse_partition_filter
from streamwarden.maintenance.settings import MaintenanceSettings, MiB
from streamwarden.params import dry_run_param
from streamwarden.settings import Settings
from streamwarden.tables.location import requested_tables


@dataclass(frozen=True)
class MaintenanceRequest:
    """Tables, partition filter, sizes and dry run of one run, every value checked."""

    tables: tuple[str, ...]
    target_file_size: int
    small_file_bytes: int
    min_files: int
    dry_run: bool
    partition_filter: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> MaintenanceRequest:
        return cls(**{**document, "tables": tuple(document["tables"])})


def request_from_params(params: Mapping[str, Any], settings: Settings,
                        maintenance: MaintenanceSettings) -> MaintenanceRequest:
    """Check the Params of a run (absent ones take the settings' values); a CONFIG error names each bad one.

    Params: ``tables`` (list; empty: every table of the pipeline), ``partition_filter``
    (``column=value,...``), ``target_file_size_mib``, ``min_files``, ``dry_run``.
    """
    problems: list[str] = []
    tables = requested_tables(params.get("tables"), settings, problems)
    size_mib = _given(params, "target_file_size_mib", maintenance.target_file_size // MiB)
    if not isinstance(size_mib, int) or isinstance(size_mib, bool) or size_mib < 1:
        problems.append(f"Param target_file_size_mib: expected a whole number of MiB >= 1, got {size_mib!r}")
        size_mib = 1
    min_files = _given(params, "min_files", maintenance.min_files)
    if not isinstance(min_files, int) or isinstance(min_files, bool) or min_files < 2:
        problems.append(f"Param min_files: expected a whole number >= 2, got {min_files!r}")
    dry_run = dry_run_param(params, problems, default=False)  # a scheduled run compacts
    partition_filter: dict[str, str] = {}
    try:
        partition_filter = parse_partition_filter(str(params.get("partition_filter") or ""))
    except ConfigError as exc:
        problems.append(f"Param {exc.message}")
    if problems:
        raise ConfigError("; ".join(problems), details={"params": dict(params)})
    target = int(size_mib) * MiB
    return MaintenanceRequest(tables, target, int(target * maintenance.small_file_ratio), int(min_files),
                              dry_run, partition_filter)


def _given(params: Mapping[str, Any], name: str, default: int) -> Any:
    value = params.get(name)
    return default if value is None else value
