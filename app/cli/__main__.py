"""``python -m app.cli``: ``magis`` without the installed script."""

import sys

from . import main

sys.exit(main())
