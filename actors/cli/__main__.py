"""``python -m actors.cli``: the same as the ``session-actors`` command."""

import sys

from ._main import main

sys.exit(main())
