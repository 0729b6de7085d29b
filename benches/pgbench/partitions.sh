#!/usr/bin/env bash
# What partitioning the log (migration 0016) costs appends and reads, and what it
# saves the archive: the same history and the same statements awl sends, on the
# log as it was before 0016 (one table) and partitioned into 1, 8 and 32 run
# partitions.
#
# For each layout: a database with awl's Postgres migrations, a history of
# $EVENTS run events (ten per run, spread evenly over the run partitions, oldest
# runs in the oldest) and a tenth as many task events; then pgbench runs, for
# $SECS seconds each, the layouts taking turns for $ROUNDS rounds (the median):
#   append_new   awl_append() of a new run's first three events (8 clients)
#   append_one   awl_append() of one event to a random existing run (8 clients)
#   tail         a page of 100 events after a random position (a rebuild's read)
#   live         the same in the newest 5 % of the log (a live projection's read)
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
ROUNDS=${ROUNDS:-3}
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
  ARRAY['{"step": "build", "attempt": 1, "output": {"ok": true}}']::jsonb[], ARRAY['{"actor":"bench"}']::jsonb[], true);
SQL
# The tail's read as awl sends it: before 0016 the UNION over the hot log and the
# archive; after, the hot log's page with the archive's reach, and the UNION only
# when the reach is past the page (a second statement; the script reads the reach
# once more to decide, which awl takes from the page).
union='(SELECT position, stream_type, stream_id, version, event_type, event_version, payload, metadata, recorded_at
   FROM events WHERE position > :p AND position <= :p + 100 ORDER BY position LIMIT 100)
UNION ALL
(SELECT position, stream_type, stream_id, version, event_type, event_version, payload, metadata, recorded_at
   FROM events_archive WHERE position > :p AND position <= :p + 100 ORDER BY position LIMIT 100)
ORDER BY position LIMIT 100;'
printf '%s\n%s\n' '\set p random(0, :events - 100)' "$union" >"$scripts/tail_0.sql"
cat >"$scripts/tail.sql" <<SQL
\\set p random(0, :events - 100)
SELECT e.position, e.stream_type, e.stream_id, e.version, e.event_type, e.event_version, e.payload,
       e.metadata, e.recorded_at, r.last_position
  FROM events_archive_reach r
  LEFT JOIN LATERAL (SELECT position, stream_type, stream_id, version, event_type, event_version,
                            payload, metadata, recorded_at
                       FROM events WHERE position > :p AND position <= :p + 100
                      ORDER BY position LIMIT 100) AS e ON TRUE
 ORDER BY e.position;
SELECT last_position AS reach FROM events_archive_reach \\gset
\\if :reach > :p
$union
\\endif
SQL
sed 's/^\\set p .*/\\set p random(:events * 19 \/ 20, :events - 100)/' "$scripts/tail.sql" >"$scripts/live.sql"
sed 's/^\\set p .*/\\set p random(:events * 19 \/ 20, :events - 100)/' "$scripts/tail_0.sql" >"$scripts/live_0.sql"
cat >"$scripts/stream_0.sql" <<'SQL'
\set id random(0, :runs - 1)
SELECT position, stream_type, stream_id, version, event_type, event_version, payload, metadata, recorded_at
  FROM events
 WHERE stream_type = 'run' AND stream_id = 'r' || :id::text
   AND version >= COALESCE((SELECT max(c.version) FROM events c
         WHERE c.stream_type = 'run' AND c.stream_id = 'r' || :id::text
           AND c.event_type = 'run.continued'), 0)
 ORDER BY version;
