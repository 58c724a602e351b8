"""Provider adapters: ``verify`` and ``envelope`` as pure functions per provider."""

from __future__ import annotations

from hookd.providers import github, slack, standard, stripe
from hookd.providers.base import Provider

PROVIDERS: dict[str, Provider] = {
    p.name: p for p in (github.PROVIDER, stripe.PROVIDER, slack.PROVIDER, standard.PROVIDER)
}
