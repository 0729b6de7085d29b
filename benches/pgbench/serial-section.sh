#!/usr/bin/env bash
# The log's serial section: how many of the executor's batch appends one Postgres
# takes per second with 1, 2 and 4 writers at once. Every append holds the log's
# lock to its commit, so the rate no longer grows with writers where the work under
# the lock is the bound (BENCHMARKS.md, "The log's serial section").
#
# A scratch database gets awl's Postgres migrations (each in one transaction, as
# awl applies them), 5,000 run streams and 100 task streams of one event; each call
# appends two events to each of 263 runs (the size of an executor round under the
# benchmark's load), every writer on its own runs, through awl_append() as awl calls
# it.
# With a variant file, its SQL is applied after the migrations (it may replace
# awl_append(); see variants/).
# Usage: benches/pgbench/serial-section.sh [postgres://admin-url] [seconds] [variant.sql]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
url=${1:-${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}}
secs=${2:-6}
variant=${3:-}
db=awl_serial_section
psql "$url" -qAt -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
target="${url%/*}/$db"
for m in "$root"/migrations/postgres/*.sql; do
  psql "$target" -1 -q -v ON_ERROR_STOP=1 -f "$m" >/dev/null
done
if [ -n "$variant" ]; then
  psql "$target" -1 -q -v ON_ERROR_STOP=1 -f "$variant" >/dev/null
fi
psql "$target" -qAt -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
-- 5,000 run streams, and 100 task streams as a real log has streams of other kinds
-- before its first run (a workflow's definition at least), so that plans are made
-- on a table that is not empty. One event each.
SELECT count(*) FROM awl_append(
  array_fill('run'::text, ARRAY[5000]) || array_fill('task'::text, ARRAY[100]),
  (SELECT array_agg('r' || g ORDER BY g) FROM generate_series(1, 5000) g) ||
    (SELECT array_agg('t' || g ORDER BY g) FROM generate_series(1, 100) g),
  (SELECT array_agg(g ORDER BY g) FROM generate_series(1, 5100) g),
  array_fill(NULL::bigint, ARRAY[5100]), array_fill(1, ARRAY[5100]),
  (SELECT array_agg(g ORDER BY g) FROM generate_series(1, 5100) g),
  array_fill('run.started'::text, ARRAY[5000]) || array_fill('task.queued'::text, ARRAY[100]),
  array_fill(1, ARRAY[5100]),
  array_fill('{"workflow":"ten","version":"1.0.0","inputs":{}}'::jsonb, ARRAY[5000]) ||
    array_fill('{"queue":"review"}'::jsonb, ARRAY[100]),
  array_fill('{"actor":"awl"}'::jsonb, ARRAY[5100]), false);
SQL
script=$(mktemp)
trap 'rm -f "$script"' EXIT
cat >"$script" <<'SQL'
\set off :client_id * 1250 + random(0, 980)
SELECT count(*) FROM awl_append(
  array_fill('run'::text, ARRAY[263]),
  (SELECT array_agg('r' || (g + :off) ORDER BY g) FROM generate_series(1, 263) g),
  (SELECT array_agg(g ORDER BY g) FROM generate_series(1, 263) g),
  array_fill(NULL::bigint, ARRAY[263]), array_fill(2, ARRAY[263]),
  (SELECT array_agg((g + 1) / 2 ORDER BY g) FROM generate_series(1, 526) g),
  (SELECT array_agg(CASE WHEN g % 2 = 1 THEN 'run.step_succeeded' ELSE 'run.step_started' END ORDER BY g)
     FROM generate_series(1, 526) g),
  array_fill(1, ARRAY[526]),
  array_fill('{"step_id":"s3","attempt":1,"output":{"slept_ms":0},"at":"2026-11-29T23:40:00.123456Z"}'::jsonb, ARRAY[526]),
  array_fill('{"actor":"awl"}'::jsonb, ARRAY[526]), false);
SQL
echo "| writers | appends/s (263 streams x 2 events) | events/s |"
echo "|---:|---:|---:|"
for clients in 1 2 4; do
  tps=$(pgbench -n -c "$clients" -j "$clients" -T "$secs" -f "$script" "$target" 2>/dev/null |
        sed -n 's/^tps = \([0-9.]*\).*/\1/p')
  printf '| %s | %.0f | %.0f |\n' "$clients" "$tps" "$(awk -v t="$tps" 'BEGIN { print t * 526 }')"
done
psql "$url" -qAt -c "DROP DATABASE $db"
