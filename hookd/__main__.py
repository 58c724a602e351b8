"""``python -m hookd``: the same as the ``hookd`` console script."""

from __future__ import annotations

from hookd.cli import main

raise SystemExit(main())
