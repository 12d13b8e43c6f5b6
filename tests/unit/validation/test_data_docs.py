"""The Data Docs site of a validation run: a page GX could not write or render is named, with GX's reason."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from streamwarden.validation.expectations import docs
from streamwarden.validation.expectations.gx import context, gx
from streamwarden.validation.expectations.run import _Run


def test_a_page_gx_could_not_write_is_named_with_its_reason_and_the_others_are_built(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    run = _Run(ctx, ctx.data_sources.add_pandas("streamwarden"), "r1", datetime.now(UTC), max_ranges=10)
    frame = pd.DataFrame({"topic": ["t", "t"], "partition": [0, 0], "offset": [0, 1], "qty": [5, 50]})
    for name in ("written", "blocked"):
        run.validate(name, "t", frame, [gx.expectations.ExpectColumnValuesToBeBetween(column="qty", max_value=9)])
    # a file where GX's folder for the batch "blocked" must go: GX logs the error and skips that page
    (tmp_path / "validations").mkdir()
    (tmp_path / "validations" / "blocked").write_text("in the way")

    site = docs.build(ctx, tmp_path, run.keys)

    assert set(site.pages) == {"written"} and site.pages["written"].is_file()
    assert site.index.is_file()
    [note] = site.notes()
    assert note.startswith("Data Docs: no page for blocked: 1 render error(s) in this build, the last: "
                           "NotADirectoryError")
    assert str(tmp_path / "validations" / "blocked") in note
