"""The provider registry: one ``Provider`` per name, each declared in its own module.

Everything hookd does per provider (verify, envelope, sign a sample, validate
``[sources.reconcile]``, find its list adapter) goes through ``PROVIDERS``, so a new
provider is a module and one line below.
"""

from __future__ import annotations

from hookd.providers import (
    asana,
    basic,
    bitbucket,
    custom_hmac,
    discord,
    github,
    gitlab,
    hubspot,
    intercom,
    linear,
    mailgun,
    meta,
    okta,
    paddle,
    pagerduty,
    pubsub,
    sendgrid,
    shared_token,
    shopify,
    slack,
    sns,
    square,
    standard,
    stripe,
    twilio,
    twitch,
    zendesk,
    zoom,
)
from hookd.providers.base import Provider

# In the order hookd lists them (the OpenAPI enum, the line on an unknown provider).
PROVIDERS: dict[str, Provider] = {}


def register(provider: Provider) -> None:
    """Make ``provider = "<name>"`` mean ``provider`` in the sources file."""
    if provider.name in PROVIDERS:
        raise ValueError(f"provider {provider.name!r} is already registered")
    PROVIDERS[provider.name] = provider


register(github.PROVIDER)
register(stripe.PROVIDER)
register(slack.PROVIDER)
register(standard.PROVIDER)
register(custom_hmac.PROVIDER)
register(shared_token.PROVIDER)
register(shopify.PROVIDER)
register(gitlab.PROVIDER)
register(bitbucket.PROVIDER)
register(linear.PROVIDER)
register(paddle.PROVIDER)
register(square.PROVIDER)
register(zendesk.PROVIDER)
register(intercom.PROVIDER)
register(sendgrid.PROVIDER)
register(discord.PROVIDER)
register(zoom.PROVIDER)
register(twilio.PROVIDER)
register(hubspot.PROVIDER)
register(pagerduty.PROVIDER)
register(mailgun.PROVIDER)
# Senders with a handshake of their own, or only a shared credential.
register(meta.PROVIDER)
register(twitch.PROVIDER)
register(asana.PROVIDER)
register(okta.PROVIDER)
register(basic.PROVIDER)
# Senders whose verifying keys are fetched from a URL (Provider.key_fetch).
register(sns.PROVIDER)
register(pubsub.PROVIDER)
