"""The ``hookd`` command."""

from __future__ import annotations

from hookd.cli.main import main

__all__ = ["main"]
