#!/usr/bin/env bash
# Audit-log benchmark:
#   1. what a /bin/true run costs with the log fsync'd or not, on disk and on tmpfs (/dev/shm);
#   2. appends per second with 8 concurrent writers (fsync'd or not, disk and tmpfs);
#   3. reading a 1,000,000-record log with a filter, and verifying its chain;
#   4. airlock kill --all with 50 running sandboxes.
# Usage: bench/audit.sh     Environment: BENCH_RUNS (default 100), BENCH_RECORDS (default 1000000)
set -euo pipefail
runs=${BENCH_RUNS:-100}
records=${BENCH_RECORDS:-1000000}

if ! command -v hyperfine >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq hyperfine >/dev/null
  else
    echo "missing: hyperfine; install with: sudo apt-get install hyperfine" >&2; exit 1
  fi
fi
cd "$(dirname "$(realpath "$0")")/.."
scripts/build.sh
cargo build --release --quiet -p airlock-audit --example audit_bench
airlock="$PWD/target/release/airlock"
bench="$PWD/target/release/examples/audit_bench"

disk=$(mktemp -d "${TMPDIR:-/tmp}/airlock-audit-bench.XXXXXX")
shm=$(mktemp -d /dev/shm/airlock-audit-bench.XXXXXX)
chmod 755 "$disk" "$shm"
trap 'chmod -R u+rwx "$disk" "$shm" 2>/dev/null; rm -rf "$disk" "$shm"' EXIT
mkdir "$disk/ws"
chmod 755 "$disk/ws"

echo "# airlock audit-log benchmark"
echo
echo "- machine: $(nproc) CPUs, kernel $(uname -r), uid $(id -u); disk: $(df --output=source "$disk" | tail -1), tmpfs: /dev/shm"
echo
json="$disk/runs.json"
hyperfine -N --style basic --time-unit millisecond --warmup 10 --runs "$runs" --export-json "$json" \
  -n "disk, fsync" "env AIRLOCK_AUDIT_FSYNC=1 $airlock --state-dir $disk/state run -w $disk/ws -- /bin/true" \
  -n "disk, no fsync" "env AIRLOCK_AUDIT_FSYNC=0 $airlock --state-dir $disk/state run -w $disk/ws -- /bin/true" \
  -n "tmpfs, fsync" "env AIRLOCK_AUDIT_FSYNC=1 $airlock --state-dir $shm/state run -w $disk/ws -- /bin/true" \
  -n "tmpfs, no fsync" "env AIRLOCK_AUDIT_FSYNC=0 $airlock --state-dir $shm/state run -w $disk/ws -- /bin/true" \
  >/dev/null
echo "## /bin/true run (two records: intent and result)"
echo
python3 - "$json" <<'PY'
import json, sys
res = {r["command"]: r["median"] * 1000 for r in json.load(open(sys.argv[1]))["results"]}
print("| state dir, log | median ms |")
print("| --- | ---: |")
for name, ms in res.items():
    print(f"| {name} | {ms:.2f} |")
print()
print(f"- fsync's cost per run on disk: {res['disk, fsync'] - res['disk, no fsync']:.2f} ms; on tmpfs: {res['tmpfs, fsync'] - res['tmpfs, no fsync']:.2f} ms")
PY
echo
echo "## appends per second, 8 concurrent writers (2,000 records)"
echo
echo "| log on | fsync | appends/s |"
echo "| --- | --- | ---: |"
for where in "$disk" "$shm"; do
  for sync in fsync nofsync; do
    rm -rf "$where/appends"
    rate=$("$bench" appends "$where/appends" 8 250 "$sync")
    echo "| $([ "$where" = "$shm" ] && echo tmpfs || echo disk) | $sync | $rate |"
  done
done
echo
echo "## reading a log of $records records"
echo
"$bench" generate "$disk/big" "$records"
size=$(du -h "$disk/big/audit.log" | cut -f1)
read_json="$disk/read.json"
hyperfine -N --style basic --time-unit millisecond --runs 3 --export-json "$read_json" \
  -n "log --session (100 matches)" "$airlock --state-dir $disk/big log --session needle --json" \
  -n "log --action run.result --since 1h (no match)" "$airlock --state-dir $disk/big log --action run.result --since 1h" \
  -n "log verify" "$airlock --state-dir $disk/big log verify" >/dev/null
python3 - "$read_json" "$size" <<'PY'
import json, sys
print(f"log file: {sys.argv[2]}")
print()
print("| command | median s |")
print("| --- | ---: |")
for r in json.load(open(sys.argv[1]))["results"]:
    print(f"| {r['command']} | {r['median']:.2f} |")
PY

echo
echo "## kill switch: airlock kill --all with 50 running sandboxes"
echo
mkdir -p "$disk/ks"
echo "| round | sandboxes killed | kill --all ms |"
echo "| --- | ---: | ---: |"
for round in 1 2 3; do
  pids=()
  for i in $(seq 50); do
    "$airlock" --state-dir "$disk/ks/state" run -w "$disk/ws" -- sleep 1000 >/dev/null 2>&1 &
    pids+=($!)
  done
  for _ in $(seq 200); do
    n=$("$airlock" --state-dir "$disk/ks/state" status --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["running"]))')
    [ "$n" -ge 50 ] && break
    sleep 0.1
  done
  start=$(date +%s%N)
  killed=$("$airlock" --state-dir "$disk/ks/state" kill --all --reason bench | grep -c '^killed')
  end=$(date +%s%N)
  wait "${pids[@]}" 2>/dev/null || true
  echo "| $round | $killed | $(( (end - start) / 1000000 )) |"
done
