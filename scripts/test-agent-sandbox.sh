#!/usr/bin/env bash
# `airlock serve --agent-sandbox` with the real agent-sandbox client (k8s-agent-sandbox from PyPI,
# pinned), in its direct mode (a URL, no cluster): commands, uploads, downloads, listings and
# existence checks through the in-pod runtime's contract, each a run in the pod's session.
# scripts/agent_sandbox_client.py says what is checked: the command runs confined (the sandbox's
# user and name, no file beyond the workspace, the profile's hidden file hidden, no network), the
# time limit, uploads in the session's diff and not in the workspace until applied, the audit
# log, the kill switch refusing with its reason, and a new session once a person applied one.
# As root, and with the server as an ordinary user (uid 4242, setpriv).
#
#   scripts/test-agent-sandbox.sh     # ~1 minute; the client is cached in ${AIRLOCK_CI_CACHE:-~/.cache/airlock-ci}
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${AIRLOCK_CI_CACHE:-$HOME/.cache/airlock-ci}
python=${PYTHON:-python3}
pin="k8s-agent-sandbox[grpc]==1.0.8"
uid=4242

# shellcheck source=scripts/lib/clients.sh
. scripts/lib/clients.sh
venv="$cache/agent-sandbox-client"
pinned_venv "$venv" k8s_agent_sandbox "$pin"
airlock_binary

work=$(mktemp -d /tmp/airlock-agent-sandbox-XXXXXX)
chmod 755 "$work"
outside=
trap 'stop_server; [ -n "$outside" ] && kill "$outside" 2>/dev/null; rm -rf "$work"' EXIT

free_port() {
  "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# A port on loopback that answers outside the sandbox (the network check's target).
outside_port=$(free_port)
"$python" -m http.server --bind 127.0.0.1 "$outside_port" --directory "$work" >/dev/null 2>&1 &
outside=$!

pass() {
  local who=$1 dir port log as=()
  dir=$(mktemp -d "$work/pass-XXXXXX")
  chmod 755 "$dir"
  mkdir -p "$dir/workspace" "$dir/home/.config/airlock/profiles" "$dir/state"
  echo readme >"$dir/workspace/readme.txt"
  echo "TOKEN=not-for-the-agent" >"$dir/workspace/.env"
  echo outside >"$dir/outside-secret.txt"
  # The profile the pod runs with: the defaults, the workspace's .env hidden, 64 KiB of output,
  # GREETING passed to commands.
  printf '[filesystem]\nhide = ["%s"]\n[limits]\noutput = "64KiB"\n[env]\nallow = ["GREETING"]\n' "$dir/workspace/.env" \
    >"$dir/home/.config/airlock/profiles/pod.toml"
  if [ "$who" != root ]; then
    chown -R "$uid:$uid" "$dir"
    as=(setpriv --reuid "$uid" --regid "$uid" --clear-groups --)
  fi
  local airlock_argv=(env HOME="$dir/home" "${as[@]}" "$airlock" --state-dir "$dir/state")
  # A session of another profile is not the runtime's to take (its runs would take that profile).
  local other
  other=$("${airlock_argv[@]}" session new --workspace "$dir/workspace" --name other-profile 2>&1 | tail -1)
  if "${airlock_argv[@]}" serve --listen "127.0.0.1:$(free_port)" --agent-sandbox \
    --workspace "$dir/workspace" --profile pod --session other-profile >"$dir/refused.log" 2>&1; then
    echo "FAILED: a session of another profile was taken ($other)" >&2
    exit 1
  fi
  grep -q -- "--session other-profile" "$dir/refused.log" || { cat "$dir/refused.log" >&2; exit 1; }
  echo "ok: a session of another profile is refused at start"
  "${airlock_argv[@]}" discard other-profile >/dev/null 2>&1
  local rest grpc
  port=$(free_port) rest=$(free_port) grpc=$(free_port)
  log="$dir/serve.log"
  "${airlock_argv[@]}" serve --listen "127.0.0.1:$port" --agent-sandbox \
    --workspace "$dir/workspace" --profile pod \
    --sandboxd-rest "127.0.0.1:$rest" --sandboxd-grpc "127.0.0.1:$grpc" >"$log" 2>&1 &
  server=$!
  for _ in $(seq 100); do
    grep -q "serving on" "$log" && break
    sleep 0.1
  done
  grep -q "serving on" "$log" || { cat "$log" >&2; echo "airlock serve did not start" >&2; exit 1; }
  echo "== agent-sandbox client ($pin), server as $who"
  "$venv/bin/python" scripts/agent_sandbox_client.py "http://127.0.0.1:$port" \
    "$dir/workspace" "$outside_port" "$("$python" -c 'import json,sys; print(json.dumps(sys.argv[1:]))' "${airlock_argv[@]}")" \
    "$rest" "$grpc"
  stop_server
}

pass root
if [ "$(id -u)" = 0 ]; then
  pass "uid $uid"
elif [ "${AIRLOCK_TEST_REQUIRE_ROOT:-}" = 1 ]; then
  echo "test-agent-sandbox: AIRLOCK_TEST_REQUIRE_ROOT=1 but not root" >&2
  exit 1
fi
echo "test-agent-sandbox: all passed"
