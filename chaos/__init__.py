"""Fault and hostile-input scenarios (issue 7), shared by CI and the published run.

Every scenario module ``chaos.NAME`` defines:

- ``TITLE``: its heading in ``docs/reliability.md``;
- ``QUICK`` and ``FULL``: keyword arguments of ``run`` for CI and for the published figures;
- ``async def run(**kwargs) -> dict``: drives real processes and returns JSON-able figures,
  with ``"checks": {name: bool}`` holding every property the scenario must show;
- ``def report(figures) -> str``: the Markdown body of its section.

``tests/chaos/`` runs each with ``QUICK`` and asserts every check; ``python -m chaos.run``
runs each with ``FULL`` and writes ``docs/reliability.md``; ``python -m chaos.NAME`` runs one.
"""
