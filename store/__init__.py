"""hookd storage: schema, migrations and the queries that matter.

At the top, what every part shares: engines (``db``), the dialect differences
(``dialect``), tables (``models``), typed rows (``rows``), status words (``status``),
ids, unstorable values (``values``), body encryption and its key rotation
(``crypto``, ``keys``), named SQL (``queries``, ``sql/``) and migrations
(``migrate``). Each sub-package holds one idea: ``intake``, ``claims``,
``reconcile``, ``retention``, ``delivery``, ``admin``.
"""
