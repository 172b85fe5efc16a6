#!/bin/sh
# Run once by the postgres image when it creates the primary's data folder (/docker-entrypoint-initdb.d): lets the
# compose `replica` service stream from it (docs/operations.md "Running with a standby"). An existing data folder
# needs the same line added by hand, then `SELECT pg_reload_conf()`.
set -e
echo "host replication ${POSTGRES_USER} all scram-sha-256" >> "$PGDATA/pg_hba.conf"
