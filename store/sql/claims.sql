-- The ledger (handler_runs) and claims: statements written as SQL text.

-- name: ledger_pg
-- The ledger of a batch of events (:ids): one probe of the ledger's primary key per
-- id, in a LATERAL subquery the planner may not flatten (OFFSET 0). A plain
-- `event_id = ANY(...)` is estimated, without statistics on event_id, at half the
-- table and planned as a scan of the whole ledger.
SELECT k.id, h.handler FROM unnest(CAST(:ids AS text[])) AS k(id)
CROSS JOIN LATERAL (SELECT r.handler FROM handler_runs AS r
WHERE r.event_id = k.id OFFSET 0) AS h

-- name: ledger_insert_pg
-- A batch's (event, handler) pairs as one statement over two arrays: one execution,
-- where an executemany binds and executes each pair on its own.
INSERT INTO handler_runs (event_id, handler, finished_at)
SELECT e, h, CAST(:now AS timestamptz)
FROM unnest(CAST(:e AS text[]), CAST(:h AS text[])) AS v(e, h)
ON CONFLICT (event_id, handler) DO NOTHING

-- name: ledger_insert_sqlite
-- The same for the SQLite driver, as it takes it (an executemany of positional rows).
INSERT INTO handler_runs (event_id, handler, finished_at) VALUES (?, ?, ?)
ON CONFLICT (event_id, handler) DO NOTHING
