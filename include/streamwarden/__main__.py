"""``python -m streamwarden`` is the ``streamwarden`` command."""

import sys

from streamwarden.cli import main

sys.exit(main())
