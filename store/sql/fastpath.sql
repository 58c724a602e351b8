-- The receiver's insert on PostgreSQL (asyncpg, positional parameters).

-- name: insert_pg
-- The whole batch travels as one JSON text parameter ($1) and PostgreSQL unpacks it:
-- encoding a dozen typed arrays element by element cost the receiver's event
-- loop more than everything else per row, and the database has the other core.
-- The bodies go beside it as one bytea[] ($3, row n at index n + 1): asyncpg sends
-- them as they are, with no base64 to encode here and decode there. $2 is the
-- statement's time, $4 the pause that stands for a whole source.
-- A new row starts as pending with no attempt, or leased (processing, attempt 1) when
-- the batch is committed as claimed, as store.intake.events.prepare writes it.
--
-- Keys are inserted in the batch's order (sorted by key in prepare): two
-- batches sharing keys wait on each other instead of deadlocking. The statement
-- answers one row per new event (source NULL) and one per key that was stored
-- before the statement's snapshot (its event_id, source and key); the other CTEs'
-- writes are invisible to that last SELECT, so it never sees the keys just added.
--
-- {object_types}, {object_columns} and {object_values} are empty, or the three
-- [sources.order] columns for a batch that holds events of an object;
-- {pending} and {processing} are the status words.
WITH u AS MATERIALIZED (
  SELECT *
  FROM json_to_recordset($1::json) AS u(n int, id text, source text, provider text,
                                        dedupe_key text, type text, origin text,
                                        received_at timestamptz, occurred_at timestamptz,
                                        verified_with text, headers json,
                                        body_encrypted bool, traceparent text,
                                        lease_owner text, lease_expires_at timestamptz
                                        {object_types})
),
-- A source paused whole is never handed over (``hookd sources pause``): what a claim
-- would leave, read in this statement, so a pause committed before it is never crossed.
v AS MATERIALIZED (
  SELECT u.*, u.lease_owner IS NOT NULL AND NOT EXISTS (
    SELECT 1 FROM pauses p WHERE p.source = u.source AND p.destination = $4 AND p.paused
  ) AS leased
  FROM u
),
k AS (
  INSERT INTO event_keys (source, dedupe_key, event_id, received_at)
  SELECT u.source, u.dedupe_key, u.id, u.received_at FROM u ORDER BY u.n
  ON CONFLICT (source, dedupe_key) DO NOTHING
  RETURNING event_id
),
e AS (
  INSERT INTO events (id, source, provider, dedupe_key, type, origin, received_at,
                      occurred_at, verified_with, headers, body, body_encrypted, status,
                      attempts, next_attempt_at, created_at, updated_at,
                      traceparent, lease_owner, lease_expires_at{object_columns})
  SELECT u.id, u.source, u.provider, u.dedupe_key, u.type, u.origin, u.received_at,
         u.occurred_at, u.verified_with, u.headers, ($3::bytea[])[u.n + 1],
         u.body_encrypted,
         CASE WHEN u.leased THEN '{processing}' ELSE '{pending}' END,
         CASE WHEN u.leased THEN 1 ELSE 0 END, u.received_at, $2, $2, u.traceparent,
         CASE WHEN u.leased THEN u.lease_owner END,
         CASE WHEN u.leased THEN u.lease_expires_at END{object_values}
  FROM v AS u JOIN k ON k.event_id = u.id
  ORDER BY u.n
  RETURNING id, lease_owner IS NOT NULL AS leased
)
SELECT e.id, NULL::text AS source, NULL::text AS dedupe_key, e.leased FROM e
UNION ALL
SELECT x.event_id, x.source, x.dedupe_key, NULL::bool
FROM (SELECT u.source, u.dedupe_key FROM u WHERE u.id NOT IN (SELECT event_id FROM k)) AS c
JOIN event_keys x ON x.source = c.source AND x.dedupe_key = c.dedupe_key

-- name: existing_pg
-- The events the keys ($1 sources, $2 keys) already hold.
SELECT x.event_id, x.source, x.dedupe_key
FROM event_keys x
JOIN unnest($1::text[], $2::text[]) AS k(source, dedupe_key)
  ON x.source = k.source AND x.dedupe_key = k.dedupe_key
