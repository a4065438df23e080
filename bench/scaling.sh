#!/usr/bin/env bash
# How the start of one run grows with what is around it: `airlock run -- /bin/true` with 100 and
# 1,000 sessions in the state directory, a 100-entry allowlist (against a 1-entry one: both start
# the gate), 10 binds, and 50 runs going on at the same time. Each against its baseline, in the
# same rounds (hyperfine -N, interleaved, as bench/compare.sh), so they see the same stretches of
# the machine's drifting speed; the 50 concurrent runs are measured between two baseline phases.
# The goal (issue 31): none grows the start of one run by more than 10%.
#
# Usage: bench/scaling.sh ROUNDS [AIRLOCK_BINARY]   (default target/release/airlock)
# Runs as the calling user; needs hyperfine and python3.
set -euo pipefail
rounds=${1:?usage: bench/scaling.sh ROUNDS [AIRLOCK_BINARY]}
airlock=$(realpath "${2:-target/release/airlock}")
for tool in hyperfine python3; do
  command -v "$tool" >/dev/null || { echo "missing: $tool (Debian: apt-get install $tool)" >&2; exit 1; }
done
dir=$(mktemp -d "${TMPDIR:-/tmp}/airlock-scaling.XXXXXX")
chmod 755 "$dir"
background=()
cleanup() {
  [ ${#background[@]} -eq 0 ] || kill "${background[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  chmod -R u+rwx "$dir" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
ws=$dir/workspace
mkdir -p "$ws"
run() { echo "$airlock --state-dir $dir/$1 run --workspace $ws ${2:-} -- /bin/true"; }

# The state directories and profiles.
for sessions in 100 1000; do
  for _ in $(seq "$sessions"); do
    "$airlock" --state-dir "$dir/sessions-$sessions" session new -w "$ws" >/dev/null
  done
done
hosts() { python3 -c "import sys; print(', '.join(f'\"h{i}.example.com\"' for i in range(int(sys.argv[1]))))" "$1"; }
printf '[network]\nallow = [%s]\n' "$(hosts 1)" >"$dir/allow-1.toml"
printf '[network]\nallow = [%s]\n' "$(hosts 100)" >"$dir/allow-100.toml"
binds=()
for i in $(seq 0 9); do
  mkdir -p "$dir/bind-$i"
  binds+=("\"$dir/bind-$i\"")
done
printf '[filesystem]\nread_only = [%s]\n' "$(IFS=,; echo "${binds[*]}")" >"$dir/binds-10.toml"

rounds_of() {
  local phase=$1
  shift
  for round in $(seq "$rounds"); do
    hyperfine -N --style none --warmup 3 --runs 20 --export-json "$dir/$phase-$round.json" "$@" >/dev/null
  done
}
rounds_of one \
  -n base "$(run base)" \
  -n sessions-100 "$(run sessions-100)" \
  -n sessions-1000 "$(run sessions-1000)" \
  -n allow-1 "$(run allow-1 "--profile-file $dir/allow-1.toml")" \
  -n allow-100 "$(run allow-100 "--profile-file $dir/allow-100.toml")" \
  -n binds-0 "$(run binds-0)" \
  -n binds-10 "$(run binds-10 "--profile-file $dir/binds-10.toml")"

# 50 runs going on (each a sleep in its own sandbox, in the same state directory), then the
# baseline alone again.
for _ in $(seq 50); do
  "$airlock" --state-dir "$dir/concurrent" run --workspace "$ws" -- sleep 3600 >/dev/null 2>&1 &
  background+=($!)
done
for _ in $(seq 100); do
  [ "$(pgrep -c -x -f 'sleep 3600' || true)" -ge 50 ] && break
  sleep 0.2
done
echo "runs going on: $(pgrep -c -x -f 'sleep 3600' || true)" >&2
rounds_of two -n concurrent-50 "$(run concurrent)"
kill "${background[@]}" 2>/dev/null || true
wait 2>/dev/null || true
background=()
rounds_of three -n concurrent-0 "$(run concurrent)"

python3 - "$dir" <<'PY'
import glob, json, statistics, sys
times = {}
for path in glob.glob(sys.argv[1] + "/*.json"):
    for r in json.load(open(path))["results"]:
        times.setdefault(r["command"], []).extend(r["times"])
median = {name: statistics.median(t) for name, t in times.items()}
pairs = [("sessions-100", "base"), ("sessions-1000", "base"), ("allow-100", "allow-1"),
         ("binds-10", "binds-0"), ("concurrent-50", "concurrent-0")]
for name, base in pairs:
    ratio = median[name] / median[base]
    print(f"{name:14} {median[name] * 1000:7.3f} ms  vs {base:12} {median[base] * 1000:7.3f} ms  "
          f"{ratio:5.3f}  {'ok' if ratio <= 1.10 else 'OVER 10%'}")
PY
