"""hookd storage: schema, migrations and the queries that matter."""
