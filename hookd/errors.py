"""One error tree for all of hookd, with reason codes.

Exceptions carry a short machine-readable ``reason`` and never a body, header
value or secret, so they are safe to log and to return to a caller.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from typing import Any


class HookdError(Exception):
    """Root of every error hookd raises on purpose."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(reason if not detail else f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class SignatureError(HookdError):
    """The request is not proven to come from the provider (HTTP 401)."""


class HandshakeRefused(SignatureError):
    """A registration handshake hookd will not answer (HTTP 403, reason
    ``handshake_refused``; ``detail`` says why): its verify token is wrong, or it would
    replace a secret already learned. Nothing is stored."""

    def __init__(self, detail: str) -> None:
        super().__init__("handshake_refused", detail)


class PayloadError(HookdError):
    """The request is authentic but its payload cannot be understood (HTTP 400)."""


class ConfigError(HookdError):
    """The configuration cannot be used; ``str()`` is the one line to print."""

    def __init__(self, message: str) -> None:
        super().__init__("config_error", message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class PermanentError(HookdError):
    """A handler failure that retrying cannot fix (e.g. a 4xx from the target)."""


class ReconcileError(HookdError):
    """A run could not finish; the cursor stays where it was."""


class AuthFailure(ReconcileError):
    """The provider refused our credentials (401/403, Slack invalid_auth)."""


class RateLimited(ReconcileError):
    """The provider asked us to wait longer than a run may wait."""

    def __init__(self, wait_s: float) -> None:
        super().__init__("rate_limited", f"provider asks to wait {wait_s:.0f}s")
        self.wait_s = wait_s


class LeaseLost(ReconcileError):
    """Another run took the source's lease over (ours expired)."""


class BadRequest(HookdError):
    """A query the operations refuse (HTTP 400); ``field`` names what is wrong
    (``status``, ``origin``, ``limit``, ``cursor``, or ``text`` for a NUL in a filter)
    and ``detail`` is the sentence the operations API answers with."""

    def __init__(self, field: str, detail: str) -> None:
        super().__init__("bad_request", detail)
        self.field = field


class NotFound(HookdError):
    """No such event, source or reconciliation run (HTTP 404); ``kind`` says which.
    ``said`` is a sentence for the caller when there is more to say than "no such
    thing" (an event pruned by retention: when, and how it had ended)."""

    def __init__(self, kind: str, said: str = "") -> None:
        super().__init__("not_found", kind)
        self.kind = kind
        self.said = said


class Conflict(HookdError):
    """The thing exists but cannot be done now (HTTP 409): ``in_progress`` (the event is
    being processed), ``not_configured`` (the source has no reconciliation)."""


# What a pydantic validation error says, in hookd's words: the ``ValidationError`` of a
# sources file table or of a ``HOOKD_*`` variable becomes the ``what is wrong`` part of
# a ConfigError line. Pure: it reads the error's details (type, msg, ctx, input) only.
_WHOLE = "must be a whole number"
_ARRAY = 'must be an array (in brackets: ["a", "b"])'
_TABLE = "must be a table (key = { ... } or a [section] of its own)"
# Error type: the sentence, and whether the kind of value given is worth adding.
_SAID: dict[str, tuple[str, bool]] = {
    "missing": ("is required; add it", False),
    "int_parsing": (_WHOLE, True),
    "int_type": (_WHOLE, True),
    "int_from_float": (_WHOLE + ", not a number with a fraction", False),
    "int_parsing_size": ("is too large a number", False),
    "float_parsing": ("must be a number", True),
    "float_type": ("must be a number", True),
    "finite_number": ("must be a finite number", False),
    "bool_parsing": ("must be true or false", True),
    "bool_type": ("must be true or false", True),
    "string_type": ('must be a string (in quotes: "...")', True),
    "string_unicode": ("must be plain text", False),
    **dict.fromkeys(
        ("tuple_type", "list_type", "set_type", "frozen_set_type", "iterable_type"),
        (_ARRAY, True),
    ),
    **dict.fromkeys(
        ("dict_type", "model_type", "model_attributes_type", "dataclass_type"), (_TABLE, True)
    ),
}
# Error type: the context key it reads, and the sentence around its value.
_BOUNDS: dict[str, tuple[str, str]] = {
    "greater_than": ("gt", "must be greater than {}"),
    "greater_than_equal": ("ge", "must be {} or more"),
    "less_than": ("lt", "must be less than {}"),
    "less_than_equal": ("le", "must be {} or less"),
    "too_short": ("min_length", "needs at least {}"),
    "too_long": ("max_length", "takes at most {}"),
    "string_too_short": ("min_length", "must be at least {} long"),
    "string_too_long": ("max_length", "must be at most {} long"),
    "string_pattern_mismatch": ("pattern", "must match {}"),
}
# The TOML kinds of value, as a line names what it got instead (never the value).
_KINDS: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (bool, "true/false"),
    (int, "a whole number"),
    (float, "a number"),
    (str, "a string"),
    (dict, "a table"),
    ((list, tuple), "an array"),
)


