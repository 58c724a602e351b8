-- Table sizes and statistics, read from the databases' catalogues.

-- name: table_sizes_pg
-- Rows and bytes per table. A partitioned table (events) has neither of its own: its
-- partitions' are added to its nothing.
SELECT c.relname, sum(greatest(l.reltuples, 0)), sum(pg_total_relation_size(l.oid))
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
CROSS JOIN LATERAL (SELECT c.oid AS relid UNION
                    SELECT relid FROM pg_partition_tree(c.oid) WHERE isleaf) AS t
JOIN pg_class l ON l.oid = t.relid
WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')
  AND c.relname = ANY(:names) GROUP BY c.relname

-- name: table_bytes_sqlite
-- Bytes per table, its indexes included, from dbstat (absent from SQLite builds
-- without SQLITE_ENABLE_DBSTAT_VTAB).
SELECT m.tbl_name, sum(d.pgsize) FROM dbstat AS d
JOIN sqlite_master AS m ON m.name = d.name GROUP BY m.tbl_name

-- name: stale_tables_pg
-- The busy tables (and the partitions of events) changed by at least :min_rows rows
-- or :fraction of their size since their last ANALYZE, that this role may analyze.
SELECT c.relname FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
WHERE s.schemaname = current_schema()
  AND c.relkind = 'r' AND (c.relname = ANY(CAST(:tables AS text[])) OR c.oid IN
      (SELECT relid FROM pg_partition_tree(to_regclass('events')) WHERE isleaf))
  AND pg_has_role(c.relowner, 'USAGE')
  AND s.n_mod_since_analyze >= greatest(:min_rows, :fraction * greatest(c.reltuples, 0))
ORDER BY s.n_mod_since_analyze DESC
