-- Events and their keys.

-- name: keys_pruned_pg
-- Tombstones for a batch of pruned events: each key's final status and pruned_at,
-- joined to the primary key of event_keys (a nested loop of unique-key probes
-- whatever the table's size or statistics).
UPDATE event_keys AS k SET final_status = v.status, pruned_at = :now
FROM unnest(CAST(:sources AS text[]), CAST(:keys AS text[]),
            CAST(:statuses AS text[])) AS v(source, dedupe_key, status)
WHERE k.source = v.source AND k.dedupe_key = v.dedupe_key
