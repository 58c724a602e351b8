"""The OpenAPI document's committed snapshot (``tests/integration/openapi.snapshot.json``),
which ``tests/integration/test_openapi_schemas.py`` compares the generated document with.

After a deliberate change to a route, a model or a description, write it again and
review the diff: ``python -m tests.support.openapi_snapshot``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hookd.web import openapi

SNAPSHOT = Path(__file__).parent.parent / "integration" / "openapi.snapshot.json"


def current() -> dict[str, Any]:
    """The generated document as the snapshot holds it: the package's version left out
    (it changes with every release, not with the API)."""
    document = openapi.document()
    document["info"]["version"] = "(the package's version)"
    return document


def text(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    SNAPSHOT.write_text(text(current()), encoding="utf-8")
    print(f"wrote {SNAPSHOT}")
