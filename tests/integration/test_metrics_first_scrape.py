"""Every documented metric family is there from the first scrape of a fresh process, each
of its known series at 0: a dashboard has a line and an ``absent()`` alert a series
before the first event, rejection or run.

The families, their labels and the rejection reasons are read from the README's "Health
and metrics" (and checked against docs/operations.md), so the docs and the code stay in
step. Real ``hookd serve`` and ``hookd worker`` processes on PostgreSQL (and a private
Redis for the worker).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ingest import metrics as ingest_metrics
from tests.support.constants import SECRETS
from tests.support.server import ROOT, HookdServer, HookdWorker, RedisServer
from tests.support.waiting import wait_for
from tests.unit.webhook_requests import SIGNATURE_REASONS

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

TOKEN = "first-scrape-metrics-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SOURCES = ("github", "stripe")
# Where nothing answers: the schedule is off, no run is made.
NOWHERE = "http://127.0.0.1:9"
# Each source has a destination, so that the destination families have series to show.
DESTINATION_SECRET = "whsec_" + "Zmlyc3Qtc2NyYXBlLWRlc3RpbmF0aW9uLXNlY3JldA=="
FAMILY_ROW = re.compile(r"^\s*\| `(hookd_[a-z_]+)` \|([^|]*)\|([^|]*)\|([^|]*)\|\s*$")
LABEL_VALUES = re.compile(r"`([a-z_]+)` \(([^)]*)\)")
BACKTICKED = re.compile(r"`([a-z_]+)`")


@dataclass(frozen=True)
class Documented:
    name: str
    labels: tuple[str, ...]
    values: dict[str, tuple[str, ...]]  # label -> its documented values
    kind: str  # "per process" | "database" | "sources file"
    served_by: str

    def family(self) -> str:
        """The name prometheus_client's parser gives the family (counters lose _total)."""
        return self.name.removesuffix("_total")


def readme_section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("## Health and metrics")
    return text[start : text.index("\n## ", start + 1)]


def documented() -> list[Documented]:
    found = []
    for line in readme_section().splitlines():
        row = FAMILY_ROW.match(line)
        if row is None:
            continue
        name, labels_cell, kind, served = (cell.strip() for cell in row.groups())
        values = {
            label: tuple(BACKTICKED.findall(inner))
            for label, inner in LABEL_VALUES.findall(labels_cell)
        }
        # The label names: backticked words outside parentheses, before any ":".
        outside = re.sub(r"\([^)]*\)", "", labels_cell).split(":")[0]
        labels = tuple(BACKTICKED.findall(outside))
        found.append(Documented(name, labels, values, kind, served))
    return found


def documented_reasons() -> tuple[list[str], list[str]]:
    """(reasons per source, reasons of source="_unknown") as the README lists them."""
    text = " ".join(readme_section().split())
    per_source = text[
        text.index("Rejection reasons, per source:") : text.index('source="_unknown"')
    ]
    unknown = text[text.index('source="_unknown"') : text.index("`hookd serve --workers N`")]
    return BACKTICKED.findall(per_source), BACKTICKED.findall(unknown)


# The retention sources_toml sets, as hookd_retention_days must show it: the file's
# [retention] under each source's own, the defaults where neither says.
RETENTION_DAYS = {
    "github": {"body": 3.0, "event": 30.0, "dead": 90.0, "key": 400.0},
    "stripe": {"body": 3.0, "event": 14.0, "dead": 60.0, "key": 45.0},
}


def sources_toml(path: Path) -> Path:
    path.write_text(
        f"""
[retention]
keep_body_days = 3

[[sources]]
name = "github"
provider = "github"
secrets = ["{SECRETS["github"]}"]

[sources.reconcile]
api_url = "{NOWHERE}"
allow_insecure = true
token = "ghp_first_scrape"
hook = "repos/hookd/hookd/hooks/1"

[[sources.destinations]]
name = "archive"
url = "{NOWHERE}/archive"
allow_insecure = true
secret = "{DESTINATION_SECRET}"

[[sources]]
name = "stripe"
provider = "stripe"
secrets = ["{SECRETS["stripe"]}"]

[sources.reconcile]
api_url = "{NOWHERE}"
allow_insecure = true
token = "sk_test_first_scrape"

[sources.forward]
url = "{NOWHERE}/forward"
allow_insecure = true
secret = "{DESTINATION_SECRET}"

[sources.retention]
keep_events_days = 14
keep_dead_days = 60
keep_keys_days = 45
"""
    )
    return path


Samples = dict[str, list[tuple[dict[str, str], float]]]


def parse(text: str) -> tuple[set[str], Samples]:
    """(family names, family -> its samples but the _created ones)."""
    families: set[str] = set()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        families.add(family.name)
        samples[family.name] = [
            (s.labels, s.value) for s in family.samples if not s.name.endswith("_created")
        ]
    return families, samples


def check_zero_series(doc: Documented, samples: Samples, sources: tuple[str, ...]) -> list[str]:
    """What is missing or not 0 among the series of ``doc`` for ``sources``."""
    problems = []
    got = samples.get(doc.family(), [])
    if "source" not in doc.labels:
        return problems
    for source in sources:
        mine = [(labels, value) for labels, value in got if labels.get("source") == source]
        if not mine:
            problems.append(f"{doc.name}: no series for source {source}")
        problems += [f"{doc.name}{labels} = {value}" for labels, value in mine if value != 0]
        for label, values in doc.values.items():
            seen = {labels.get(label) for labels, _ in mine}
            problems += [
                f"{doc.name}: no {label}={v} for {source}" for v in values if v not in seen
            ]
    return problems


