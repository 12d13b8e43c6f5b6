"""Upgrading the stream to a new release: Params, the release files, the compatibility check (state layout and
table schema), the rollback point, and the steps of ``upgrade_stream`` (drain, copy, evolve, start, watch,
roll back)."""
