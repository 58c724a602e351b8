-- An event's history (event_history): a batch's attempts.

-- name: attempts_pg
-- A batch's attempts as one statement over arrays: one execution and one plan for
-- the batch (an executemany runs the statement once per row).
INSERT INTO event_history (event_id, kind, at, finished_at, attempt, worker, handler,
                           outcome, error, error_type, duration_s)
SELECT e, :kind, a, f, n, w, h, o, r, t, d FROM unnest(CAST(:e AS text[]),
  CAST(:a AS timestamptz[]), CAST(:f AS timestamptz[]), CAST(:n AS integer[]),
  CAST(:w AS text[]), CAST(:h AS text[]), CAST(:o AS text[]), CAST(:r AS text[]),
  CAST(:t AS text[]), CAST(:d AS double precision[])) AS v(e, a, f, n, w, h, o, r, t, d)

-- name: attempts_sqlite
-- The rows as the SQLite driver takes them, in one executemany, without SQLAlchemy's
-- per-row parameter processing (a dict and two datetime conversions per row), which
-- was most of this statement's time in the write lock.
INSERT INTO event_history (event_id, kind, at, finished_at, attempt, worker, handler,
                           outcome, error, error_type, duration_s)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
