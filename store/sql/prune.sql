-- Retention (prune) on PostgreSQL: probes by primary key, whatever the statistics.

-- name: live_events_pg
-- Those of :ids whose row is in events: one probe of the primary key per id
-- (LATERAL ... OFFSET 0: never planned as a scan of events).
SELECT k.id FROM unnest(CAST(:ids AS text[])) AS k(id)
CROSS JOIN LATERAL (SELECT 1 FROM events AS e WHERE e.id = k.id OFFSET 0) AS found

-- name: delete_keys_pg
-- Delete these tombstones (:keys) of :source still past :cut: a join to the primary
-- key, a unique probe per key.
DELETE FROM event_keys AS k USING unnest(CAST(:keys AS text[])) AS v(key)
WHERE k.source = :source AND k.dedupe_key = v.key
  AND k.pruned_at IS NOT NULL AND k.received_at < :cut
