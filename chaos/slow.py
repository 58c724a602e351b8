"""Slow and large clients: oversized uploads are refused with bounded memory, and
connections trickling bytes are cut while signed deliveries keep being acknowledged.

Phase 1 opens ``oversized`` connections at once, in four shapes:

- ``declared``: ``Content-Length`` far above ``max_body_bytes``; the client sends the head
  and waits: the answer must come before a byte of body is sent;
- ``chunked``: ``Transfer-Encoding: chunked`` with no length, streaming many times the
  limit: refused while reading, once the limit is passed;
- ``conflicting``: a small ``Content-Length`` *and* ``Transfer-Encoding: chunked``,
  then a chunked stream past the limit (a lie about the length, request-smuggling
  shaped): refused at the head;
- ``endless_head``: a header line that never ends, streamed as fast as the server reads:
  refused once the head passes 64 KiB (``ingest.httpguard``).

The receiver's resident memory is read from ``/proc/PID/status`` before, during (peak) and
after, against a bound derived from what hookd buffers: at most ``max_body_bytes`` per
connection, plus uvicorn's own read buffer.

Phase 2 opens ``tricklers`` connections that send a request head and then one byte of body
a second, or the head itself one byte a second, while signed deliveries arrive at a steady
rate (open loop, so a stall shows as latency). The tricklers must be cut by the deadlines
(``HOOKD_BODY_TIMEOUT_S``) and the deliveries acknowledged in time.

The clients and the memory and database gauges are ``chaos.slow_clients``.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from chaos import harness
from chaos.harness import Delivery, HookdServer, Result, config, deliveries, pg_database
from chaos.slow_clients import (
    KIB,
    MAX_BODY,
    MIB,
    Hold,
    RssWatch,
    Trickle,
    Upload,
    children,
    commit_probe,
    drained,
    oversized_upload,
    proc_status,
    steady_deliveries,
    trickler,
)

TITLE = "Slow and large clients"
QUICK: dict[str, Any] = {
    "oversized": 20,
    "tricklers": 100,
    "legit_rate": 60.0,
    "body_timeout_s": 2.0,
}
FULL: dict[str, Any] = {
    "oversized": 100,
    "tricklers": 500,
    "legit_rate": 100.0,
    "body_timeout_s": 3.0,
}

# What uvicorn holds for a connection besides the app's buffer: its body buffer pauses
# reading above 64 KiB (HIGH_WATER_LIMIT) and one socket read adds up to 256 KiB.
SERVER_BUFFER = 320 * KIB
FIXED_SLACK = 16 * MIB
KINDS = ("declared", "chunked", "conflicting", "endless_head")
# The deadline sweep runs every 0.25 s; allow that, scheduling and a loaded machine.
CUT_SLACK_S = 2.0
# What the slow clients may add to a legitimate delivery's p99 while they are held,
# beyond the baseline: the larger of the longest durable commit the database itself
# took in the same window (a commit probe measures it) and the p99 of the same
# deliveries sent just before and just after, with no trickler (the larger of the two).
# The tricklers must not starve anyone, but a disk that stalls every writer, or a CPU
# the whole machine is short of (a CI box building images and running other suites),
# is not theirs.
P99_BUDGET_S = 3.0


# --- the scenario ---------------------------------------------------------------------


def raise_nofile(needed: int) -> dict[str, int]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    figures = {"soft_before": soft, "hard": hard, "needed": needed}
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(hard, needed)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    figures["soft"] = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return figures


@contextlib.asynccontextmanager
async def database() -> AsyncIterator[str]:
    """``harness.pg_database`` from a running loop (migrations call ``asyncio.run``)."""
    manager = pg_database()
    url = await asyncio.to_thread(manager.__enter__)
    try:
        yield url
    finally:
        await asyncio.to_thread(manager.__exit__, None, None, None)


def mixed(count: int, start: int) -> list[Delivery]:
    per = -(-count // len(harness.PROVIDERS))
    items = [d for p in harness.PROVIDERS for d in deliveries(p, per, start)]
    return [items[(i % 4) * per + i // 4] for i in range(count)]


def spread(values: Sequence[float]) -> dict[str, float]:
    return {
        "min": round(min(values, default=0.0), 3),
        "p50": round(harness.percentile(values, 50), 3),
        "p99": round(harness.percentile(values, 99), 3),
        "max": round(max(values, default=0.0), 3),
    }


@dataclass
class Phase:
    figures: dict[str, Any] = field(default_factory=dict)
    checks: dict[str, bool] = field(default_factory=dict)


async def oversized_phase(server: HookdServer, pid: int, count: int, stream_bytes: int) -> Phase:
    before = proc_status(pid).get("VmRSS", 0)
    watch = RssWatch(pid)
    watch.start()
    started = time.monotonic()
    kinds = [KINDS[i % len(KINDS)] for i in range(count)]
    hold = Hold(kinds.count("chunked"), pid)
    uploads = await asyncio.gather(
        *(
            oversized_upload(server.port, kind, 10_000 + i, stream_bytes, hold)
            for i, kind in enumerate(kinds)
        )
    )
    took = time.monotonic() - started
    peak = await watch.stop()
    await asyncio.sleep(1.0)
    after = proc_status(pid)
    bound = count * (MAX_BODY + SERVER_BUFFER) + FIXED_SLACK
    attempted = sum(64 * MAX_BODY if u.kind == "declared" else stream_bytes for u in uploads)
    figures = {
        "count": count,
        "took_s": round(took, 2),
        "by_kind": uploads_by_kind(uploads),
        "attempted_mib": round(attempted / MIB),
        "pushed_mib": round(sum(u.body_sent for u in uploads) / MIB, 1),
        "rss_before_mib": round(before / MIB, 1),
        "chunked_held_together": hold.all_arrived,
        "growth_per_held_upload_mib": round(
            (hold.rss_held - before) / max(1, hold.parties) / MIB, 2
        ),
        "rss_all_chunked_held_mib": round(hold.rss_held / MIB, 1),
        "rss_peak_mib": round(peak / MIB, 1),
        "rss_after_mib": round(after.get("VmRSS", 0) / MIB, 1),
        "peak_growth_mib": round((peak - before) / MIB, 1),
        "bound_mib": round(bound / MIB, 1),
        "peak_from": peak_from(watch),
    }
    checks = upload_checks(uploads) | {"memory_bounded": peak - before <= bound}
    return Phase(figures, checks)


def uploads_by_kind(uploads: Sequence[Upload]) -> dict[str, dict[str, Any]]:
    by_kind: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        mine = [u for u in uploads if u.kind == kind]
        by_kind[kind] = {
            "sent": len(mine),
            "answers": dict(Counter(str(u.status or u.ending) for u in mine)),
            "body_sent_median_kib": round(
                harness.percentile([u.body_sent for u in mine], 50) / KIB, 1
            ),
            "answer_s": spread([u.answer_s for u in mine]),
        }
    return by_kind


def peak_from(watch: RssWatch) -> str:
    if watch.hwm_reset:
        return "VmHWM reset by clear_refs, and VmRSS sampled every 20 ms"
    return f"VmRSS sampled every 20 ms ({watch.samples} samples)"


def upload_checks(uploads: Sequence[Upload]) -> dict[str, bool]:
    """Each shape of oversized upload refused as it must be (and some sent)."""
    of = {kind: [u for u in uploads if u.kind == kind] for kind in KINDS}
    declared, chunked = of["declared"], of["chunked"]
    conflicting, endless = of["conflicting"], of["endless_head"]
    return {
        "declared_413_before_body": bool(declared)
        and all(u.status == 413 and u.body_sent == 0 for u in declared),
        "chunked_413_while_reading": bool(chunked)
        and all(u.status == 413 and u.body_sent > MAX_BODY for u in chunked),
        "conflicting_refused": bool(conflicting)
        and all(u.status in (400, 413) for u in conflicting),
        "endless_head_431": bool(endless) and all(u.status == 431 for u in endless),
    }


async def trickle_phase(
    server: HookdServer, count: int, rate: float, body_timeout_s: float, url: str
) -> Phase:
    window_s = body_timeout_s + 3.0
    items = mixed(int(rate * window_s), 30_000)
    # The same deliveries with no trickler, just before: what this machine gives now.
    control = await steady_deliveries(server.url, mixed(len(items), 40_000), rate)
    # Their processing (in the server's own loop) is done before the tricklers come.
    await drained(url)
    stop_probe = asyncio.Event()
    probe = asyncio.create_task(commit_probe(url, stop_probe))
    ready = asyncio.Event()
    give_up_s = body_timeout_s + 8.0
    tricklers = [
        asyncio.create_task(
            trickler(server.port, "body" if i % 2 == 0 else "head", 20_000 + i, give_up_s, ready)
        )
        for i in range(count)
    ]
    await asyncio.sleep(0.5)  # every connection open and its head sent
    ready.set()
    legit = await steady_deliveries(server.url, items, rate)
    stop_probe.set()
    commits = await probe
    trickles = await asyncio.gather(*tricklers)
    # And again once every trickler is gone: the load of a shared machine drifts within
    # a minute, so the baseline brackets the phase instead of only preceding it.
    await drained(url)
    control += await steady_deliveries(server.url, mixed(len(items), 50_000), rate)
    sent = Sent(legit, control[: len(items)], control[len(items) :], commits)
    legit_figures = sent.figures(rate, window_s)
    legit_figures["p99_budget_s"] = round(P99_BUDGET_S + sent.baseline_s(), 3)
    figures = {"legit": legit_figures, "tricklers": trickle_figures(trickles)}
    checks = sent.checks() | trickle_checks(trickles, body_timeout_s + CUT_SLACK_S)
    return Phase(figures, checks)


@dataclass
class Sent:
    """The signed deliveries of the trickle phase, the same without tricklers before and
    after, and the database's own commits meanwhile (the probe)."""

    legit: list[Result]
    before: list[Result]
    after: list[Result]
    commits: list[float]

    def baseline_s(self) -> float:
        """What the machine itself took meanwhile: the longest commit, or the worse
        p99 of the deliveries with no trickler."""
        control_p99_s = max(
            harness.percentile([r.latency_s for r in self.before], 99),
            harness.percentile([r.latency_s for r in self.after], 99),
        )
        return max(max(self.commits, default=0.0), control_p99_s)

    def figures(self, rate: float, window_s: float) -> dict[str, Any]:
        control = [*self.before, *self.after]
        return {
            "sent": len(self.legit),
            "rate_per_s": rate,
            "window_s": window_s,
            "statuses": dict(Counter(str(r.status or r.error) for r in self.legit)),
            "latency_s": spread([r.latency_s for r in self.legit]),
            # The database's own durable commits in the same window (the probe).
            "db_commit_s": spread(self.commits),
            # The same count at the same rate just before and just after, with no trickler.
            "control_before_latency_s": spread([r.latency_s for r in self.before]),
            "control_after_latency_s": spread([r.latency_s for r in self.after]),
            "control_statuses": dict(Counter(str(r.status or r.error) for r in control)),
        }

    def checks(self) -> dict[str, bool]:
        everything = [*self.legit, *self.before, *self.after]
        p99 = harness.percentile([r.latency_s for r in self.legit], 99)
        return {
            "legit_all_acknowledged": bool(self.legit) and all(r.status == 202 for r in everything),
            "legit_p99_under_3s_beyond_the_baseline": p99 < P99_BUDGET_S + self.baseline_s(),
            "commit_probe_ran": len(self.commits) > 0,
        }


