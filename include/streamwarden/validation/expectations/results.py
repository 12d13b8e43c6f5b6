"""GX validation results as findings naming the failing rows, and as what the Data Docs show of them.

GX counts the rows an expectation fails on exactly, but names at most a few of them, and its own way to list
them all walks the rows in Python (two minutes for a million failing rows). So for each failed row-wise
expectation the failing rows are found from the expectation's own condition metric (the boolean mask GX
computed them with): their topic, partition and offset, grouped per topic-partition, make one finding each
(count exact, offsets as ranges). The result kept for the Data Docs gets the first of those rows as its
``unexpected_index_list`` under ``unexpected_index_column_names`` (topic, partition, offset), so each page
names the failing rows. An expectation on the whole table (a type, a statistic) is one finding for the
table (topic ``*``, partition -1); one that could not be evaluated is one too, saying why.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from streamwarden.validation.expectations.gx import (
    ExpectationValidationResult,
    MetricConfiguration,
    Validator,
    get_metric_kwargs,
)
from streamwarden.validation.expectations.suite import INDEX_COLUMNS, finding_class, source
from streamwarden.validation.findings import Finding, FindingClass, Interval

if TYPE_CHECKING:
    from great_expectations.expectations.expectation import Expectation

WHOLE_TABLE = ("*", -1)
"""Topic and partition of a finding about a whole table."""
ROWS_SHOWN = 200
"""Failing rows an expectation's Data Docs page names."""
RESULT_FORMAT: dict[str, Any] = {"result_format": "BASIC", "partial_unexpected_count": 20}
"""GX's exact counts and a few failing values; the failing rows are found from the condition (above)."""
_PARTITION_COLUMNS = ("quarantine_offsets", "newest_at", "newest_column", "last_offset")
"""Columns of the partition frame a finding about a topic-partition reads."""


def failing_rows(validator: Validator, expectation: Expectation, frame: pd.DataFrame) -> pd.DataFrame | None:
    """The rows of ``frame`` a row-wise ``expectation`` fails on (the columns naming them and those it reads),
    in frame order; None for an expectation on the whole table."""
    metric = getattr(expectation, "map_metric", None)
    if not metric:
        return None
    name = f"{metric}.condition"
    kwargs = get_metric_kwargs(name, configuration=expectation.configuration,
                               runtime_configuration={"result_format": RESULT_FORMAT})
    try:
        condition = validator.get_metric(MetricConfiguration(name, kwargs["metric_domain_kwargs"],
                                                             kwargs["metric_value_kwargs"]))
    except Exception:  # GX raises many kinds; the finding then counts the rows without naming them
        return None
    mask = condition[0] if isinstance(condition, tuple) else condition
    labels = mask.index.to_numpy()[np.asarray(mask.to_numpy(dtype=bool, na_value=False))]
    domain = [c for c in _domain(expectation) if c in frame.columns and c not in INDEX_COLUMNS]
    shown = [c for c in frame.columns if c in INDEX_COLUMNS or c in _PARTITION_COLUMNS] + domain
    failing: pd.DataFrame = frame.loc[labels, list(dict.fromkeys(shown))]
    return failing


def findings(table: str, expectation: Expectation, result: ExpectationValidationResult,
             rows: pd.DataFrame | None, *, max_ranges: int) -> list[Finding]:
    """The findings of one failed expectation: one per topic-partition of its failing rows, or one for the
    table."""
    kind = finding_class(expectation)
    what = describe(expectation)
    message = raised(result)
    if message is not None:
        return [Finding(kind, table, *WHOLE_TABLE, (), 0, f"{what} could not be evaluated: {message}")]
    if rows is None or rows.empty:
        document = result.result or {}
        observed, failing = document.get("observed_value"), int(document.get("unexpected_count") or 0)
        seen = "" if observed is None else f": observed {_short(observed)}"
        counted = f": {failing:,} row(s) fail" if failing else ""
        return [Finding(kind, table, *WHOLE_TABLE, (), failing, f"{what} failed{seen}{counted}")]
    found = []
    for (topic, partition), group in rows.groupby(["topic", "partition"], observed=True, sort=True):
        found.append(_partition_finding(table, kind, what, (str(topic), int(partition)),  # type: ignore[call-overload]
                                        group, max_ranges=max_ranges))
    return found


