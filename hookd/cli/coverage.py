"""``hookd coverage SOURCE``: the intervals reconciliation has checked, and the holes."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any

from hookd.cli.context import database
from hookd.cli.events import print_table
from hookd.cli.parser import (
    EXIT_COVERAGE_DUE,
    EXIT_COVERAGE_HOLES,
    EXIT_COVERAGE_UNKNOWN,
    EXIT_OK,
)
from hookd.errors import BadRequest, ConfigError
from hookd.settings import Settings
from hookd.sources import Sources


async def cmd_coverage(args: argparse.Namespace, settings: Settings, sources: Sources) -> int:
    from hookd.errors import Conflict, NotFound
    from hookd.ops import CoverageOps, SourceOps
    from hookd.ops.resources import coverage_of

    async with database(settings) as engine:
        ops = CoverageOps(engine, SourceOps(engine, sources))
        try:
            report = await ops.report(args.source, args.since, args.until)
        except NotFound:
            print(f"hookd: {sources.path}: no source named {args.source!r}", file=sys.stderr)
            return EXIT_COVERAGE_UNKNOWN
        except Conflict:
            print(
                f"hookd: {sources.path}: source {args.source!r} has no [sources.reconcile] "
                "or [sources.expect] table: nothing reconciles or watches it",
                file=sys.stderr,
            )
            return EXIT_COVERAGE_UNKNOWN
        except BadRequest as exc:
            raise ConfigError(f"{exc.detail}") from None
    resource = coverage_of(report).answer()
    if args.json:
        print(json.dumps(resource))
    else:
        _print(resource)
    if report.covered:
        return EXIT_OK
    return EXIT_COVERAGE_DUE if report.only_due else EXIT_COVERAGE_HOLES


def _print(resource: Mapping[str, Any]) -> None:
    holes = [i for i in resource["intervals"] if i["state"] == "hole"]
    verdict = (
        "fully checked"
        if resource["covered"]
        else f"{len(holes)} hole{'' if len(holes) == 1 else 's'}, "
        f"{_span(resource['unchecked_seconds'])} not checked"
    )
    print(
        f"{resource['source']}: {resource['since']} to {resource['until']}: {verdict} "
        f"(settle_s {resource['settle_s']:g}, provider retention "
        f"{_span(resource['retention_s'])})"
    )
    rows = []
    for interval in resource["intervals"]:
        if interval["state"] == "checked":
            runs = interval["runs"]
            detail = f"{runs} run{'' if runs == 1 else 's'}, {interval['repaired']} repaired"
            if not runs:  # a source only watched for silence: its windows met [sources.expect]
                detail = "heard from: as many webhooks as [sources.expect] expects"
        else:
            detail = "; ".join(
                r["kind"] + (f": {r['detail']}" if r["detail"] else "") for r in interval["reasons"]
            )
        rows.append(
            {
                "state": interval["state"],
                "from": interval["from"],
                "to": interval["to"],
                "length": _span(interval["seconds"]),
                "detail": detail,
            }
        )
    print_table(rows, ("state", "from", "to", "length", "detail"))


def _span(seconds: float) -> str:
    whole = int(seconds)
    if whole < 60:
        return f"{seconds:.3g}s" if seconds < 10 else f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m {whole % 60}s"
    if whole < 86400:
        return f"{whole // 3600}h {whole % 3600 // 60}m"
    return f"{whole // 86400}d {whole % 86400 // 3600}h"
