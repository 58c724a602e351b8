"""The baseline for ``bench/ingest.py``: a Starlette app that does only what any
webhook receiver must do — route the request, read the whole body, answer 202
with a small JSON body. No signature check, no database.

Run it the way the benchmark does (same uvicorn settings as ``hookd serve``)::

    .venv/bin/python -m uvicorn bare_app:app --app-dir bench --host 127.0.0.1 \
        --port 8001 --no-access-log --log-level warning --no-server-header
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route


async def receive(request: Request) -> Response:
    body = await request.body()
    return JSONResponse({"status": "accepted", "bytes": len(body)}, status_code=202)


async def healthz(_: Request) -> Response:
    return JSONResponse({"status": "ok"})


app = Starlette(
    routes=[
        Route("/hooks/{source}", receive, methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
    ]
)
