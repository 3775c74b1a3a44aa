"""``python -m actors.cli``: the same as the ``session-actors`` command."""

import sys

from .main import main

sys.exit(main())