def trickle_figures(trickles: Sequence[Trickle]) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for kind in ("body", "head"):
        mine = [t for t in trickles if t.kind == kind]
        cut = [t for t in mine if t.ending != "open"]
        figures[kind] = {
            "opened": sum(t.connected for t in mine),
            "cut": len(cut),
            "endings": dict(Counter(str(t.status) if t.status else t.ending for t in mine)),
            "cut_after_s": spread([t.cut_s for t in cut]),
            "bytes_trickled_max": max((t.trickled for t in mine), default=0),
        }
    return figures


def trickle_checks(trickles: Sequence[Trickle], limit_s: float) -> dict[str, bool]:
    """Every trickler cut by the deadlines within ``limit_s``."""
    body = [t for t in trickles if t.kind == "body"]
    head = [t for t in trickles if t.kind == "head"]
    return {
        "body_tricklers_cut_with_408": bool(body)
        and all(t.connected and t.status == 408 and t.cut_s <= limit_s for t in body),
        "head_tricklers_cut": bool(head)
        and all(t.connected and t.ending != "open" and t.cut_s <= limit_s for t in head),
    }


async def run(
    oversized: int = 100,
    tricklers: int = 500,
    legit_rate: float = 100.0,
    body_timeout_s: float = 3.0,
    stream_factor: int = 16,
) -> dict[str, Any]:
    nofile = raise_nofile(tricklers + oversized + 256)
    figures: dict[str, Any] = {
        "max_body_bytes": MAX_BODY,
        "body_timeout_s": body_timeout_s,
        "nofile": nofile,
    }
    async with harness.workdir() as wd, database() as url:
        extra = f"max_body_bytes = {MAX_BODY}\n"
        env = {
            "HOOKD_CONFIG": str(config(wd, handler=None, extra=extra)),
            "HOOKD_DATABASE_URL": url,
            "HOOKD_BODY_TIMEOUT_S": str(body_timeout_s),
        }
        server = HookdServer(env, Path(wd))
        await asyncio.to_thread(server.start)
        try:
            assert server.proc is not None
            pid = server.proc.pid
            figures["server"] = {"pid_children": children(pid)}
            warm = await harness.send(server.url, mixed(200, 0), concurrency=16)
            figures["warmup_acked"] = sum(r.status == 202 for r in warm)
            large = await oversized_phase(server, pid, oversized, stream_factor * MAX_BODY)
            slow = await trickle_phase(server, tricklers, legit_rate, body_timeout_s, url)
            async with httpx.AsyncClient(base_url=server.url, timeout=5) as client:
                healthy = (await client.get("/healthz")).status_code == 200
            figures["rss_end_mib"] = round(proc_status(pid).get("VmRSS", 0) / MIB, 1)
        finally:
            await asyncio.to_thread(server.stop)
    figures["oversized"] = large.figures
    figures |= slow.figures
    figures["checks"] = {
        "uvicorn_in_server_process": figures["server"]["pid_children"] == [],
        **large.checks,
        **slow.checks,
        "server_healthy_after": healthy,
    }
    return figures


