"""spark-submit entry point of the stream: ``spark-submit jobs/stream.py`` (settings from STREAMWARDEN_*)."""

from __future__ import annotations

import sys

from streamwarden.failures import EXIT_CODES, FailureClass
from streamwarden.job import run_stream
from streamwarden.settings import SettingsError, load_settings


def main() -> int:
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(f"streamwarden: {exc}", file=sys.stderr)
        return EXIT_CODES[FailureClass.CONFIG]
    return run_stream(settings)


if __name__ == "__main__":
    sys.exit(main())