def test_the_documented_lists_agree_with_the_code_and_each_other() -> None:
    docs = documented()
    names = {d.name for d in docs}
    assert len(docs) >= 20, docs
    per_source, unknown = documented_reasons()
    assert tuple(per_source) == ingest_metrics.REJECTION_REASONS
    assert tuple(unknown) == ingest_metrics.UNKNOWN_SOURCE_REASONS
    # The verifiers' reasons, as the signature tests know them, lead the list.
    assert set(ingest_metrics.SIGNATURE_REASONS) == SIGNATURE_REASONS
    assert set(per_source) >= SIGNATURE_REASONS
    operations = (ROOT / "docs" / "operations.md").read_text()
    section = operations[operations.index("## Metrics and alerts") :]
    section = section[: section.index("\n## ", 1)]
    in_operations = set(re.findall(r"hookd_[a-z_]+[a-z]", section)) - {f"{n}_bucket" for n in names}
    assert in_operations == names, (sorted(in_operations - names), sorted(names - in_operations))


async def scrape(url: str, headers: dict[str, str] | None = None) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as client:
        return await client.get(url, headers=AUTH if headers is None else headers)


async def test_a_fresh_serve_shows_every_documented_family_at_zero_per_source(
    tmp_path: Path, pg_url: str
) -> None:
    env = {
        "HOOKD_CONFIG": str(sources_toml(tmp_path / "hookd.toml")),
        "HOOKD_DATABASE_URL": pg_url,
        "HOOKD_METRICS_TOKEN": TOKEN,
        "HOOKD_RECONCILE_SCHEDULE": "false",
        "HOOKD_PRUNE_EVERY_S": "0",
    }
    with HookdServer(env, tmp_path) as server:
        response = await scrape(server.url + "/metrics")
        assert response.status_code == 200, response.text
    families, samples = parse(response.text)
    docs = documented()
    missing = [d.name for d in docs if d.family() not in families]
    assert not missing, missing
    # What the sources file says is not 0: hookd_retention_days shows it, per source.
    from_file = [d for d in docs if d.kind == "sources file"]
    assert [d.name for d in from_file] == ["hookd_retention_days"]
    problems = [
        p for d in docs if d not in from_file for p in check_zero_series(d, samples, SOURCES)
    ]
    assert not problems, problems
    [retention] = from_file
    assert retention.labels == ("source", "what")
    shown = {(lab["source"], lab["what"]): value for lab, value in samples[retention.family()]}
    assert shown == {
        (source, what): days
        for source, by_what in RETENTION_DAYS.items()
        for what, days in by_what.items()
    }
    assert {what for _, what in shown} == set(retention.values["what"])
    rejections = {
        (labels["source"], labels["reason"]): value
        for labels, value in samples["hookd_webhook_rejections"]
    }
    per_source, unknown = documented_reasons()
    expected = {(s, r) for s in SOURCES for r in per_source} | {("_unknown", r) for r in unknown}
    assert set(rejections) == expected
    assert set(rejections.values()) == {0.0}
    received = {(lab["source"], lab["outcome"]) for lab, _ in samples["hookd_webhooks_received"]}
    assert ("_unknown", "rejected") in received
    # Nothing the process has not done shows: the histograms are empty, not absent.
    for labels, value in samples["hookd_ack_seconds"]:
        assert value == 0, labels


async def test_a_fresh_worker_shows_its_documented_families_at_zero_per_source(
    tmp_path: Path, pg_url: str
) -> None:
    env = {
        "HOOKD_CONFIG": str(sources_toml(tmp_path / "hookd.toml")),
        "HOOKD_DATABASE_URL": pg_url,
        "HOOKD_METRICS_TOKEN": TOKEN,
        "HOOKD_RECONCILE_SCHEDULE": "false",
        "HOOKD_PRUNE_EVERY_S": "0",
    }
    with RedisServer(tmp_path) as redis:
        env["HOOKD_REDIS_URL"] = redis.url
        with HookdWorker(env, tmp_path) as worker:

            async def answered() -> httpx.Response | None:
                assert worker.alive(), worker.log()
                try:
                    return await scrape(worker.metrics_url)
                except httpx.HTTPError:
                    return None

            response = await wait_for(answered, timeout_s=30, interval_s=0.1)
    assert response.status_code == 200, response.text
    families, samples = parse(response.text)
    theirs = [d for d in documented() if "hookd worker" in d.served_by]
    assert {d.name for d in theirs} >= {
        "hookd_events_processed_total",
        "hookd_claims_total",
        "hookd_lease_takeovers_total",
        "hookd_reconcile_run_seconds",
    }
    missing = [d.name for d in theirs if d.family() not in families]
    assert not missing, missing
    problems = [p for d in theirs for p in check_zero_series(d, samples, SOURCES)]
    assert not problems, problems
    # The receive side's series are the receivers' only.
    assert not samples.get("hookd_webhooks_received")