def _partition_finding(table: str, kind: FindingClass, what: str, where: tuple[str, int], group: pd.DataFrame,
                       *, max_ranges: int) -> Finding:
    topic, partition = where
    if "offset" in group.columns:
        offsets = np.unique(group["offset"].to_numpy(dtype=np.int64))
        sample = _sample(group)
        detail = (f"{what}: {len(group):,} row(s) at {len(offsets):,} offset(s) fail"
                  + (f", e.g. {sample}" if sample else ""))
        return Finding(kind, table, topic, partition, runs(offsets, max_ranges), len(group), detail)
    row = group.iloc[0]
    if "quarantine_share" in group.columns and not pd.isna(row.get("quarantine_share")):
        quarantined = int(row.get("quarantine_offsets", 0))
        return Finding(kind, table, topic, partition, (), quarantined,
                       f"{what}: {quarantined:,} offset(s) in quarantine, {row['quarantine_share']:.2%} of the "
                       f"topic-partition's")
    last = row.get("last_offset")
    ranges: tuple[Interval, ...] = () if last is None or pd.isna(last) else ((int(last), int(last) + 1),)
    age = float(row["newest_age_minutes"])
    return Finding(kind, table, topic, partition, ranges, len(ranges),
                   f"{what}: the newest row ({row.get('newest_column')} {row.get('newest_at')}) is "
                   f"{age:,.0f} minutes old")


def raised(result: ExpectationValidationResult) -> str | None:
    """Why GX could not evaluate the expectation (its message), or None when it could. GX keeps the error at
    the top of ``exception_info``, or under the metric that failed."""
    info: dict[str, Any] = result.exception_info or {}
    for entry in (info, *(v for v in info.values() if isinstance(v, dict))):
        if entry.get("raised_exception"):
            lines = str(entry.get("exception_message") or "an error").strip().splitlines()
            return lines[-1] if lines else "an error"
    return None


def runs(offsets: npt.NDArray[np.int64], limit: int) -> tuple[Interval, ...]:
    """The first ``limit`` runs of consecutive offsets of sorted, distinct ``offsets``, as ``[start, end)``."""
    if not len(offsets):
        return ()
    breaks = np.flatnonzero(np.diff(offsets) != 1)
    starts = np.concatenate(([0], breaks + 1))[:limit]
    ends = np.concatenate((breaks, [len(offsets) - 1]))[:limit]
    return tuple((int(offsets[s]), int(offsets[e]) + 1) for s, e in zip(starts, ends, strict=True))


def describe(expectation: Expectation) -> str:
    """``expect_column_values_to_be_between(amount, min_value=0, max_value=10) [suite]``."""
    kwargs = {k: v for k, v in expectation.configuration.kwargs.items()
              if v is not None and k not in ("batch_id", "meta", "description", "result_format")}
    domain = [str(kwargs.pop(k)) for k in ("column", "column_A", "column_B") if k in kwargs]
    if "column_list" in kwargs:
        domain.append(", ".join(map(str, kwargs.pop("column_list"))))
    shown = ", ".join([*domain, *(f"{k}={_short(v)}" for k, v in kwargs.items())])
    return f"{expectation.expectation_type}({shown}) [{source(expectation)}]"


def for_docs(result: ExpectationValidationResult, rows: pd.DataFrame | None, expectation: Expectation) -> None:
    """Make ``result`` ready for the Data Docs: the first failing rows named by topic, partition and offset;
    nothing that is not JSON (GX's frame of unexpected rows)."""
    document: dict[str, Any] = result.result if result.result is not None else {}
    document.pop("unexpected_rows", None)
    if rows is None or rows.empty:
        return
    named = [c for c in rows.columns if c in INDEX_COLUMNS]
    domain = [c for c in _domain(expectation) if c in rows.columns and c not in named]
    first = rows.head(ROWS_SHOWN)
    listed = [{column: _plain(value) for column, value in zip(first.columns, values, strict=True)
               if column in named or column in domain}
              for values in first.itertuples(index=False, name=None)]
    values = [tuple(entry.get(c) for c in domain) for entry in listed]
    counts = Counter(v[0] if len(v) == 1 else (", ".join(map(str, v)) if v else "") for v in values)
    document.update({
        "unexpected_index_column_names": named,
        "unexpected_index_list": listed,
        "partial_unexpected_index_list": listed[:20],
        "partial_unexpected_counts": [{"value": v, "count": n} for v, n in counts.most_common(20)],
        "partial_unexpected_list": document.get("partial_unexpected_list") or [v[0] if len(v) == 1 else list(v)
                                                                              for v in values[:20]],
    })
    result.result = document


def _domain(expectation: Expectation) -> Sequence[str]:
    kwargs = expectation.configuration.kwargs
    columns = [kwargs[k] for k in ("column", "column_A", "column_B") if isinstance(kwargs.get(k), str)]
    return [*columns, *(kwargs.get("column_list") or [])]


def _sample(group: pd.DataFrame) -> str:
    domain = [c for c in group.columns if c not in INDEX_COLUMNS]
    if not domain:
        return ""
    first = group.iloc[0]
    shown = ", ".join(f"{c}={_short(_plain(first[c]))}" for c in domain)
    return f"offset {int(first['offset'])}: {shown}"


def _plain(value: Any) -> Any:
    """A JSON value: numbers and strings as they are, times as ISO text, missing as None."""
    if value is None or (not isinstance(value, list | tuple | dict | np.ndarray) and pd.isna(value)):
        return None
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    if isinstance(value, int | float | str | bool):
        return value
    return str(value)


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
