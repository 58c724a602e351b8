"""Claims and outcomes: events handed to processing and what became of them.

- ``claiming``: claims (due, orphaned, expired), the handler ledger, leases renewed
  and released, events marked processed or failed, replays.
- ``history``: an event's history, one row per attempt and per replay, written in
  the transaction of the outcome or the replay.
"""
