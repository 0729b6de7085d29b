#!/usr/bin/env bash
# What partitioning the log (migration 0016) costs appends and reads, and what it
# saves the archive: the same history and the same statements awl sends, on the
# log as it was before 0016 (one table) and partitioned into 1, 8 and 32 run
# partitions.
#
# For each layout: a database with awl's Postgres migrations, a history of
# $EVENTS run events (ten per run, spread evenly over the run partitions, oldest
# runs in the oldest) and a tenth as many task events; then pgbench runs, for
# $SECS seconds each:
#   append_new   awl_append() of a new run's first three events (8 clients)
#   append_one   awl_append() of one event to a random existing run (8 clients)
#   tail         a page of 100 events after a random position, the read of every
#                projection and tail (the UNION over the hot log and the archive)
#   stream       one run's events (the load of every command), 2 clients each
# (prepared statements, as sqlx sends them) and, with 8 run partitions, moving the oldest partition into the archive
# whole against moving the same number of runs row by row (time and WAL).
#
# Usage: benches/pgbench/partitions.sh [postgres://admin-url] [seconds] [events]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
migrations="$here/../../migrations/postgres"
url=${1:-${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}}
SECS=${2:-10}
EVENTS=${3:-1000000}
RUNS=$((EVENTS / 10))
db=awl_partitions_bench
target="${url%/*}/$db"
scripts=$(mktemp -d)
trap 'rm -rf "$scripts"' EXIT

cat >"$scripts/append_new.sql" <<'SQL'
SELECT * FROM awl_append(ARRAY['run'], ARRAY[gen_random_uuid()::text], ARRAY[1], ARRAY[0]::bigint[], ARRAY[3],
  ARRAY[1,1,1], ARRAY['run.started','run.step_scheduled','run.step_started'], ARRAY[1,1,1],
  ARRAY['{"workflow":"bench","inputs":{}}','{"step":"build"}','{"step":"build","attempt":1}']::jsonb[],
  ARRAY['{"actor":"bench"}','{"actor":"bench"}','{"actor":"bench"}']::jsonb[], true);
SQL
cat >"$scripts/append_one.sql" <<'SQL'
\set id random(0, :runs - 1)
SELECT * FROM awl_append(ARRAY['run'], ARRAY['r' || :id::text], ARRAY[1], ARRAY[NULL]::bigint[], ARRAY[1],
  ARRAY[1], ARRAY['run.step_succeeded'], ARRAY[1],
  ARRAY['{"step":"build","attempt":1,"output":{"ok":true}}']::jsonb[], ARRAY['{"actor":"bench"}']::jsonb[], true);
SQL
cat >"$scripts/tail.sql" <<'SQL'
\set p random(0, :events - 100)
(SELECT position, stream_type, stream_id, version, event_type, event_version, payload, metadata, recorded_at
   FROM events WHERE position > :p AND position <= :p + 100 ORDER BY position LIMIT 100)
UNION ALL
(SELECT position, stream_type, stream_id, version, event_type, event_version, payload, metadata, recorded_at
   FROM events_archive WHERE position > :p AND position <= :p + 100 ORDER BY position LIMIT 100)
ORDER BY position LIMIT 100;
SQL
cat >"$scripts/stream.sql" <<'SQL'
\set id random(0, :runs - 1)
SELECT position, stream_type, stream_id, version, event_type, event_version, payload, metadata, recorded_at
  FROM events
 WHERE stream_type = 'run' AND stream_id = 'r' || :id::text
   AND version >= COALESCE((SELECT max(c.version) FROM events c
         WHERE c.stream_type = 'run' AND c.stream_id = 'r' || :id::text
           AND c.event_type = 'run.continued'), 0)
 ORDER BY version;
SQL

# A fresh database with migrations 0001 up to $1.
fresh() {
  psql "$url" -qAt -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
  for f in "$migrations"/00*.sql; do
    n=$(basename "$f" | cut -c1-4)
    [ "$((10#$n))" -le "$1" ] || continue
    psql "$target" -q -v ON_ERROR_STOP=1 -1 -f "$f" >/dev/null
  done
}

