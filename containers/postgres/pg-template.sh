#!/bin/sh
# Build time: the cluster every task's Postgres starts from (pg-entrypoint.sh copies it). The same initdb as
# a task's start-up would run, for the bootstrap user "postgres", with a placeholder password that the
# entrypoint replaces with PG_PASSWORD before the server accepts any connection.
set -eu
BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
TEMPLATE=/var/lib/pbench-pg-template/data
mkdir -p "$TEMPLATE"
chown -R postgres:postgres "$(dirname "$TEMPLATE")"
printf '%s' "pbench-template-$$" > /tmp/pwfile && chown postgres /tmp/pwfile
runuser -u postgres -- "$BIN/initdb" -D "$TEMPLATE" -E UTF8 --locale=C.UTF-8 -U postgres --pwfile=/tmp/pwfile \
  -A scram-sha-256 >/dev/null
rm -f /tmp/pwfile
echo "host all all 0.0.0.0/0 scram-sha-256" >> "$TEMPLATE/pg_hba.conf"