def report(figures: dict[str, Any]) -> str:
    big = figures["oversized"]
    limit_mib = figures["max_body_bytes"] / MIB
    lines = [
        f"One `hookd serve --workers 1` on PostgreSQL (uvicorn runs in that process: it has "
        f"no children), `max_body_bytes` = {limit_mib:g} MiB, "
        f"`HOOKD_BODY_TIMEOUT_S` = {figures['body_timeout_s']:g}, open-file limit "
        f"{figures['nofile']['soft']} (hard {figures['nofile']['hard']}).",
        "",
        f"**{big['count']} oversized uploads at once** (clients declared or tried to push "
        f"{big['attempted_mib']} MiB in all, and wrote {big['pushed_mib']} MiB before "
        "the answers came):",
        "",
        "| Upload | Sent | Answers | Body bytes sent when answered (median) | Answer p50 / max |",
        "|---|---:|---|---:|---:|",
    ]
    shapes = {
        "declared": "`Content-Length` 64 MiB, body held back",
        "chunked": "chunked, no length, streams 16 MiB",
        "conflicting": "`Content-Length: 100` + chunked 16 MiB",
        "endless_head": "a header line that never ends (16 MiB)",
    }
    for kind in KINDS:
        row = big["by_kind"][kind]
        answers = ", ".join(f"{k} x {v}" for k, v in sorted(row["answers"].items()))
        lines.append(
            f"| {shapes[kind]} | {row['sent']} | {answers} | "
            f"{row['body_sent_median_kib']:g} KiB | "
            f"{row['answer_s']['p50']:.2f} s / {row['answer_s']['max']:.2f} s |"
        )
    lines += [
        "",
        "| Receiver RSS | MiB |",
        "|---|---:|",
        f"| before | {big['rss_before_mib']} |",
        f"| all {big['by_kind']['chunked']['sent']} chunked uploads held at 960 KiB at once "
        f"({big['growth_per_held_upload_mib']} MiB each) | {big['rss_all_chunked_held_mib']} |",
        f"| peak during the uploads | {big['rss_peak_mib']} |",
        f"| 1 s after | {big['rss_after_mib']} |",
        f"| **peak growth** | **{big['peak_growth_mib']}** |",
        f"| bound: {big['count']} x ({limit_mib:g} MiB + 320 KiB) + 16 MiB | {big['bound_mib']} |",
        "",
        f"Peak from {big['peak_from']}. The bound is what hookd can hold: a body is read "
        "into memory only up to `max_body_bytes` (the request is refused as the next chunk "
        "passes it), plus uvicorn's buffer (it stops reading above 64 KiB, one read is at "
        "most 256 KiB). A declared length above the limit is refused from the head alone; "
        "conflicting length headers are refused by the HTTP parser; a head is cut at 64 KiB.",
        "",
    ]
    legit = figures["legit"]
    trick = figures["tricklers"]
    lat = legit["latency_s"]
    lines += [
        f"**{trick['body']['opened'] + trick['head']['opened']} trickling connections** "
        f"with {legit['sent']} signed deliveries at {legit['rate_per_s']:g}/s over "
        f"{legit['window_s']:g} s alongside:",
        "",
        "| Tricklers | Opened | Cut | Answer | Cut after (min / p50 / max) |",
        "|---|---:|---:|---|---:|",
    ]
    names = {"body": "head, then 1 byte of body/s", "head": "head itself at 1 byte/s"}
    for kind in ("body", "head"):
        row = trick[kind]
        endings = ", ".join(f"{k} x {v}" for k, v in sorted(row["endings"].items()))
        cut = row["cut_after_s"]
        lines.append(
            f"| {names[kind]} | {row['opened']} | {row['cut']} | {endings} | "
            f"{cut['min']:.2f} / {cut['p50']:.2f} / {cut['max']:.2f} s |"
        )
    statuses = ", ".join(f"{k} x {v}" for k, v in sorted(legit["statuses"].items()))
    db = legit["db_commit_s"]
    lines += [
        "",
        "| Signed deliveries | |",
        "|---|---:|",
        f"| answers | {statuses} |",
        f"| latency p50 / p99 / max | {lat['p50']:.3f} / {lat['p99']:.3f} / {lat['max']:.3f} s |",
        f"| database's own commits, p50 / max | {db['p50']:.3f} / {db['max']:.3f} s |",
        *(
            f"| the same with no trickler {when}, p50 / p99 | "
            f"{ctl['p50']:.3f} / {ctl['p99']:.3f} s |"
            for when in ("before", "after")
            if (ctl := legit.get(f"control_{when}_latency_s"))
        ),
        f"| p99 budget (3 s beyond the baseline) | {legit['p99_budget_s']:.3f} s |",
        "",
        "Checks: "
        + ", ".join(f"{name} {'✓' if ok else '✗'}" for name, ok in figures["checks"].items()),
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    harness.main(__name__)
