"""spark-submit entry point of the stream: ``spark-submit jobs/stream.py`` (settings from STREAMWARDEN_*)."""

from __future__ import annotations

import sys

from streamwarden.stream.runner import run_stream_from_environment

if __name__ == "__main__":
    sys.exit(run_stream_from_environment())
