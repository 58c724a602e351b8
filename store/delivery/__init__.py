"""Delivery's shared state: what every process agrees on before it hands an event on.

- ``destinations``: pauses, circuit breakers, parked events and the ledger's
  skipped entries.
- ``objects``: per-object ordering (the claim of events of an object, one at a time,
  lowest version first, superseding stale ones) and each object's latest known state.
"""
