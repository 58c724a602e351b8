"""Reconciliation's state.

- ``runs``: each source's lease, cursor and schedule, and the run records.
- ``coverage``: the coverage ledger (``reconcile_coverage``), the keys a run
  repaired and their late deliveries.
- ``audit``: the ``ack_violations`` ledger, the registration check's record, and
  reconciliation switched off by hand.
"""
