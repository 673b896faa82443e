"""``python -m botkit``: see ``botkit.cli``."""

from botkit.cli import main

raise SystemExit(main())