def input_kind(value: object) -> str:
    """What a value read from TOML is, in its words; never the value itself (it may
    be a secret)."""
    return next((said for kind, said in _KINDS if isinstance(value, kind)), "a date or time")


def _bound(kind: str, value: object) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if kind in ("too_short", "too_long"):
        return f"{value} entry" if value == 1 else f"{value} entries"
    if kind in ("string_too_short", "string_too_long"):
        return f"{value} character" if value == 1 else f"{value} characters"
    return str(value)


def validation_problem(err: Mapping[str, Any], *, kinds: bool = True) -> str:
    """One pydantic error (an item of ``ValidationError.errors()``) as hookd says it:
    ``must be a whole number, not a string`` where pydantic says ``Input should be a
    valid integer, unable to parse string as an integer``. ``kinds``: name what kind
    of value was given instead (a TOML value; not for environment variables, which are
    all strings). Values are never quoted back: they may be secrets."""
    kind = str(err.get("type", ""))
    ctx: Mapping[str, Any] = err.get("ctx") or {}
    if kind in ("value_error", "assertion_error") and ctx.get("error") is not None:
        return str(ctx["error"])  # hookd's own validators' sentence
    if kind in _SAID:
        said, add_kind = _SAID[kind]
        given = add_kind and kinds and "input" in err
        return said + (f", not {input_kind(err['input'])}" if given else "")
    if kind in _BOUNDS and _BOUNDS[kind][0] in ctx:
        name, said = _BOUNDS[kind]
        return said.format(_bound(kind, ctx[name]))
    if kind in ("literal_error", "enum") and "expected" in ctx:
        return literal_problem(str(ctx["expected"]), err.get("input"))
    return _reworded(str(err.get("msg", "is not valid")))


def literal_problem(expected: str, value: object) -> str:
    """``must be 'a' or 'b', not 'x' (did you mean 'a'?)``: a value that is not one of
    the words a setting takes (``expected`` as pydantic lists them: ``'a', 'b' or
    'c'``). Such values name a choice, not a secret, so the one given is quoted, cut
    to 40 characters."""
    if not isinstance(value, str):
        return f"must be {expected}, not {input_kind(value)}"
    options = re.findall(r"'([^']*)'", expected)
    shown = value if len(value) <= 40 else value[:40] + "…"
    return f"must be {expected}, not {shown!r}{did_you_mean(value, options)}"


def did_you_mean(word: str, valid: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``valid`` to ``word``, or nothing."""
    close = difflib.get_close_matches(word, valid, n=1, cutoff=0.6)
    if not close and word.lower() in valid:
        close = [word.lower()]
    return f" (did you mean {close[0]!r}?)" if close else ""


def _reworded(message: str) -> str:
    """Pydantic's sentence for an error type not mapped above, in hookd's form."""
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    if message.startswith("Input should be "):
        message = "must be " + message.removeprefix("Input should be ")
    return message[:1].lower() + message[1:] if message[:2] != message[:2].upper() else message
