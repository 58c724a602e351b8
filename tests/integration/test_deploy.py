"""deploy/ checked with the real tools: promtool, docker-compose, kubernetes-validate.

Nothing is built or started (no Docker engine, no cluster): these catch what a
file-level check can, including the mistakes specific to hookd's metrics, where
database-backed families are reported once per receiver and must not be summed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate import utils as kv_utils

from hookd import metric_families
from hookd.cli.parser import build_parser
from hookd.settings import Settings
from hookd.sources import parse_sources
from tests.support.services import require_tool

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
PROMETHEUS = DEPLOY / "prometheus"
ALERTS = PROMETHEUS / "alerts.yml"
COMPOSE = DEPLOY / "compose.yaml"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "hookd.json"
K8S = DEPLOY / "k8s"

# What /metrics must export (README: Health and metrics). The dashboard shows every one.
DB_FAMILIES = frozenset(
    {
        "hookd_events_pending",
        "hookd_oldest_pending_age_seconds",
        "hookd_events_dead",
        "hookd_reconcile_runs_total",
        "hookd_reconcile_missed_total",
        "hookd_reconcile_lag_seconds",
        "hookd_provider_rate_limited_total",
        "hookd_source_reconcile_disabled",
    }
)
# Also reported alike by every receiver (the database's oldest kept event, the sources
# file's retention), so max as well; alerted on, not on the dashboard.
RETENTION_FAMILIES = frozenset({"hookd_oldest_event_seconds", "hookd_retention_days"})
# What reconciliation has checked (the coverage ledger's gauges) and late deliveries:
# from the database too, so max; alerted on, not on the dashboard.
COVERAGE_FAMILIES = frozenset(
    {
        "hookd_reconcile_late_total",
        "hookd_source_unchecked_seconds",
        "hookd_reconcile_retention_margin_seconds",
        "hookd_source_silent_seconds",
    }
)
PROCESS_FAMILIES = frozenset(
    {
        "hookd_webhooks_received_total",
        "hookd_webhook_rejections_total",
        "hookd_ack_seconds",
        "hookd_events_processed_total",
        "hookd_processing_seconds",
    }
)
SERIES_SUFFIXES = ("_bucket", "_sum", "_count", "_created")
# Versions the manifests are checked against: the newest kubernetes-validate knows,
# and the oldest these manifests claim to support.
K8S_VERSIONS = (kv_utils.latest_version(), "1.29.0")
CRD_KINDS = frozenset({"ServiceMonitor", "PrometheusRule"})
# Two different tokens, as hookd requires: the admin token must never reach Prometheus.
ADMIN_TOKEN = "test-admin-token"
METRICS_TOKEN = "test-metrics-token"
TOKENS = {"HOOKD_ADMIN_TOKEN": ADMIN_TOKEN, "HOOKD_METRICS_TOKEN": METRICS_TOKEN}
# Environment names the deploy files may set that are not Settings fields.
EXTRA_HOOKD_ENV = frozenset({"HOOKD_HEALTHCHECK_URL"})  # the Dockerfile's HEALTHCHECK


def run(args: list[str], *, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=ROOT, env=env, check=False, capture_output=True, text=True, timeout=60
    )


def alert_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(ALERTS.read_text())["groups"]
    return groups


def alert_exprs() -> list[tuple[str, str]]:
    return [(r["alert"], r["expr"]) for g in alert_groups() for r in g["rules"]]


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def dashboard_exprs() -> list[tuple[str, str]]:
    return [
        (f"{panel['title']} {target['refId']}", target["expr"])
        for panel in dashboard()["panels"]
        for target in panel.get("targets", [])
    ]


def k8s_docs() -> list[tuple[str, dict[str, Any]]]:
    return [
        (path.name, doc)
        for path in sorted(K8S.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc is not None
    ]


def k8s_by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for _, doc in k8s_docs() if doc["kind"] == kind}


# --- Prometheus ---------------------------------------------------------------------


def test_alert_rules_pass_promtool_check() -> None:
    promtool = require_tool("promtool")
    result = run([promtool, "check", "rules", str(ALERTS)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_alert_rule_unit_tests_pass() -> None:
    promtool = require_tool("promtool")
    result = run([promtool, "test", "rules", str(PROMETHEUS / "alerts_test.yml")])
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("max_expr", "sum_expr"),
    [
        (
            "max by (source) (increase(hookd_reconcile_missed_total[1h]))",
            "sum by (source) (increase(hookd_reconcile_missed_total[1h]))",
        ),
        ("max(hookd_events_dead)", "sum(hookd_events_dead)"),
        (
            "max by (source) (hookd_oldest_event_seconds)",
            "sum by (source) (hookd_oldest_event_seconds)",
        ),
        (
            'max by (source) (hookd_retention_days{what=~"event|dead"})',
            'sum by (source) (hookd_retention_days{what=~"event|dead"})',
        ),
        (
            "max by (source) (increase(hookd_ack_violations_total[1h]))",
            "sum by (source) (increase(hookd_ack_violations_total[1h]))",
        ),
        (
            "max by (source) (hookd_reconcile_retention_margin_seconds) < 86400",
            "sum by (source) (hookd_reconcile_retention_margin_seconds) < 86400",
        ),
        (
            "max by (source) (hookd_source_silent_seconds) > 0",
            "sum by (source) (hookd_source_silent_seconds) > 0",
        ),
    ],
)
def test_alert_unit_tests_catch_a_summed_database_family(
    tmp_path: Path, max_expr: str, sum_expr: str
) -> None:
    """Two receivers report one database: the unit tests fail if a rule adds them up."""
    promtool = require_tool("promtool")
    text = ALERTS.read_text()
    assert max_expr in text
    (tmp_path / "alerts.yml").write_text(text.replace(max_expr, sum_expr))
    shutil.copy(PROMETHEUS / "alerts_test.yml", tmp_path / "alerts_test.yml")
    result = run([promtool, "test", "rules", str(tmp_path / "alerts_test.yml")])
    assert result.returncode != 0, result.stdout
    assert "FAILED" in result.stdout + result.stderr


@pytest.mark.parametrize(
    "loose_expr",
    [
        "max by (source) (hookd_source_registration_ok) < 1",
        "max by (source) (hookd_source_registration_ok) != 1",
    ],
)
def test_alert_unit_tests_catch_a_drift_rule_that_fires_on_could_not_check(
    tmp_path: Path, loose_expr: str
) -> None:
    """-1 (the registration could not be read) is not drift: the unit tests fail if the
    drift rule fires on anything but 0."""
    promtool = require_tool("promtool")
    text = ALERTS.read_text()
    exact = "max by (source) (hookd_source_registration_ok) == 0"
    assert exact in text
    (tmp_path / "alerts.yml").write_text(text.replace(exact, loose_expr))
    shutil.copy(PROMETHEUS / "alerts_test.yml", tmp_path / "alerts_test.yml")
    result = run([promtool, "test", "rules", str(tmp_path / "alerts_test.yml")])
    assert result.returncode != 0, result.stdout
    assert "could not be read fires no drift alert" in result.stdout + result.stderr


def test_prometheus_config_passes_promtool_check(tmp_path: Path) -> None:
    """The config as compose mounts it: credentials_file is resolved next to it."""
    promtool = require_tool("promtool")
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    token_files = {
        job["authorization"]["credentials_file"]
        for job in config["scrape_configs"]
        if job["job_name"].startswith("hookd-")
    }
    assert {job["job_name"] for job in config["scrape_configs"]} >= {
        "hookd-receiver",
        "hookd-worker",
    }
    assert token_files == {"secrets/hookd-token"}
    shutil.copy(PROMETHEUS / "prometheus.yml", tmp_path / "prometheus.yml")
    shutil.copy(ALERTS, tmp_path / "alerts.yml")
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "hookd-token").write_text("test-token")
    result = run([promtool, "check", "config", str(tmp_path / "prometheus.yml")])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 rule files found" in result.stdout


def test_prometheusrule_groups_are_alerts_yml() -> None:
    rules = k8s_by_kind("PrometheusRule")
    assert list(rules) == ["hookd"]
    rule = rules["hookd"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(rule["spec"]) == {"groups"}
    assert rule["spec"]["groups"] == alert_groups()


def operations_anchors() -> set[str]:
    """The anchors GitHub gives the headings of docs/operations.md."""
    text = re.sub(
        r"^```.*?^```", "", (ROOT / "docs" / "operations.md").read_text(), flags=re.M | re.S
    )
    headings = re.findall(r"^#+ (.+)$", text, re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_every_alert_has_severity_summary_and_runbook() -> None:
    anchors = operations_anchors()
    assert "postgresql-events-by-day" in anchors  # punctuation and backticks dropped
    for group in alert_groups():
        for rule in group["rules"]:
            assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
            assert set(rule["annotations"]) == {"summary", "description"}, rule["alert"]
            runbook = re.search(
                r"Runbook: docs/operations\.md#([a-z0-9-]+)$", rule["annotations"]["description"]
            )
            assert runbook, rule["alert"]
            assert runbook.group(1) in anchors, (rule["alert"], runbook.group(1))
    names = {name for name, _ in alert_exprs()}
    assert names >= {
        "HookdReconcileFoundMisses",
        "HookdDeadLetters",
        "HookdOldestPendingAge",
        "HookdReconcileDisabled",
        "HookdAckLatencyNearSlackBudget",
        "HookdAckLatencyNearGitHubBudget",
        "HookdReconcileRetentionMarginLow",
        "HookdReceiverDown",
        "HookdPruneNotRunning",
        "HookdSourceSilent",
    }


# --- metric names and how they are aggregated -----------------------------------------

METRIC_CTOR = re.compile(
    r"\b(?:Counter|Gauge|Histogram|Summary|(?:Counter|Gauge|Histogram|Summary)MetricFamily)"
    r"\(\s*\"(hookd_\w+)\""
)
METRIC_TOKEN = re.compile(r"\bhookd_\w+")


def exported_families() -> set[str]:
    """Family names as the code declares them (``_total`` added to counters): the
    per-process families of ``hookd.metric_families``, and the collectors' families
    read from the database at scrape time, found in the source."""
    names = {family.name for family in metric_families.FAMILIES}
    for package in ("hookd", "ingest", "processing", "reconcile", "store"):
        for path in (ROOT / package).rglob("*.py"):
            names.update(METRIC_CTOR.findall(path.read_text(encoding="utf-8")))
    return names | {name.removesuffix("_total") + "_total" for name in names}


def family_of(series: str) -> str:
    for suffix in SERIES_SUFFIXES:
        if series.endswith(suffix):
            return series.removesuffix(suffix)
    return series


def test_contract_families_are_exported_by_the_code() -> None:
    exported = exported_families()
    missing = (DB_FAMILIES | RETENTION_FAMILIES | COVERAGE_FAMILIES | PROCESS_FAMILIES) - exported
    assert not missing, sorted(missing)


@pytest.mark.parametrize("where", ["alerts", "dashboard"])
def test_every_metric_used_is_exported(where: str) -> None:
    exported = exported_families()
    exprs = alert_exprs() if where == "alerts" else dashboard_exprs()
    used = {family_of(m) for _, expr in exprs for m in METRIC_TOKEN.findall(expr)}
    assert used, "no hookd_ metric found"
    assert used <= exported, sorted(used - exported)


def test_dashboard_shows_every_contract_family() -> None:
    used = {family_of(m) for _, expr in dashboard_exprs() for m in METRIC_TOKEN.findall(expr)}
    assert used >= DB_FAMILIES | PROCESS_FAMILIES, sorted(DB_FAMILIES | PROCESS_FAMILIES - used)


AGGREGATIONS = frozenset(
    {"sum", "max", "min", "avg", "count", "group", "stddev", "stdvar", "topk", "bottomk"}
)


def aggregations_around(expr: str) -> Iterator[tuple[str, list[str]]]:
    """Each hookd_ series in ``expr`` with the aggregation operators around it, innermost first."""
    text = re.sub(r'"[^"]*"', '""', expr)  # no parentheses from label values
    text = re.sub(r"\b(?:by|without)\s*\([^)]*\)", " ", text)  # sum by (x) (...) -> sum (...)
    stack: list[str] = []
    for match in re.finditer(r"[A-Za-z_:][\w:]*|[()]", text):
        token = match.group()
        if token == "(":
            before = re.search(r"([A-Za-z_]\w*)\s*$", text[: match.start()])
            stack.append(before.group(1) if before else "")
        elif token == ")":
            stack.pop()
        elif token.startswith("hookd_"):
            yield family_of(token), [f for f in reversed(stack) if f in AGGREGATIONS]


def test_aggregation_parser_sees_through_grouping_and_functions() -> None:
    expr = 'histogram_quantile(0.9, sum by (le) (rate(hookd_ack_seconds_bucket{a="("}[5m])))'
    assert list(aggregations_around(expr)) == [("hookd_ack_seconds", ["sum"])]
    assert list(aggregations_around("max(sum(hookd_events_dead))")) == [
        ("hookd_events_dead", ["sum", "max"])
    ]


@pytest.mark.parametrize("where", ["alerts", "dashboard"])
def test_database_families_take_max_and_process_families_sum(where: str) -> None:
    """Every receiver reports the database's value: max, never sum. Processes: sum."""
    exprs = alert_exprs() if where == "alerts" else dashboard_exprs()
    problems = []
    for name, expr in exprs:
        for family, aggs in aggregations_around(expr):
            innermost = aggs[0] if aggs else None
            database = DB_FAMILIES | RETENTION_FAMILIES | COVERAGE_FAMILIES
            if family in database and innermost not in ("max", "min"):
                problems.append(f"{name}: {family} under {innermost}, not max: {expr}")
            if family in PROCESS_FAMILIES and innermost != "sum":
                problems.append(f"{name}: {family} under {innermost}, not sum: {expr}")
    assert not problems, "\n".join(problems)


