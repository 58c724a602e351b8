"""Intake: storing what arrives, once per key.

- ``events``: the event rows and their keys (``event_keys`` decides what is new),
  batches prepared for any insert path, and the reads of one event or a list.
- ``fastpath``: the receiver's insert without the ORM layer: the PostgreSQL statement,
  the SQLite insert on a thread, the ``Inserter`` protocol they share.
- ``sqlite_write``: the SQLite insert itself, on the standard library only; also the
  writer process's entry point (``python -m store.intake.sqlite_write``, started by
  ``hookd.runtime.sqlite_writer``).
"""
