"""Entry point: ``PYTHONPATH=bench python -m streamwarden_bench --help``."""

import sys

from .cli import main

sys.exit(main())
