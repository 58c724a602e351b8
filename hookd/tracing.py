"""OpenTelemetry tracing, off unless the standard ``OTEL_*`` environment asks for it.

``setup`` reads ``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``,
``OTEL_TRACES_EXPORTER``, ``OTEL_SERVICE_NAME`` and ``OTEL_SDK_DISABLED``. With none of
them set (or the SDK disabled, or the exporter ``none``) tracing stays off: ``span``
hands back one shared no-op context manager and the ``opentelemetry`` packages are
never imported. With one set and the ``hookd[otel]`` extra missing, one line says so
and hookd runs without tracing.

Spans carry ids, names and outcomes only: never a body, a header value or a secret.
The W3C ``traceparent`` string is how a trace crosses processes: stored with an event
by the receiver (``events.traceparent``), continued by the worker, sent on to
destinations.

A claim takes a batch of events of many traces at once: its ``hookd.claim`` span
(``claimed``) is in a trace of its own (the wake-up's, when one started it) and is
linked to each event's stored context, and each event's ``hookd.process`` span is
linked back to it (``span(..., link=...)``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

log = logging.getLogger("hookd.tracing")

SWITCHES = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_TRACES_EXPORTER",
    "OTEL_SERVICE_NAME",
)
NOT_INSTALLED = "OTEL_* is set but hookd[otel] is not installed: pip install 'hookd[otel]'"
TRACEPARENT = "traceparent"
Attributes = Mapping[str, str | int | float | bool | Sequence[str]]

_NOOP: AbstractContextManager[None] = contextlib.nullcontext()
# The SDK's tracer once ``setup`` switched tracing on; None: every call is a no-op.
_tracer: Any = None
_propagator: Any = None
_provider: Any = None
_link: Any = None  # opentelemetry.trace.Link, once on
_done = False


def wanted(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for traces."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return any(env.get(name, "").strip() for name in SWITCHES)


def enabled() -> bool:
    return _tracer is not None


def setup(service: str) -> bool:
    """Switch tracing on in this process if the environment asks; whether it is on.

    ``service`` names the process (``serve``, ``worker``, ``reconcile``): the
    ``service.name`` is ``OTEL_SERVICE_NAME`` or ``hookd``. Called again, it does nothing.
    """
    global _done, _tracer, _propagator, _provider, _link  # noqa: PLW0603 - one switch per process
    if _done:
        return _tracer is not None
    _done = True
    if not wanted():
        return False
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SpanExporter,
        )
        from opentelemetry.trace import Link
        from opentelemetry.trace.propagation.tracecontext import (
            TraceContextTextMapPropagator,
        )
    except ImportError:
        log.warning(NOT_INSTALLED)
        return False
    kind = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    exporter: SpanExporter
    if kind == "console":
        exporter = ConsoleSpanExporter()
    elif kind == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()  # endpoint, headers, timeout: OTEL_EXPORTER_OTLP_*
    else:
        log.warning(
            "OTEL_TRACES_EXPORTER=%s is not supported: set it to otlp or console; "
            "running without tracing",
            kind,
        )
        return False
    name = os.environ.get("OTEL_SERVICE_NAME", "").strip() or "hookd"
    resource = Resource.create({"service.name": name, "hookd.process": service})
    provider = TracerProvider(resource=resource)  # flushed at exit (its atexit hook)
    provider.add_span_processor(BatchSpanProcessor(exporter))  # OTEL_BSP_* apply
    _provider = provider
    _tracer = provider.get_tracer("hookd")
    _propagator = TraceContextTextMapPropagator()
    _link = Link
    _install_log_ids()
    log.info("tracing on", extra={"exporter": kind, "service_name": name})
    return True


def shutdown() -> None:
    """Export what is still buffered (the provider does this at exit too)."""
    if _provider is not None:
        _provider.force_flush()


def _parent(traceparent: str | None) -> Any:
    if not traceparent:
        return None
    return _propagator.extract({TRACEPARENT: traceparent})


def span(
    name: str,
    attributes: Attributes | None = None,
    *,
    parent: str | None = None,
    link: Any = None,
) -> AbstractContextManager[Any]:
    """A span around a block, the current one inside it; a shared no-op when off.

    ``parent``: a W3C ``traceparent`` to continue (a stored event's), instead of the
    current span. ``link``: a span context ``claimed`` gave, to link this span to.
    """
    if _tracer is None:
        return _NOOP
    # An exception's message may quote a body: spans record its type only (``failed``).
    started: AbstractContextManager[Any] = _tracer.start_as_current_span(
        name,
        context=_parent(parent),
        attributes=dict(attributes or {}),
        links=() if link is None else (_link(link),),
        record_exception=False,
        set_status_on_exception=False,
    )
    return started


def clock() -> int:
    """When a span ``claimed`` will make starts (ns since the epoch); 0 when off."""
    return 0 if _tracer is None else time.time_ns()


def claimed(
    name: str,
    attributes: Attributes,
    started: int,
    linked: Iterable[tuple[str, str | None]],
) -> Any:
    """A span from ``started`` (``clock``) to now, ended at once, linked to each
    ``(event id, traceparent)`` of ``linked`` that has a context: the claim of a batch.
    Its parent is the current span (a wake-up's), if any. Its span context, for
    ``span(..., link=...)``; None when off or ``started`` is 0.
    """
    if _tracer is None or not started:
        return None
    from opentelemetry import trace

    links = []
    for event_id, stored in linked:
        context = _parent(stored)
        if context is None:
            continue
        remote = trace.get_current_span(context).get_span_context()
        if remote.is_valid:
            links.append(_link(remote, {"hookd.event_id": event_id}))
    made = _tracer.start_span(name, attributes=dict(attributes), links=links, start_time=started)
    made.end()
    return made.get_span_context()


def here() -> Any:
    """The current span, for ``note``/``annotate``/``failed``; None when off."""
    if _tracer is None:
        return None
    from opentelemetry import trace

    return trace.get_current_span()


def note(current: Any, name: str, attributes: Attributes | None = None) -> None:
    """An event on a span ``span`` gave (None when off: nothing)."""
    if current is not None:
        current.add_event(name, dict(attributes or {}))


def annotate(current: Any, attributes: Attributes) -> None:
    """Set attributes on a span ``span`` gave (None when off: nothing)."""
    if current is not None:
        current.set_attributes(dict(attributes))


def failed(current: Any, error_type: str) -> None:
    """Mark a span failed with the error's type only (its message may quote a body)."""
    if current is not None:
        from opentelemetry.trace import Status, StatusCode

        current.set_status(Status(StatusCode.ERROR, error_type))
        current.set_attribute("error.type", error_type)


def traceparent() -> str | None:
    """The current span's W3C ``traceparent``; None when off or outside a span."""
    if _tracer is None:
        return None
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    return carrier.get(TRACEPARENT)


def inject(headers: MutableMapping[str, str]) -> None:
    """Add the current span's ``traceparent`` to outgoing request headers (when on)."""
    value = traceparent()
    if value is not None:
        headers[TRACEPARENT] = value


def _install_log_ids() -> None:
    """Give each log record made inside a span its ``trace_id`` and ``span_id``."""
    from opentelemetry import trace

    make = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        ctx = trace.get_current_span().get_span_context()
        if ctx.is_valid:
            record.trace_id = format(ctx.trace_id, "032x")
            record.span_id = format(ctx.span_id, "016x")
        return record

    logging.setLogRecordFactory(factory)
