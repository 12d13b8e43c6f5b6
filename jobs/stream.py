"""spark-submit entry point of the stream: ``spark-submit jobs/stream.py [--standby]`` (settings from STREAMWARDEN_*;
``--standby``: a warm standby that waits for the checkpoint's lease)."""

from __future__ import annotations

import sys

from streamwarden.stream.runner import run_stream_from_environment

if __name__ == "__main__":
    sys.exit(run_stream_from_environment(standby=sys.argv[1:] == ["--standby"]))