# --- Grafana ------------------------------------------------------------------------


def test_dashboard_queries_are_valid_promql(tmp_path: Path) -> None:
    """promtool parses every panel query, with Grafana's variables filled in."""
    promtool = require_tool("promtool")
    rules = [
        {
            "record": f"dashboard:query_{i}",
            "expr": expr.replace("$__rate_interval", "5m").replace("$source", ".*"),
        }
        for i, (_, expr) in enumerate(dashboard_exprs())
    ]
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = run([promtool, "check", "rules", str(path)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_dashboard_and_provisioning_fit_together() -> None:
    board = dashboard()
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    assert all({"x", "y", "w", "h"} <= set(panel["gridPos"]) for panel in board["panels"])
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    for panel in board["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert panel["targets"], panel["title"]
    provisioning = DEPLOY / "grafana" / "provisioning"
    datasources = yaml.safe_load((provisioning / "datasources" / "prometheus.yaml").read_text())
    (source,) = datasources["datasources"]
    assert source["type"] == "prometheus"
    assert source["url"] == "http://prometheus:9090"
    assert variables["datasource"]["current"]["value"] == source["uid"]
    providers = yaml.safe_load((provisioning / "dashboards" / "hookd.yaml").read_text())
    (provider,) = providers["providers"]
    compose = yaml.safe_load(COMPOSE.read_text())
    mounts = compose["services"]["grafana"]["volumes"]
    assert f"./grafana/dashboards:{provider['options']['path']}:ro" in mounts


# --- docker-compose -----------------------------------------------------------------


def compose_env(tmp_path: Path, **extra: str) -> tuple[dict[str, str], list[str]]:
    """A clean environment and an empty --env-file: a local deploy/.env plays no part."""
    env_file = tmp_path / "empty.env"
    env_file.write_text("")
    env = {k: v for k in ("PATH", "HOME", "LANG") if (v := os.environ.get(k)) is not None}
    return {**env, **extra}, ["--env-file", str(env_file)]


def test_compose_file_is_valid(tmp_path: Path) -> None:
    compose = require_tool("docker-compose")
    env, env_file = compose_env(tmp_path, **TOKENS)
    result = run([compose, *env_file, "-f", str(COMPOSE), "config", "-q"], env=env)
    assert result.returncode == 0, result.stderr
    # The resolved file, as docker-compose understood it.
    result = run([compose, *env_file, "-f", str(COMPOSE), "config"], env=env)
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    assert set(services) == {
        "postgres",
        "redis",
        "migrate",
        "receiver",
        "worker",
        "prometheus",
        "grafana",
    }
    for name in ("receiver", "worker"):
        assert services[name]["depends_on"]["migrate"] == {
            "condition": "service_completed_successfully"
        }
        assert services[name]["depends_on"]["redis"] == {"condition": "service_healthy"}
    assert services["migrate"]["depends_on"]["postgres"] == {"condition": "service_healthy"}
    assert services["migrate"]["command"] == ["db", "upgrade"]
    assert services["receiver"]["command"][:1] == ["serve"]
    assert "--workers" in services["receiver"]["command"]
    assert services["worker"]["command"] == ["worker"]
    for name in ("receiver", "worker"):
        assert services[name]["environment"]["HOOKD_ADMIN_TOKEN"] == ADMIN_TOKEN, name
        assert services[name]["environment"]["HOOKD_METRICS_TOKEN"] == METRICS_TOKEN, name
    # Prometheus gets the metrics token and nothing else: not the admin token, under
    # any name, anywhere in its service.
    prometheus = services["prometheus"]
    assert prometheus["environment"] == {"HOOKD_METRICS_TOKEN": METRICS_TOKEN}
    assert ADMIN_TOKEN not in json.dumps(prometheus)
    assert "HOOKD_ADMIN_TOKEN" not in json.dumps(prometheus)
    assert "HOOKD_METRICS_TOKEN" in " ".join(prometheus["command"])
    assert services["worker"]["environment"]["HOOKD_WORKER_METRICS_HOST"] == "0.0.0.0"
    assert services["worker"]["environment"]["HOOKD_WORKER_METRICS_PORT"] == "9464"
    assert services["receiver"]["environment"]["HOOKD_DATABASE_URL"].startswith(
        "postgresql+asyncpg://"
    )


@pytest.mark.parametrize("missing", sorted(TOKENS))
def test_compose_file_needs_both_tokens(tmp_path: Path, missing: str) -> None:
    compose = require_tool("docker-compose")
    given = {k: v for k, v in TOKENS.items() if k != missing}
    env, env_file = compose_env(tmp_path, **given)
    result = run([compose, *env_file, "-f", str(COMPOSE), "config", "-q"], env=env)
    assert result.returncode != 0
    # The error ends with the ${VAR:?message} of the missing one (docker-compose 1.29
    # also dumps the raw mapping before it, which holds both messages).
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.endswith(f"set {missing} in deploy/.env or the environment"), last_line


# Each breakage of a copy of compose.yaml, and what docker-compose says about it.
BREAKAGES: dict[str, tuple[Callable[[dict[str, Any]], Any], str]] = {
    "unknown key": (
        lambda c: c["services"]["receiver"].update(restart_policy="always"),
        "Unsupported config option",
    ),
    "bad condition": (
        lambda c: c["services"]["receiver"]["depends_on"]["migrate"].update(
            condition="service_finished"
        ),
        "service_finished",
    ),
    "undeclared volume": (lambda c: c.pop("volumes"), "no declaration was found"),
    "undefined dependency": (
        lambda c: c["services"]["worker"]["depends_on"].update(
            cache={"condition": "service_healthy"}
        ),
        "which is undefined",
    ),
}


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_compose_check_fails_on_a_broken_copy(tmp_path: Path, breakage: str) -> None:
    compose = require_tool("docker-compose")
    copy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, copy)
    data = yaml.safe_load(COMPOSE.read_text())
    mutate, complaint = BREAKAGES[breakage]
    mutate(data)
    (copy / "compose.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    env, env_file = compose_env(tmp_path, **TOKENS)
    result = run([compose, *env_file, "-f", str(copy / "compose.yaml"), "config", "-q"], env=env)
    assert result.returncode != 0, f"{breakage}: docker-compose accepted it"
    assert complaint in result.stderr


def test_compose_sources_file_loads_with_what_compose_passes() -> None:
    """Every ${VAR} in deploy/hookd.toml reaches the hookd containers."""
    compose = yaml.safe_load(COMPOSE.read_text())
    text = (DEPLOY / "hookd.toml").read_text()
    wanted = set(re.findall(r"\$\{(\w+)\}", json.dumps(tomllib.loads(text))))
    for name in ("migrate", "receiver", "worker"):
        service = compose["services"][name]
        assert wanted <= set(service["environment"]), (name, wanted)
        assert "./hookd.toml:/etc/hookd/hookd.toml:ro" in service["volumes"]
        assert service["environment"]["HOOKD_CONFIG"] == "/etc/hookd/hookd.toml"
    sources = parse_sources(
        text, DEPLOY / "hookd.toml", dict.fromkeys(wanted | {"GITHUB_TOKEN"}, "whsec_test")
    )
    assert {s.name for s in sources} == {"github", "stripe"}


def test_compose_prometheus_writes_the_token_where_prometheus_yml_reads_it() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    service = compose["services"]["prometheus"]
    script = " ".join(service["command"])
    # The file prometheus.yml reads is written from the metrics token, and the
    # container is given that token alone.
    assert "printf '%s' \"$$HOOKD_METRICS_TOKEN\" > /etc/prometheus/secrets/hookd-token" in script
    assert "ADMIN" not in script
    assert set(service["environment"]) == {"HOOKD_METRICS_TOKEN"}
    assert service["environment"]["HOOKD_METRICS_TOKEN"].startswith("${HOOKD_METRICS_TOKEN:?")
    assert "/etc/prometheus/secrets" in service["tmpfs"]
    assert "./prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro" in service["volumes"]
    assert "./prometheus/alerts.yml:/etc/prometheus/alerts.yml:ro" in service["volumes"]


# --- Kubernetes ---------------------------------------------------------------------


def test_k8s_manifests_are_the_expected_objects() -> None:
    found = sorted((doc["kind"], doc["metadata"]["name"]) for _, doc in k8s_docs())
    assert found == sorted(
        [
            ("ConfigMap", "hookd-sources"),
            ("CronJob", "hookd-reconcile"),
            ("CronJob", "hookd-prune"),
            ("Deployment", "hookd-receiver"),
            ("Deployment", "hookd-worker"),
            ("Job", "hookd-migrate"),
            ("PodDisruptionBudget", "hookd-receiver"),
            ("PrometheusRule", "hookd"),
            ("Secret", "hookd"),
            ("Service", "hookd-receiver"),
            ("Service", "hookd-worker"),
            ("ServiceMonitor", "hookd-receiver"),
            ("ServiceMonitor", "hookd-worker"),
        ]
    )


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_k8s_core_manifests_validate_strictly(version: str) -> None:
    problems = []
    for filename, doc in k8s_docs():
        if doc["kind"] in CRD_KINDS:
            continue
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{filename} {doc['kind']}: {exc.message} at {list(exc.path)}")
    assert not problems, "\n".join(problems)


def test_k8s_validation_rejects_a_broken_manifest() -> None:
    (_, deployment), *_ = [(f, d) for f, d in k8s_docs() if d["kind"] == "Deployment"]
    broken = json.loads(json.dumps(deployment))
    broken["spec"]["template"]["spec"]["containers"][0]["livenessprobe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSIONS[0], strict=True)


def test_servicemonitors_scrape_both_services_with_the_metrics_token() -> None:
    services = k8s_by_kind("Service")
    secret = k8s_by_kind("Secret")["hookd"]
    monitors = k8s_by_kind("ServiceMonitor")
    assert set(monitors) == {"hookd-receiver", "hookd-worker"}
    for name, monitor in monitors.items():
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        spec = monitor["spec"]
        assert set(spec) <= {"selector", "endpoints", "jobLabel", "namespaceSelector"}
        selected = [
            s
            for s in services.values()
            if spec["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
        ]
        # One Service each, and its name is the job label the alert rules use.
        assert [s["metadata"]["name"] for s in selected] == [name]
        port_names = {p["name"] for p in selected[0]["spec"]["ports"]}
        for endpoint in spec["endpoints"]:
            assert endpoint["port"] in port_names
            assert endpoint["path"] == "/metrics"
            auth = endpoint["authorization"]
            assert auth["type"] == "Bearer"
            # The /metrics-only token; never the admin token, which can replay events.
            assert auth["credentials"] == {"name": "hookd", "key": "HOOKD_METRICS_TOKEN"}
            assert auth["credentials"]["key"] in secret["stringData"]
            assert "HOOKD_ADMIN_TOKEN" not in json.dumps(endpoint)
    # Two keys with different values: hookd refuses to start on equal tokens.
    tokens = secret["stringData"]
    assert tokens["HOOKD_METRICS_TOKEN"] != tokens["HOOKD_ADMIN_TOKEN"]
    jobs = set(re.findall(r'job="([^"]+)"', ALERTS.read_text()))
    assert jobs <= set(monitors)


def pod_templates() -> Iterator[tuple[str, dict[str, Any]]]:
    for _, doc in k8s_docs():
        if doc["kind"] in ("Deployment", "Job"):
            yield doc["metadata"]["name"], doc["spec"]["template"]
        elif doc["kind"] == "CronJob":
            yield doc["metadata"]["name"], doc["spec"]["jobTemplate"]["spec"]["template"]


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", [])}


def test_k8s_pods_run_hookd_non_root_read_only_with_the_secret() -> None:
    configmap = k8s_by_kind("ConfigMap")["hookd-sources"]
    parser = build_parser()
    images = set()
    templates = dict(pod_templates())
    assert set(templates) == {
        "hookd-receiver",
        "hookd-worker",
        "hookd-migrate",
        "hookd-reconcile",
        "hookd-prune",
    }
    for name, template in templates.items():
        spec = template["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["securityContext"]["runAsUser"] == 10001, name
        volumes = {v["name"]: v for v in spec["volumes"]}
        (container,) = spec["containers"]
        images.add(container["image"])
        parser.parse_args(container["args"])  # a command line hookd accepts
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True, name
        assert security["allowPrivilegeEscalation"] is False, name
        assert {"secretRef": {"name": "hookd"}} in container["envFrom"], name
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert "emptyDir" in volumes[mounts["/tmp"]], name  # writable /tmp
        if "/etc/hookd" in mounts:
            assert volumes[mounts["/etc/hookd"]]["configMap"]["name"] == "hookd-sources"
            assert env_of(container)["HOOKD_CONFIG"] == "/etc/hookd/hookd.toml"
    assert len(images) == 1, images
    assert "hookd.toml" in configmap["data"]


def test_k8s_roles() -> None:
    templates = dict(pod_templates())
    deployments = k8s_by_kind("Deployment")

    receiver = templates["hookd-receiver"]["spec"]["containers"][0]
    assert deployments["hookd-receiver"]["spec"]["replicas"] == 2
    assert receiver["args"] == ["serve", "--host", "0.0.0.0", "--port", "8000", "--workers", "2"]
    assert receiver["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert receiver["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert {"name": "http", "containerPort": 8000} in receiver["ports"]
    assert receiver["resources"]["requests"] and receiver["resources"]["limits"]

    worker = templates["hookd-worker"]["spec"]["containers"][0]
    assert worker["args"] == ["worker"]
    assert {"name": "metrics", "containerPort": 9464} in worker["ports"]
    assert env_of(worker)["HOOKD_WORKER_METRICS_HOST"] == "0.0.0.0"
    assert env_of(worker)["HOOKD_WORKER_METRICS_PORT"] == "9464"

    # The CronJobs drive reconciliation and retention, so nothing else keeps a schedule.
    for container in (receiver, worker):
        assert env_of(container)["HOOKD_RECONCILE_SCHEDULE"] == "false"
        assert env_of(container)["HOOKD_PRUNE_EVERY_S"] == "0"
    pruning = k8s_by_kind("CronJob")["hookd-prune"]
    assert pruning["spec"]["concurrencyPolicy"] == "Forbid"
    assert templates["hookd-prune"]["spec"]["containers"][0]["args"] == ["prune"]
    cronjob = k8s_by_kind("CronJob")["hookd-reconcile"]
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    assert templates["hookd-reconcile"]["spec"]["containers"][0]["args"][0] == "reconcile"
    assert templates["hookd-migrate"]["spec"]["containers"][0]["args"] == ["db", "upgrade"]

    for service in k8s_by_kind("Service").values():
        selector = service["spec"]["selector"]
        (target,) = [
            t for t in templates.values() if selector.items() <= t["metadata"]["labels"].items()
        ]
        ports = {p["name"] for c in target["spec"]["containers"] for p in c.get("ports", [])}
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports


def test_k8s_sources_file_loads_with_the_example_secret() -> None:
    configmap = k8s_by_kind("ConfigMap")["hookd-sources"]
    secret = k8s_by_kind("Secret")["hookd"]
    sources = parse_sources(
        configmap["data"]["hookd.toml"], Path("/etc/hookd/hookd.toml"), secret["stringData"]
    )
    assert all(s.config.reconcile is not None for s in sources)  # the CronJob has work


def hookd_env_names() -> set[str]:
    names: set[str] = set()
    compose = yaml.safe_load(COMPOSE.read_text())
    for service in compose["services"].values():
        names |= {k for k in service.get("environment", {}) if k.startswith("HOOKD_")}
    for _, template in pod_templates():
        for container in template["spec"]["containers"]:
            names |= {k for k in env_of(container) if k.startswith("HOOKD_")}
    names |= {k for k in k8s_by_kind("Secret")["hookd"]["stringData"] if k.startswith("HOOKD_")}
    names |= set(re.findall(r"\bHOOKD_[A-Z_]+", (DEPLOY / "Dockerfile").read_text()))
    return names


def test_hookd_environment_names_are_settings() -> None:
    known = {"HOOKD_" + field.upper() for field in Settings.model_fields} | EXTRA_HOOKD_ENV
    used = hookd_env_names()
    assert {
        "HOOKD_DATABASE_URL",
        "HOOKD_ADMIN_TOKEN",
        "HOOKD_METRICS_TOKEN",
        "HOOKD_WORKER_METRICS_HOST",
    } <= used
    assert used <= known, sorted(used - known)


# --- Dockerfile ---------------------------------------------------------------------


def test_dockerfile_is_multi_stage_and_runs_as_non_root() -> None:
    lines = [
        line.strip()
        for line in (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ").splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    stages: list[list[str]] = []
    for line in lines:
        if line.upper().startswith("FROM "):
            stages.append([])
        if stages:  # (before the first FROM: the build arguments the FROMs use)
            stages[-1].append(line)
    assert len(stages) >= 2
    # Every stage on the one base, python:3.11-slim unless BASE_IMAGE names another
    # (deploy/base-image.sh makes one from Debian's packages).
    assert "ARG BASE_IMAGE=python:3.11-slim" in lines
    assert all(stage[0].startswith("FROM ${BASE_IMAGE} ") for stage in stages)
    builder, final = "\n".join(stages[0]), stages[-1]
    assert "pip install -r requirements.lock" in builder
    assert "pip install --no-deps ." in builder
    users = [line.split()[1] for line in final if line.startswith("USER ")]
    assert users, "the final stage sets no USER"
    assert users[-1] not in ("root", "0", "0:0")
    assert "--uid 10001" in "\n".join(final)
    assert any(line.startswith("COPY --from=") for line in final)
    assert 'ENTRYPOINT ["hookd"]' in final
    cmd = next(line for line in final if line.startswith("CMD "))
    args = json.loads(cmd.removeprefix("CMD "))
    build_parser().parse_args(args)
    assert args[:1] == ["serve"]
    assert "EXPOSE 8000" in final
    assert any(line.startswith("HEALTHCHECK ") and "/healthz" in line for line in final)
    # What the build copies exists, and the build-context allow-list lets it through.
    allowed = {
        line.removeprefix("!")
        for line in (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    for line in lines:
        if line.startswith("COPY ") and "--from=" not in line:
            for source in line.split()[1:-1]:
                assert (ROOT / source).exists(), source
                assert source in allowed, source


# --- hygiene ------------------------------------------------------------------------


def test_deploy_files_name_no_path_of_this_machine() -> None:
    for path in [*DEPLOY.rglob("*"), ROOT / "docs" / "deploy.md"]:
        if path.is_file():
            assert str(ROOT) not in path.read_text(encoding="utf-8"), path
