#!/usr/bin/env bash
# agent-sandbox's client against airlock's runtimes and against the peer's own runtime, in one run:
# what a command, a small write and its read cost through `airlock serve --agent-sandbox` (the
# legacy runtime, and sandboxd's gRPC and REST) beside the same requests to agent-sandbox's
# Python runtime (examples/python-runtime-sandbox/main.py of kubernetes-sigs/agent-sandbox, run
# by uvicorn as its image runs it: no sandbox at all, so the ratio is what airlock's layers cost
# each request). bench/agent_sandbox.py makes the requests and prints the medians and ratios.
#
# Usage: bench/agent-sandbox.sh ROUNDS PEER_MAIN_PY [AIRLOCK_BINARY]
#   PEER_MAIN_PY: that file, from a checkout of kubernetes-sigs/agent-sandbox (it is not on a
#   package registry, so this script cannot fetch it). With no binary, builds and measures
#   target/release/airlock. As the calling user; root's runs are the rootful way.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:?usage: bench/agent-sandbox.sh ROUNDS PEER_MAIN_PY [AIRLOCK_BINARY]}
peer=${2:?usage: bench/agent-sandbox.sh ROUNDS PEER_MAIN_PY [AIRLOCK_BINARY]}
if [ -n "${3:-}" ]; then
  airlock=$(realpath "$3")
else
  scripts/build.sh
  airlock=$PWD/target/release/airlock
fi
cache=${AIRLOCK_CI_CACHE:-$HOME/.cache/airlock-ci}
pins="k8s-agent-sandbox[grpc]==1.0.8 fastapi==0.165.0 uvicorn==0.55.0 python-multipart==0.0.34"
venv="$cache/agent-sandbox-bench"
if [ "$(cat "$venv/.airlock-pins" 2>/dev/null)" != "$pins" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  # shellcheck disable=SC2086
  "$venv/bin/pip" install --quiet --disable-pip-version-check $pins
  echo "$pins" >"$venv/.airlock-pins"
fi
dir=$(mktemp -d /tmp/airlock-bench-pod-XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"' EXIT
mkdir -p "$dir/workspace" "$dir/peer" "$dir/state"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
legacy=$(free_port) rest=$(free_port) grpc=$(free_port) peer_port=$(free_port)
AIRLOCK_AUDIT_FSYNC=1 "$airlock" --state-dir "$dir/state" serve --listen "127.0.0.1:$legacy" \
  --requests-per-second 10000 --agent-sandbox --workspace "$dir/workspace" \
  --sandboxd-rest "127.0.0.1:$rest" --sandboxd-grpc "127.0.0.1:$grpc" >"$dir/airlock.log" 2>&1 &
pids+=($!)
cp "$peer" "$dir/peer/main.py"
(cd "$dir/peer" && SANDBOX_BASE_DIR="$dir/peer" exec "$venv/bin/uvicorn" main:app --host 127.0.0.1 \
  --port "$peer_port" --log-level warning) >"$dir/peer.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  grep -q "serving on" "$dir/airlock.log" && curl -s "http://127.0.0.1:$peer_port/" >/dev/null && break
  sleep 0.1
done
echo "load: $(cut -d' ' -f1-3 /proc/loadavg); airlock: $airlock"
"$venv/bin/python" bench/agent_sandbox.py "$rounds" \
  "peer=http://127.0.0.1:$peer_port" "airlock=http://127.0.0.1:$legacy,$rest,$grpc"
