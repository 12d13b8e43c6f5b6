"""``python -m streamwarden_longrun``: see :mod:`streamwarden_longrun.cli`."""

import sys

from .cli import main

sys.exit(main())
