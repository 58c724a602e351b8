"""Lint gate: signatures, tokens, secrets and MACs are never compared with ``==``/``!=``.

``==`` on bytes or str stops at the first differing byte, so its time tells an
attacker how much of a guess was right. Every such comparison in hookd goes
through ``hmac.compare_digest``. This test reads the source of every package
(``ast``, not regexes) and fails on an equality comparison where either side
names one of those values.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("hookd", "ingest", "processing", "reconcile", "store")
SENSITIVE = re.compile(
    r"(^|_)(sig|sigs|signature|signatures|token|tokens|secret|secrets|digest|mac|hmac|csrf|"
    r"password|expected|given)($|_)",
    re.IGNORECASE,
)


def names_in(node: ast.AST) -> list[str]:
    """Identifiers an operand is made of: ``sig``, ``self._token``, ``headers["x-signature"]``."""
    out: list[str] = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            out.append(sub.id)
        elif isinstance(sub, ast.Attribute):
            out.append(sub.attr)
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            out.extend(re.split(r"[-.\s]", sub.value))
    return out


def is_harmless(node: ast.AST) -> bool:
    """Comparing with None, a number, a bool or a length reveals nothing about a secret."""
    if isinstance(node, ast.Constant) and not isinstance(node.value, (str, bytes)):
        return True
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len"


def offending(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        for op, left, right in zip(node.ops, operands, operands[1:], strict=False):
            if not isinstance(op, (ast.Eq, ast.NotEq)):
                continue
            if is_harmless(left) or is_harmless(right):
                continue
            hits = [n for n in names_in(left) + names_in(right) if SENSITIVE.search(n)]
            if hits:
                found.append((node.lineno, ", ".join(sorted(set(hits)))))
    return found


def test_no_equality_comparison_on_signatures_tokens_or_secrets() -> None:
    problems = []
    files = [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]
    assert len(files) > 30, "the scan must see the packages"
    for path in files:
        for line, names in offending(ast.parse(path.read_text(), str(path))):
            problems.append(f"{path.relative_to(ROOT)}:{line}: == on {names}")
    assert not problems, "use hmac.compare_digest:\n" + "\n".join(problems)


def test_the_gate_catches_what_it_is_for() -> None:
    caught = """
if given_signature == expected: pass
if request.headers["x-hub-signature-256"] != sig: pass
if token == self._token: pass
if form.get("csrf") == session.csrf: pass
"""
    assert [line for line, _ in offending(ast.parse(caught))] == [2, 3, 4, 5]
    allowed = """
if hmac.compare_digest(given, expected): pass
if token is None: pass
if len(signature) == 64: pass
if scheme.lower() != "bearer": pass
if event.type == "push": pass
"""
    assert offending(ast.parse(allowed)) == []
