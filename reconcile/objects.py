"""``[sources.order] fetch = true``: the full object of a (thin) event, fetched from the
provider's API before the handlers run, through the source's reconcile adapter
(``ListAdapter.fetch_object``) and the same client a reconciliation run uses: its
authentication, pacing, rate-limit waits and retries. Processing is handed this as its
``fetch``; a failure is an attempt's failure, retried like a handler's."""

from __future__ import annotations

import time
from typing import Any

import httpx

from hookd.sources import Source
from reconcile.http import Api, answer_limit, api_origin
from reconcile.providers import adapter_class

# The longest one fetch waits on the provider's rate limit before it fails (and the
# event is retried later): far less than a reconciliation run may.
MAX_WAIT_S = 20.0


class ObjectFetcher:
    def __init__(self, client: httpx.AsyncClient, *, max_wait_s: float = MAX_WAIT_S) -> None:
        self._client = client
        self._max_wait_s = max_wait_s

    async def __call__(self, source: Source, document: Any) -> Any:
        adapter = adapter_class(source.provider)
        api = Api(
            self._client,
            lambda: adapter.auth_headers(source),
            min_interval_s=adapter.request_interval_s(source),
            max_wait_s=self._max_wait_s,
            source=source.name,
            origin=api_origin(source.config),
            max_answer_bytes=answer_limit(source.config),
        )
        return await adapter(source, api, {}, time.time()).fetch_object(document)
