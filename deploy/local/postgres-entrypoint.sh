#!/bin/sh
set -eu
data=/var/lib/postgresql/data
mkdir -p "$data" /var/run/postgresql
chown postgres "$data" /var/run/postgresql
if [ ! -s "$data/PG_VERSION" ]; then
  printf '%s\n' "$POSTGRES_PASSWORD" > /tmp/pwfile && chown postgres /tmp/pwfile
  runuser -u postgres -- initdb -D "$data" -U "$POSTGRES_USER" --pwfile=/tmp/pwfile \
    --auth-host=scram-sha-256 --auth-local=trust --encoding=UTF8 --locale=C
  rm /tmp/pwfile
  echo "host all all all scram-sha-256" >> "$data/pg_hba.conf"
  runuser -u postgres -- pg_ctl -D "$data" -w -o "-c listen_addresses=''" start
  runuser -u postgres -- psql -U "$POSTGRES_USER" -d postgres \
    -c "CREATE DATABASE \"$POSTGRES_DB\" OWNER \"$POSTGRES_USER\""
  runuser -u postgres -- pg_ctl -D "$data" -w stop
fi
exec runuser -u postgres -- postgres -D "$data" -c listen_addresses='*'
