"""Provider list APIs for reconciliation, one ``ListAdapter`` per provider module.

The poller finds a source's adapter through the provider registry: each
``hookd.providers`` declaration names its adapter ("module:Class") in
``Provider.reconcile``, and ``adapter_class`` imports it when a run first needs it.
"""

from __future__ import annotations

import importlib

from hookd.errors import ReconcileError
from hookd.providers import PROVIDERS
from reconcile.providers.base import ListAdapter


def adapter_class(provider: str) -> type[ListAdapter]:
    """The list adapter ``provider`` declares, or ``ReconcileError`` when it has none."""
    spec = PROVIDERS[provider].reconcile
    if spec is None:
        raise ReconcileError("unsupported", f"{provider} has no list API")
    module, _, name = spec.adapter.partition(":")
    found = getattr(importlib.import_module(module), name, None)
    if not (isinstance(found, type) and issubclass(found, ListAdapter)):
        raise TypeError(f"{spec.adapter} (the {provider} list adapter) is not a ListAdapter")
    return found
