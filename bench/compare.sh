#!/usr/bin/env bash
# Compare airlock builds with each other and with bubblewrap, run by run: how this stop's launch
# changes were measured before they landed (bench/startup.sh measures one build).
#
# Usage: bench/compare.sh ROUNDS AIRLOCK_BINARY...
#   e.g. cp target/release/airlock /tmp/before; (change, build); bench/compare.sh 10 /tmp/before target/release/airlock
# Each round times bwrap and every binary for 20 runs each (hyperfine -N), so all of them see the
# same stretches of this VM's drifting speed. Prints each median and its ratio to bwrap's.
# Runs as the calling user; as an unprivileged uid, run the whole script under setpriv, with the
# binaries, a workspace (COMPARE_WS) and a scratch dir (COMPARE_DIR) that uid can reach.
set -euo pipefail
rounds=${1:?usage: bench/compare.sh ROUNDS AIRLOCK_BINARY...}
shift
[ $# -gt 0 ] || { echo "usage: bench/compare.sh ROUNDS AIRLOCK_BINARY..." >&2; exit 2; }
for tool in bwrap hyperfine python3; do
  command -v "$tool" >/dev/null || { echo "missing: $tool (bench/startup.sh installs them)" >&2; exit 1; }
done
if [ -n "${COMPARE_DIR:-}" ]; then
  dir=$COMPARE_DIR
else
  dir=$(mktemp -d "${TMPDIR:-/tmp}/airlock-compare.XXXXXX")
  trap 'chmod -R u+rwx "$dir" 2>/dev/null || true; rm -rf "$dir"' EXIT
fi
ws=${COMPARE_WS:-$dir/workspace}
mkdir -p "$dir" "$ws"
bwrap_cmd="bwrap --ro-bind /usr /usr --symlink usr/lib /lib --symlink usr/lib64 /lib64 --symlink usr/bin /bin --proc /proc --dev /dev --tmpfs /tmp --unshare-all --die-with-parent /bin/true"
args=(-n bwrap "$bwrap_cmd")
i=0
for bin in "$@"; do
  i=$((i + 1))
  mkdir -p "$dir/state-$i"
  args+=(-n "$i: $bin" "$(realpath "$bin") --state-dir $dir/state-$i run --workspace $ws -- /bin/true")
done
for round in $(seq "$rounds"); do
  hyperfine -N --style none --warmup 3 --runs 20 --export-json "$dir/round-$round.json" "${args[@]}" >/dev/null
done
python3 - "$dir"/round-*.json <<'PY'
import json, statistics, sys
times = {}
for path in sys.argv[1:]:
    for r in json.load(open(path))["results"]:
        times.setdefault(r["command"], []).extend(r["times"])
bwrap = statistics.median(times["bwrap"])
for name, t in times.items():
    m = statistics.median(t)
    print(f"{m * 1000:7.3f} ms  {m / bwrap:5.3f}  {name}")
PY
