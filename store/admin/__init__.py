"""The admin's and the operator's reads, and the admin's own state.

- ``activity``: a source's recent activity per minute, for the admin UI's charts.
- ``stats``: what the tables hold, for the metrics read at scrape time.
- ``watch``: read-only lists: stuck events, many attempts, samples for ``hookd try``.
- ``operations``: bulk operations: their records, their lease, the events a filter
  selects.
- ``sessions``: the admin UI's login sessions.
- ``auth_attempts``: token checks let through by the rate limit, counted in the
  database so that every process counts the same ones.
"""
