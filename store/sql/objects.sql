-- Per-object ordering ([sources.order]) on PostgreSQL: the claim's statements.
-- {runnable}, {superseded} and {processing} are filled in by store.delivery.objects from the
-- status enums when the module loads; the rest are bind parameters.

-- name: lock_pg
-- The objects of the candidates that this transaction could lock: a two-key advisory
-- lock per object, in the space :space.
SELECT k.source, k.object_key
FROM unnest(CAST(:sources AS text[]), CAST(:keys AS text[])) AS k(source, object_key)
WHERE pg_try_advisory_xact_lock(:space, hashtext(k.source || '/' || k.object_key))

-- name: supersede_pg
-- Of the locked objects of sources that supersede: their runnable events older than
-- what was processed, marked superseded.
UPDATE events AS e SET status = '{superseded}', processed_at = :now,
  updated_at = :now, last_error = NULL, last_error_handler = NULL, last_error_type = NULL
FROM unnest(CAST(:sources AS text[]), CAST(:keys AS text[])) AS k(source, object_key)
JOIN source_objects AS o ON o.source = k.source AND o.object_key = k.object_key
WHERE e.source = k.source AND e.object_key = k.object_key AND e.object_key IS NOT NULL
  AND {runnable} AND e.object_version < o.version
RETURNING e.id, e.source, e.attempts

-- name: heads_pg
-- Of the locked objects not being processed: each one's due event of lowest version.
-- Where stale events are superseded, of lowest version not older than the object's: one
-- stored since supersede_pg's snapshot is new to this one, and is left to the next claim.
SELECT h.id
FROM unnest(CAST(:sources AS text[]), CAST(:keys AS text[]), CAST(:supersede AS bool[]))
  AS k(source, object_key, supersede)
LEFT JOIN source_objects AS o ON o.source = k.source AND o.object_key = k.object_key
CROSS JOIN LATERAL (SELECT e.id FROM events AS e
  WHERE e.source = k.source AND e.object_key = k.object_key AND e.object_key IS NOT NULL
  AND {runnable} AND e.next_attempt_at <= :now
  AND (NOT k.supersede OR o.version IS NULL OR e.object_version >= o.version)
  ORDER BY e.object_version, e.id LIMIT 1) AS h
WHERE NOT EXISTS (SELECT 1 FROM events AS p
  WHERE p.source = k.source AND p.object_key = k.object_key AND p.object_key IS NOT NULL
  AND p.status = '{processing}')