SQL
# After 0016 the read carries the parts a run can have, so the streams' partition
# is pruned.
cat >"$scripts/stream.sql" <<'SQL'
\set id random(0, :runs - 1)
SELECT position, stream_type, stream_id, version, event_type, event_version, payload, metadata, recorded_at
  FROM events
 WHERE stream_type = :kind AND stream_id = 'r' || :id::text
   AND part >= awl_part_floor(:kind) AND part < awl_part_ceiling(:kind)
   AND version >= COALESCE((SELECT max(c.version) FROM events c
         WHERE c.stream_type = :kind AND c.stream_id = 'r' || :id::text
           AND c.part >= awl_part_floor(:kind) AND c.part < awl_part_ceiling(:kind)
           AND c.event_type = 'run.continued'), 0)
 ORDER BY version;
SQL

# A fresh database for layout $2 with migrations 0001 up to $1: sets $target.
fresh() {
  local db=awl_partitions_bench_$2
  target="${url%/*}/$db"
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
        awl_run_part(now()) - k * 2592000) FROM generate_series(0, $partitions - 1) k" >/dev/null
    part_expr=", awl_run_part(now()) - ($partitions - 1 - ((g - 1) / 10) * $partitions / $RUNS) * 2592000"
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
  pgbench -n -M prepared -c "$2" -j 2 -T "$SECS" -D runs="$RUNS" -D events="$EVENTS" -D kind=run \
    -f "$scripts/$1.sql" "$target" 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p' |
    awk '{ printf "%.0f", $1 }'
}

wal() { psql "$target" -qAt -c "SELECT pg_current_wal_lsn()"; }
wal_bytes() { psql "$target" -qAt -c "SELECT pg_wal_lsn_diff('$2', '$1')"; }

# Move the $1 oldest run partitions into the archive (two years of a busy archive).
retire() {
  local part last
  for part in $(psql "$target" -qAt -c "SELECT period_start FROM awl_run_partitions('events') ORDER BY 1 LIMIT $1"); do
    last=$(psql "$target" -qAt -c "SELECT max(position) FROM events WHERE part = $part")
    psql "$target" -qAt -c "SELECT awl_archive_run_partition($part, $last, now())" | grep -qx t
  done
}

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

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

echo "history: $EVENTS run events ($RUNS runs) and $((EVENTS / 10)) task events;" \
  "median of $ROUNDS rounds of $SECS s, the layouts taking turns"
layouts=(0 1 8 32 8a24)
for layout in "${layouts[@]}"; do
  case $layout in
    0) fresh 15 0; load 0 ;;
    8a24) fresh 99 "$layout"; load 32; retire 24 ;;
    *) fresh 99 "$layout"; load "$layout" ;;
  esac
done
declare -A figures
for round in $(seq 1 "$ROUNDS"); do
  for layout in "${layouts[@]}"; do
    target="${url%/*}/awl_partitions_bench_$layout"
    for case in append_new:8 append_one:8 tail:2 live:2 stream:2; do
      script=${case%%:*}
      [ "$layout" = 0 ] && [ "${script#append}" = "$script" ] && script=${script}_0
      figures[$layout.${case%%:*}]+="$(bench "$script" "${case##*:}") "
    done
  done
done
echo
echo "| layout | append_new (tx/s, 8 clients) | append_one (tx/s, 8 clients) | page anywhere (/s, 2 clients) | page near the head (/s, 2 clients) | one stream (/s, 2 clients) |"
echo "|---|---:|---:|---:|---:|---:|"
for layout in "${layouts[@]}"; do
  case $layout in
    0) name="one table (before 0016)" ;;
    8a24) name="8 run partitions, 24 more in the archive" ;;
    *) name="$layout run partitions" ;;
  esac
  row="| $name |"
  for case in append_new append_one tail live stream; do
    row+=" $(echo "${figures[$layout.$case]}" | tr ' ' '\n' | grep . | median) |"
  done
  echo "$row"
done
target="${url%/*}/awl_partitions_bench_8"
echo
echo "Archiving with 8 run partitions (each $((RUNS / 8)) runs):"
echo
echo "| how | time | WAL |"
echo "|---|---:|---:|"
archive_costs
for layout in "${layouts[@]}"; do
  psql "$url" -qAt -c "DROP DATABASE awl_partitions_bench_$layout"
done
