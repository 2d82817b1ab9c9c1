#!/bin/sh
# Create the role/database from PG_USER/PG_PASSWORD/PG_DB in a throw-away cluster, then serve on all
# interfaces of the task's private network. Durability is off: the data dies with the task.
#
# Fast path: the image holds a cluster initialised at build time (pg-template.sh) for the bootstrap user
# "postgres", the user of every source's service so far. Copying it and setting the password and database
# in single-user mode takes well under a second, where initdb takes seconds on a busy machine. Any other
# PG_USER (the bootstrap superuser's name can only be chosen by initdb) takes the initdb path, as before.
set -eu
BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
TEMPLATE=/var/lib/pbench-pg-template/data
TEMPLATE_USER=postgres
mkdir -p "$PGDATA" /run/postgresql
chown -R postgres:postgres "$(dirname "$PGDATA")" /run/postgresql
as_pg() { runuser -u postgres -- "$@"; }
sql_literal() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/''/g")"; }
sql_ident() { printf '"%s"' "$(printf '%s' "$1" | sed 's/"/""/g')"; }
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  if [ "$PG_USER" = "$TEMPLATE_USER" ] && [ -s "$TEMPLATE/PG_VERSION" ]; then
    cp -a "$TEMPLATE/." "$PGDATA/"
    {
      echo "ALTER ROLE $(sql_ident "$PG_USER") PASSWORD $(sql_literal "$PG_PASSWORD")"
      if [ "$PG_DB" != "postgres" ]; then
        echo "CREATE DATABASE $(sql_ident "$PG_DB")"
      fi
    } | as_pg "$BIN/postgres" --single -D "$PGDATA" -c fsync=off -c full_page_writes=off postgres >/dev/null
  else
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
fi
exec runuser -u postgres -- "$BIN/postgres" -D "$PGDATA" -c listen_addresses='*' \
  -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200
