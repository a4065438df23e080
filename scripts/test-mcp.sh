#!/usr/bin/env bash
# `airlock mcp` with the official MCP Python SDK (the `mcp` package from PyPI) as its client, on
# stdio: mcp 1.30.0 (the 2025-11-25 revision, with initialize, which clients still default to) and
# mcp 2.3.0 (the stateless 2026-07-28 revision); each as root and with the server as an ordinary
# user (uid 4242, setpriv). scripts/mcp_client.py says what is checked: the tools (no apply among
# them), a run that writes a file (the host workspace untouched, the file in `changes`), output as
# progress notifications, start/poll, refusals (the kill switch), the audit log, and a client that
# goes away while its run goes on (the run ends, recorded as abandoned).
#
#   scripts/test-mcp.sh          # ~1 minute; the SDKs are cached in ${AIRLOCK_CI_CACHE:-~/.cache/airlock-ci}
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
cache=${AIRLOCK_CI_CACHE:-$HOME/.cache/airlock-ci}
python=${PYTHON:-python3}
versions=(1.30.0 2.3.0)
uid=4242

# One venv per pinned SDK, made again when its pin changes (or it no longer runs).
venv_of() {
  local venv="$cache/mcp-python-$1"
  if [ "$(cat "$venv/.airlock-pins" 2>/dev/null)" != "mcp==$1" ] || ! "$venv/bin/python" -c 'import mcp' 2>/dev/null; then
    rm -rf "$venv"
    mkdir -p "$cache"
    "$python" -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "mcp==$1"
    echo "mcp==$1" >"$venv/.airlock-pins"
  fi
  echo "$venv"
}

if [ -n "${AIRLOCK_BIN:-}" ]; then
  airlock=$AIRLOCK_BIN
else
  scripts/build.sh
  airlock="$repo/target/release/airlock"
fi

work=$(mktemp -d /tmp/airlock-mcp-XXXXXX)
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT

# A fresh state directory and workspace for each pass, owned by the user the server runs as.
pass() {
  local venv=$1 who=$2 dir
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
  echo "== mcp $(basename "$venv" | sed 's/mcp-python-//'), server as $who"
  "$venv/bin/python" scripts/mcp_client.py --airlock "$airlock" --state "$dir/state" \
    --workspace "$dir/workspace" "${extra[@]}"
}

for version in "${versions[@]}"; do
  venv=$(venv_of "$version")
  pass "$venv" root
  if [ "$(id -u)" = 0 ]; then
    pass "$venv" "uid $uid"
  fi
done
echo "test-mcp: all passed"
