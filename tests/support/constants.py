"""Secrets and the sources file every test, chaos scenario and benchmark shares."""

from __future__ import annotations

import base64

GITHUB_SECRET = "gh-test-secret"
STRIPE_SECRET = "whsec_test_stripe"
SLACK_SECRET = "slack-test-secret"
STANDARD_SECRET = "whsec_" + base64.b64encode(b"standard-test-secret-32-bytes!!").decode()

SOURCES_TOML = f"""
[[sources]]
name = "github"
provider = "github"
secrets = ["{GITHUB_SECRET}"]

[[sources]]
name = "stripe"
provider = "stripe"
secrets = ["{STRIPE_SECRET}"]

[[sources]]
name = "slack"
provider = "slack"
secrets = ["{SLACK_SECRET}"]

[[sources]]
name = "standard"
provider = "standard"
secrets = ["{STANDARD_SECRET}"]
max_body_bytes = 4096
"""

SECRETS = {
    "github": GITHUB_SECRET,
    "stripe": STRIPE_SECRET,
    "slack": SLACK_SECRET,
    "standard": STANDARD_SECRET,
}
