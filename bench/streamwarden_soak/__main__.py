"""``python -m streamwarden_soak``."""

import sys

from .cli import main

sys.exit(main())
