#!/usr/bin/env bash
# The audit log over years: append, 'log --session', 'log --since' and 'log verify' on logs of
# 10,000, 1,000,000 and 10,000,000 records, in segments (this version) and as the single file
# every version before segments kept (the named peer: the same records, concatenated into one
# audit.log, read by the same binary, whose loop over one file is the previous version's).
#
# The logs are a busy server's history (crates/airlock-audit/examples/audit_bench.rs, `history`):
# a record a second from 2026-01-01, 32 sessions live at a time, each ~2,000 records long; the
# segmented one is rolled by day (and 64 MiB) and each segment sealed by the library itself. They
# are written with fsync off (generation only: appends are measured both ways), in a directory
# under $TMPDIR, and removed after each size. Lookups and verify are timed warm (the log in the
# page cache), as the median of 3 runs.
#
# Usage: bench/audit-log.sh        Environment: BENCH_SIZES (default "10000 1000000 10000000")
# Needs about 360 bytes of free disk per record of the largest size, beyond 8 GiB.
set -euo pipefail
sizes=${BENCH_SIZES:-"10000 1000000 10000000"}
cd "$(dirname "$(realpath "$0")")/.."
target=${CARGO_TARGET_DIR:-$PWD/target}
if [ -z "${AIRLOCK_BIN:-}" ]; then
  scripts/build.sh >/dev/null
fi
if [ ! -x "$target/release/examples/audit_bench" ] || [ -z "${AIRLOCK_BIN:-}" ]; then
  cargo build --release --quiet -p airlock-audit --example audit_bench
fi
airlock=${AIRLOCK_BIN:-$target/release/airlock}
bench="$target/release/examples/audit_bench"

work=$(mktemp -d "${TMPDIR:-/tmp}/airlock-audit-log-bench.XXXXXX")
trap 'chmod -R u+rwx "$work" 2>/dev/null; rm -rf "$work"' EXIT

# The median of 3 runs of a command, in seconds.
median() {
  local times=()
  for _ in 1 2 3; do
    local start end
    start=$(date +%s%N)
    "$@" >/dev/null
    end=$(date +%s%N)
    times+=($(( end - start )))
  done
  printf '%s\n' "${times[@]}" | sort -n | sed -n 2p | awk '{printf "%.3f", $1 / 1e9}'
}

# Appends per record, in µs: without fsync (2,000) and with (300), after one append that does
# what the first append of the day does (roll the open segment). $2: the log's environment.
appends() {
  local dir=$1; shift
  env "$@" "$bench" append "$dir" 1 nofsync >/dev/null
  local nofsync fsync
  nofsync=$(env "$@" "$bench" append "$dir" 2000 nofsync)
  fsync=$(env "$@" "$bench" append "$dir" 300 fsync)
  echo "$nofsync $fsync"
}

echo "# audit log over time: segments against one file"
echo
echo "- machine: $(nproc) CPUs, $(free -g | awk '/Mem:/ {print $2}') GiB RAM, kernel $(uname -r); disk: $(df --output=source "$work" | tail -1) ($(df --output=fstype "$work" | tail -1))"
echo "- airlock: $("$airlock" --version 2>/dev/null || echo "$airlock")"
echo
notes=()
echo "| records | format | size | sealed segments | append µs (no fsync / fsync) | log --session S | log --since 1h | log verify |"
echo "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
for n in $sizes; do
  need=$(( n * 360 / 1024 / 1024 + 8192 ))
  free=$(df --output=avail -m "$work" | tail -1)
  if [ "$free" -lt "$need" ]; then
    echo "| $n | skipped: $free MiB free, $need MiB wanted | | | | | | |"
    continue
  fi
  state="$work/state-$n"
  needle=$("$bench" history "$state" "$n" segments 2>"$work/generate.txt")
  sealing=$(grep -o 'sealed .*' "$work/generate.txt" || echo "no segment sealed")
  # From an hour before the last record.
  since=$(date -u -d "@$(( 1767225600 + n - 3600 ))" +%Y-%m-%dT%H:%M:%SZ)
  for format in segments single; do
    if [ "$format" = single ]; then
      # The same records, as one file, oldest first (segment by segment, to need no more disk).
      mv "$state/audit.log" "$work/open.log"
      for segment in "$state"/audit/*.log; do
        [ -e "$segment" ] || continue
        cat "$segment" >>"$state/audit.log"
        rm -f "$segment"
      done
      cat "$work/open.log" >>"$state/audit.log"
      rm -rf "$state/audit" "$work/open.log"
      # The previous version never rolled.
      envs=(AIRLOCK_AUDIT_SEGMENT_SIZE=1048576G AIRLOCK_AUDIT_SEGMENT_DAILY=0)
    else
      envs=(AIRLOCK_AUDIT_SEGMENT_DAILY=1)
    fi
    size=$(du -sh --apparent-size "$state" | cut -f1)
    segments=$(find "$state" -path '*/audit/*.log' | wc -l)
    session=$(median "$airlock" --state-dir "$state" log --session "$needle" --json)
    recent=$(median "$airlock" --state-dir "$state" log --since "$since" --json)
    verify=$(median "$airlock" --state-dir "$state" log verify)
    "$airlock" --state-dir "$state" log verify >/dev/null
    read -r nofsync fsync < <(appends "$state" "${envs[@]}")
    echo "| $n | $format | $size | $segments | $nofsync / $fsync | $session s | $recent s | $verify s |"
  done
  notes+=("- $n records: $sealing; the session looked up, $needle, has $("$airlock" --state-dir "$state" log --session "$needle" --json | wc -l) records")
  rm -rf "$state"
done
echo
printf '%s\n' "${notes[@]}"
echo
echo "Lookups and verify: median of 3 warm runs, in seconds. Appends: mean µs per record, in-process (the library's append, as a run's intent and result take it)."
