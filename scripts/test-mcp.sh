#!/usr/bin/env bash
# `airlock mcp` with the official MCP Python SDK (the `mcp` package from PyPI) as its client, on
# stdio and over Streamable HTTP (/mcp on `airlock serve`, with an agent token): mcp 1.30.0 (the 2025-11-25 revision, with initialize, which clients still default to) and
# mcp 2.3.0 (the stateless 2026-07-28 revision); each as root and with the server as an ordinary
# user (uid 4242, setpriv). scripts/mcp_client.py says what is checked: the tools (no apply among
# them), a run that writes a file (the host workspace untouched, the file in `changes`), output as
# progress notifications, start/poll, refusals (the kill switch), the audit log, and a client that
# goes away while its run goes on (the run ends, recorded as abandoned).
#
#   scripts/test-mcp.sh          # ~1 minute; the SDKs are cached in ${AIRLOCK_CI_CACHE:-~/.cache/airlock-ci}
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${AIRLOCK_CI_CACHE:-$HOME/.cache/airlock-ci}
python=${PYTHON:-python3}
versions=(1.30.0 2.3.0)
uid=4242

# One venv per pinned SDK, made again when its pin changes (or it no longer runs).
venv_of() {
  pinned_venv "$cache/mcp-python-$1" mcp "mcp==$1" >&2
  echo "$cache/mcp-python-$1"
}

# shellcheck source=scripts/lib/clients.sh
. scripts/lib/clients.sh
airlock_binary

work=$(mktemp -d /tmp/airlock-mcp-XXXXXX)
chmod 755 "$work"

trap 'stop_server; rm -rf "$work"' EXIT

# airlock as the pass's user: the command line, in as_user_argv (env and setpriv exec airlock, so a
# process started from it is airlock itself, which stop_server signals).
as_user_argv() {
  as_user_argv=("$airlock" --state-dir "$dir/state" "$@")
  if [ "$who" != root ]; then
    as_user_argv=(env HOME="$dir/home" setpriv --reuid "$uid" --regid "$uid" --clear-groups -- "${as_user_argv[@]}")
  fi
}
as_user() {
  as_user_argv "$@"
  "${as_user_argv[@]}"
}

# airlock serve on a free loopback port, and an agent's and an operator's token: the client's
# arguments for /mcp, in http_args. (Not in a $(…): the server would be that subshell's child,
# unknown to stop_server.)
start_http() {
  local port log="$dir/serve.log"
  port=$("$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  as_user_argv serve --listen "127.0.0.1:$port"
  "${as_user_argv[@]}" >"$log" 2>&1 &
  server=$!
  for _ in $(seq 100); do
    grep -q "serving on" "$log" && break
    sleep 0.1
  done
  grep -q "serving on" "$log" || { cat "$log" >&2; echo "airlock serve did not start" >&2; exit 1; }
  local agent operator
  agent=$(as_user token create --role agent --workspace "$dir/workspace" --name mcp-agent | tail -1)
  operator=$(as_user token create --role operator --name mcp-operator | tail -1)
  http_args=(--url "http://127.0.0.1:$port/mcp" --token "$agent" --operator-token "$operator")
}

# A fresh state directory and workspace for each pass, owned by the user the server runs as.
pass() {
  local venv=$1 transport=$3
  who=$2
  dir=$(mktemp -d "$work/pass-XXXXXX")
  dir=$(mktemp -d "$work/pass-XXXXXX")
  chmod 755 "$dir"
  mkdir -p "$dir/workspace" "$dir/home"
  echo seed >"$dir/workspace/seed.txt"
  local extra=()
  if [ "$who" != root ]; then
    chown -R "$uid:$uid" "$dir/workspace" "$dir/home"
    install -d -o "$uid" -g "$uid" "$dir/state"
    extra=(--uid "$uid" --home "$dir/home")
  fi
  if [ "$transport" = http ]; then
    start_http
    extra+=("${http_args[@]}")
  fi
  echo "== mcp $(basename "$venv" | sed 's/mcp-python-//') over $transport, server as $who"
  "$venv/bin/python" scripts/mcp_client.py --airlock "$airlock" --state "$dir/state" \
    --workspace "$dir/workspace" "${extra[@]}"
  stop_server
}

for version in "${versions[@]}"; do
  venv=$(venv_of "$version")
  for transport in stdio http; do
    pass "$venv" root $transport
    if [ "$(id -u)" = 0 ]; then
      pass "$venv" "uid $uid" $transport
    fi
  done
done
echo "test-mcp: all passed"
