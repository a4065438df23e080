#!/usr/bin/env bash
# HTTP API benchmark: runs of /bin/true through `airlock serve` next to the same runs through the
# CLI, in one run of this script (same machine state, so the figures compare).
#
#   API     `POST /v1/runs` {"argv":["/bin/true"]} with an agent token, to `airlock serve --listen
#           127.0.0.1:PORT`, from 1, 8 and 32 concurrent clients (keep-alive connections, each a
#           closed loop: the next request once the answer is in): runs/s, p50 and p99 latency
#   health  `GET /v1/health` from 1 client: what the HTTP exchange alone costs
#   CLI     `airlock run -w WS -- /bin/true`, one after another and 8 processes at a time
#   pairs   one API run, then one CLI run, in turn: the two p50s compared where the machine was
#           alike for both (blocks of each, even interleaved, drift apart by a millisecond here)
#   plain   /bin/true started by the same client: what starting a process costs the client itself
#
# Targets: API p50 within +0.5 ms of the CLI's (pairs); with warm sandboxes (serve's default), API
# p50 at most half the CLI's (paced: issue 31); API runs/s at 8 clients >= 200 on 2 CPUs (issue 31
# asks 400). `BINARY@--warm=0` times a server without warm sandboxes beside one with them.
# The load generator is bench/api_load.py (asyncio on raw HTTP/1.1 sockets; posix_spawn for the
# CLI); its own CPU use is shown beside each figure, so that a client that became the bottleneck
# would show. The server's CPU per run is read from /proc: its own, and its workers' (with their
# sandboxes), as the CLI's is (the client's reaped children).
#
# The server's per-token quotas (--requests-per-second 100, --runs-per-token 8 by default) would
# refuse this load with 429s: it is started with both raised out of the way.
# The audit log is fsync'd, as in every other benchmark here but bench/audit.sh (airlock's default,
# set as AIRLOCK_AUDIT_FSYNC=1 for server and CLI alike; BENCH_AUDIT_FSYNC=0 turns it off).
#
# Usage: bench/api.sh [AIRLOCK_BINARY...]
#   With no binary, builds target/release/airlock (scripts/build.sh) and measures it. With several
#   (e.g. a copy of the binary before a change, and after it), each gets a server and a state
#   directory of its own, and every configuration is timed for each in turn, round after round.
#   BINARY@ARGS gives its server more arguments (comma-separated), e.g. to time the same binary
#   with and without warm sandboxes: bench/api.sh target/release/airlock@--warm=0 target/release/airlock
# Runs as the calling user (as root, airlock runs the command as its dedicated sandbox uid).
# Environment:
#   BENCH_ROUNDS=N     rounds, each timing every configuration once (default 10): this machine's
#                      speed drifts over seconds, and rounds spread the drift over all of them
#   BENCH_REQUESTS=N   runs per configuration per round (default 100)
#   BENCH_AUDIT_FSYNC  0 or 1 (default 1)
#   BENCH_CONFIGS      which to time (default "pairs paced api-1 api-8 api-32 cli-1 cli-8 health-1";
#                      pairs: one API run then one CLI run, in turn, 1 client; paced: the same
#                      with BENCH_PACE_MS (20) before each run, as an agent's commands come)
set -euo pipefail
rounds=${BENCH_ROUNDS:-10}
requests=${BENCH_REQUESTS:-100}
python=/usr/bin/python3
cd "$(dirname "$(realpath "$0")")/.."
load="$PWD/bench/api_load.py"
binaries=()
serve_args=()
if [ $# -eq 0 ]; then
  scripts/build.sh
  binaries=("$PWD/target/release/airlock")
  serve_args=("")
else
  for arg in "$@"; do
    bin=${arg%%@*}
    extra=""
    [ "$bin" != "$arg" ] && extra=${arg#*@}
    binaries+=("$(realpath "$bin")")
    serve_args+=("$extra")
  done
fi
export AIRLOCK_AUDIT_FSYNC=${BENCH_AUDIT_FSYNC:-1}
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

# 0755: the sandbox uid airlock uses as root must reach the workspace.
scratch=$(mktemp -d "${TMPDIR:-/tmp}/airlock-api-bench.XXXXXX")
chmod 755 "$scratch"
servers=()
cleanup() {
  for pid in "${servers[@]}"; do kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; done
  chmod -R u+rwx "$scratch" 2>/dev/null || true
  rm -rf "$scratch"
}
trap cleanup EXIT
ws="$scratch/workspace"
mkdir "$ws"
chmod 755 "$ws"
cd "$scratch"

# One server per binary: state-I, its token and port in server-I.
for i in "${!binaries[@]}"; do
  bin=${binaries[$i]}
  state="$scratch/state-$i"
  if ! token=$("$bin" --state-dir "$state" token create --role agent --workspace "$ws" --name bench 2>"$scratch/token.log" | tail -1); then
    cat "$scratch/token.log" >&2
    exit 1
  fi
  port=$($python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  IFS=, read -r -a extra <<<"${serve_args[$i]}"
  "$bin" --state-dir "$state" serve --listen "127.0.0.1:$port" \
    --requests-per-second 1000000 --runs-per-token 1000 "${extra[@]}" 2>"$scratch/serve-$i.log" &
  servers+=($!)
  echo "$port $token $!" >"$scratch/server-$i"
  for _ in $(seq 100); do
    $python -c "import socket; socket.create_connection(('127.0.0.1', $port)).close()" 2>/dev/null && break
    kill -0 "${servers[-1]}" 2>/dev/null || { cat "$scratch/serve-$i.log" >&2; exit 1; }
    sleep 0.05
  done
done

# measure I KIND N RUNS: one configuration of binary I, its JSON line on stdout.
measure() {
  local i=$1 kind=$2 n=$3 runs=$4 port token pid
  read -r port token pid <"$scratch/server-$i"
  case $kind in
    api) SERVER_PID=$pid $python "$load" api 127.0.0.1 "$port" "$token" "$n" "$runs" ;;
    health) SERVER_PID=$pid $python "$load" health 127.0.0.1 "$port" "$n" "$runs" ;;
    cli) $python "$load" cli "$n" "$runs" "${binaries[$i]}" "$scratch/state-$i" "$ws" ;;
    pairs) $python "$load" pairs 127.0.0.1 "$port" "$token" "${binaries[$i]}" "$scratch/state-$i" "$ws" "$runs" ;;
    paced) $python "$load" pairs 127.0.0.1 "$port" "$token" "${binaries[$i]}" "$scratch/state-$i" "$ws" "$runs" "${BENCH_PACE_MS:-20}" ;;
    plain) $python "$load" plain "$n" "$runs" ;;
  esac
}

