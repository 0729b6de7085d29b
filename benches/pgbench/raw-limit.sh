#!/usr/bin/env bash
# The raw append limit of a Postgres server, for comparison with awl's store:
# rows per second for 1 and 16 clients, 1 and 10 rows per transaction.
# Usage: benches/pgbench/raw-limit.sh [postgres://admin-url] [seconds per run]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
url=${1:-${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}}
secs=${2:-10}
db=awl_raw_limit
psql "$url" -qAt -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
target="${url%/*}/$db"
echo "| clients | rows per transaction | transactions/s | rows/s |"
echo "|---:|---:|---:|---:|"
for clients in 1 16; do
  for batch in 1 10; do
    psql "$target" -q -f "$here/schema.sql"
    tps=$(pgbench -n -c "$clients" -j "$(( clients < 2 ? 1 : 2 ))" -T "$secs" \
            -f "$here/append_$batch.sql" "$target" 2>/dev/null |
          sed -n 's/^tps = \([0-9.]*\).*/\1/p')
    rows=$(awk -v t="$tps" -v b="$batch" 'BEGIN { printf "%.0f", t * b }')
    printf '| %s | %s | %.0f | %s |\n' "$clients" "$batch" "$tps" "$rows"
  done
done
psql "$url" -qAt -c "DROP DATABASE $db"
