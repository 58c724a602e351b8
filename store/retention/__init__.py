"""Retention: what is removed, and the upkeep that keeps the busy tables fast.

- ``prune``: the prune engine, each source's policy and the dry run.
- ``steps``: a prune's steps per table, in batches; ``lease``: one prune at a time.
- ``partitions``: on PostgreSQL, ``events`` partitioned by day (it describes the
  whole); ``partition_catalog`` (names and catalog reads), ``partition_sql`` (the
  statements they share), ``partition_create`` (made ahead), ``partition_drop`` (a past
  day dropped whole) and ``partition_compact`` (a past day rebuilt with the rows that
  stay).
- ``analyze``: ``ANALYZE`` of the busy tables when their statistics went stale.
"""