# The history: run r<i> has ten events at positions 10i+1..10i+10; run partitions
# (when $1 > 0) hold equal shares, oldest first; task events follow.
load() {
  local partitions=$1 part_expr="" part_col=""
  if [ "$partitions" -gt 0 ]; then
    part_col=", part"
    psql "$target" -qAt -c "SELECT awl_ensure_run_partition('events',
        awl_run_part(now()) - k * 604800) FROM generate_series(0, $partitions - 1) k" >/dev/null
    part_expr=", awl_run_part(now()) - ($partitions - 1 - ((g - 1) / 10) * $partitions / $RUNS) * 604800"
  fi
  local cols="position, stream_type, stream_id, version, event_type, event_version, payload, metadata"
  psql "$target" -q -v ON_ERROR_STOP=1 -c "
    INSERT INTO events ($cols$part_col)
    SELECT g, 'run', 'r' || ((g - 1) / 10), ((g - 1) % 10) + 1,
           CASE WHEN (g - 1) % 10 = 9 THEN 'run.completed' ELSE 'run.step_succeeded' END, 1,
           '{\"step\": \"build\", \"attempt\": 1, \"output\": {\"ok\": true}}', '{\"actor\": \"bench\"}'
           $part_expr
      FROM generate_series(1, $EVENTS) g" \
    -c "INSERT INTO events ($cols)
    SELECT $EVENTS + g, 'task', 't' || ((g - 1) / 5), ((g - 1) % 5) + 1, 'task.queued', 1,
           '{\"prompt\": \"do it\"}', '{\"actor\": \"bench\"}'
      FROM generate_series(1, $EVENTS / 10) g" \
    -c "VACUUM ANALYZE"
}

bench() { # script clients
  pgbench -n -M prepared -c "$2" -j 2 -T "$SECS" -D runs="$RUNS" -D events="$EVENTS" \
    -f "$scripts/$1.sql" "$target" 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p' |
    awk '{ printf "%.0f", $1 }'
}

wal() { psql "$target" -qAt -c "SELECT pg_current_wal_lsn()"; }
wal_bytes() { psql "$target" -qAt -c "SELECT pg_wal_lsn_diff('$2', '$1')"; }

# Move the oldest partition whole, then the next one's runs row by row (the same
# statements as EventStore::archive_streams), timing each.
archive_costs() {
  local parts oldest second runs_in ids before after ms last
  parts=$(psql "$target" -qAt -c "SELECT period_start FROM awl_run_partitions('events') ORDER BY 1 LIMIT 2")
  oldest=$(echo "$parts" | sed -n 1p)
  second=$(echo "$parts" | sed -n 2p)
  runs_in=$(psql "$target" -qAt -c "SELECT count(DISTINCT stream_id) FROM events WHERE part = $oldest")
  last=$(psql "$target" -qAt -c "SELECT max(position) FROM events WHERE part = $oldest")
  before=$(wal)
  ms=$(psql "$target" -qAt -c '\timing on' -c "SELECT awl_archive_run_partition($oldest, $last, now())" |
        sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p')
  after=$(wal)
  printf '| whole partition (%s runs) | %s ms | %s bytes |\n' "$runs_in" "$ms" "$(wal_bytes "$before" "$after")"
  ids="ARRAY(SELECT DISTINCT stream_id FROM events WHERE part = $second)"
  runs_in=$(psql "$target" -qAt -c "SELECT count(DISTINCT stream_id) FROM events WHERE part = $second")
  before=$(wal)
  ms=$(psql "$target" -qAt -c '\timing on' -c "BEGIN" \
        -c "SELECT awl_ensure_run_partition('events_archive', $second)" \
        -c "INSERT INTO events_archive (position, stream_type, stream_id, version, event_type, event_version, payload, metadata, recorded_at, part, archived_at)
            SELECT position, stream_type, stream_id, version, event_type, event_version, payload, metadata, recorded_at, part, now()
              FROM events WHERE stream_type = 'run' AND stream_id = ANY($ids) ON CONFLICT DO NOTHING" \
        -c "DELETE FROM events WHERE stream_type = 'run' AND stream_id = ANY($ids)" -c "COMMIT" |
        sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | awk '{ s += $1 } END { printf "%.0f", s }')
  after=$(wal)
  printf '| row by row (%s runs) | %s ms | %s bytes |\n' "$runs_in" "$ms" "$(wal_bytes "$before" "$after")"
}

echo "history: $EVENTS run events ($RUNS runs) and $((EVENTS / 10)) task events; $SECS s per figure"
echo
echo "| layout | append_new (tx/s, 8 clients) | append_one (tx/s, 8 clients) | tail page (/s, 2 clients) | one stream (/s, 2 clients) |"
echo "|---|---:|---:|---:|---:|"
archive_rows=()
for layout in 0 1 8 32; do
  if [ "$layout" = 0 ]; then fresh 15; load 0; name="one table (before 0016)"
  else fresh 99; load "$layout"; name="$layout run partitions"; fi
  printf '| %s | %s | %s | %s | %s |\n' "$name" "$(bench append_new 8)" "$(bench append_one 8)" \
    "$(bench tail 2)" "$(bench stream 2)"
  if [ "$layout" = 8 ]; then mapfile -t archive_rows < <(archive_costs); fi
done
echo
echo "Archiving with 8 run partitions (each $((RUNS / 8)) runs):"
echo
echo "| how | time | WAL |"
echo "|---|---:|---:|"
printf '%s\n' "${archive_rows[@]}"
psql "$url" -qAt -c "DROP DATABASE $db"