# Warm up (page cache, the servers' first connections, the state directories' files), and fail
# here, with the answer, if a run does not succeed.
for i in "${!binaries[@]}"; do
  measure "$i" api 1 20 >>"$scratch/warm.json"
  measure "$i" cli 1 20 >>"$scratch/warm.json"
done
$python - "$scratch/warm.json" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["failed"]:
        sys.exit(f"runs failed during the warm-up: {r['failures']}")
EOF

read -r -a configs <<<"${BENCH_CONFIGS:-pairs paced api-1 api-8 api-32 cli-1 cli-8 health-1}"
for round in $(seq "$rounds"); do
  for config in "${configs[@]}"; do
    kind=${config%-*} n=${config#*-}
    if [ "$kind" = pairs ] || [ "$kind" = paced ]; then n=1; fi
    for i in "${!binaries[@]}"; do
      measure "$i" "$kind" "$n" "$requests" >"$scratch/$i-$kind-$n.$round.json"
    done
  done
  measure 0 plain 1 "$requests" >"$scratch/0-plain-1.$round.json"
done

echo "# airlock HTTP API benchmark"
echo
echo "- machine: $(nproc) CPUs ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)), kernel $(uname -r); load average before: $load_before, after: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "$(id -u)" = 0 ]; then
  echo "- running as: root (airlock runs the command as its dedicated sandbox uid); nice $(nice)"
else
  echo "- running as: uid $(id -u), unprivileged; nice $(nice)"
fi
echo "- state directories on $(df --output=fstype "$scratch" | tail -1); AIRLOCK_AUDIT_FSYNC=$AIRLOCK_AUDIT_FSYNC (servers and CLI)"
echo "- servers: \`airlock serve --listen 127.0.0.1:PORT --requests-per-second 1000000 --runs-per-token 1000\`"
echo "- $rounds rounds of $requests runs per configuration, interleaved"
for i in "${!binaries[@]}"; do echo "- binary $((i + 1)): ${binaries[$i]} ${serve_args[$i]//,/ }"; done
echo
$python "$load" report "$scratch" "$rounds" "${#binaries[@]}"
