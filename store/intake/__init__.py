"""Intake: storing what arrives, once per key.

- ``events``: the event rows and their keys (``event_keys`` decides what is new),
  batches prepared for any insert path, and the reads of one event or a list.
- ``fastpath``: the receiver's insert without the ORM layer: the PostgreSQL statement,
  the SQLite insert on a thread, the ``Inserter`` protocol they share.
- ``sqlite_write``: the SQLite insert itself and a processor's window of successes, on
  the standard library only; also the writer process's entry point (``python -m
  store.intake.sqlite_write``: a receiver's own, or with ``--listen`` the box's one
  writer that ``hookd serve`` starts, ``hookd.runtime.processors.BoxWriter``).
- ``writer_link``: the asking side of a writer process, requests pipelined on one
  stream and answered in order after their commit.
"""
