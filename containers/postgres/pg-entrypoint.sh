#!/bin/sh
# Initialise a throw-away cluster, create the role/database from PG_USER/PG_PASSWORD/PG_DB, then
# serve on all interfaces of the task's private network. Durability is off: the data dies with the task.
set -eu
BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
mkdir -p "$PGDATA" /run/postgresql
chown -R postgres:postgres "$(dirname "$PGDATA")" /run/postgresql
as_pg() { runuser -u postgres -- "$@"; }
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  printf '%s' "$PG_PASSWORD" > /tmp/pwfile && chown postgres /tmp/pwfile
  as_pg "$BIN/initdb" -D "$PGDATA" -E UTF8 --locale=C.UTF-8 -U "$PG_USER" --pwfile=/tmp/pwfile -A scram-sha-256 >/dev/null
  rm -f /tmp/pwfile
  echo "host all all 0.0.0.0/0 scram-sha-256" >> "$PGDATA/pg_hba.conf"
  as_pg "$BIN/pg_ctl" -D "$PGDATA" -w -o "-c listen_addresses=''" start >/dev/null
  if [ "$PG_DB" != "postgres" ]; then
    PGPASSWORD="$PG_PASSWORD" as_pg "$BIN/psql" -h /run/postgresql -U "$PG_USER" -d postgres -v ON_ERROR_STOP=1 \
      -c "CREATE DATABASE \"$PG_DB\"" >/dev/null
  fi
  as_pg "$BIN/pg_ctl" -D "$PGDATA" -w stop >/dev/null
fi
exec runuser -u postgres -- "$BIN/postgres" -D "$PGDATA" -c listen_addresses='*' \
  -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200
