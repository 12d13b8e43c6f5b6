"""Great Expectations imported with its analytics off, and the ephemeral context a run validates in.

``GX_ANALYTICS_ENABLED=False`` is set here, before ``great_expectations`` is first imported, so that no
usage event leaves the machine; every module of this package imports GX through this one. The context is
ephemeral (nothing of it is kept but its Data Docs site, a folder given by the caller) and shows no
progress bars.
"""

from __future__ import annotations

import os

os.environ["GX_ANALYTICS_ENABLED"] = "False"  # read when GX is imported: it must be set first

from pathlib import Path
from typing import Any

import great_expectations as gx
import great_expectations.execution_engine.pandas_execution_engine as pandas_engine
import great_expectations.expectations as _expectations
from great_expectations.core.expectation_validation_result import (
    ExpectationSuiteValidationResult,
    ExpectationValidationResult,
)
from great_expectations.core.run_identifier import RunIdentifier
from great_expectations.data_context.data_context.ephemeral_data_context import EphemeralDataContext
from great_expectations.data_context.types.resource_identifiers import (
    ExpectationSuiteIdentifier,
    ValidationResultIdentifier,
)
from great_expectations.expectations.expectation import Expectation
from great_expectations.expectations.registry import get_metric_kwargs
from great_expectations.util import convert_to_json_serializable
from great_expectations.validator.metric_configuration import MetricConfiguration
from great_expectations.validator.validation_statistics import calc_validation_statistics
from great_expectations.validator.validator import Validator

expectations: Any = _expectations
"""``great_expectations.expectations``: the expectation classes (GX does not declare them exported)."""
SITE = "streamwarden"
"""The name of the Data Docs site."""

# GX fingerprints a pandas batch below HASH_THRESHOLD bytes by hashing every row (3 s for 10M rows); the
# fingerprint is only a batch marker nothing here reads, so batches are never hashed.
pandas_engine.HASH_THRESHOLD = 0

__all__ = ["SITE", "EphemeralDataContext", "Expectation", "ExpectationSuiteIdentifier",
           "ExpectationSuiteValidationResult", "ExpectationValidationResult", "MetricConfiguration", "RunIdentifier",
           "ValidationResultIdentifier", "Validator", "calc_validation_statistics", "context",
           "convert_to_json_serializable", "expectations", "get_metric_kwargs", "gx"]


def context(docs: Path) -> EphemeralDataContext:
    """A new ephemeral context whose Data Docs site is the folder ``docs``."""
    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = {"globally": False, "metric_calculations": False}  # type: ignore[assignment]
    site: dict[str, Any] = {
        "class_name": "SiteBuilder",
        "show_how_to_buttons": False,
        "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(docs)},
        "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
    }
    ctx.add_data_docs_site(SITE, site)  # type: ignore[arg-type]
    return ctx
