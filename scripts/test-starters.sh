#!/usr/bin/env bash
# The starter profiles shipped with airlock, with the real tools they are for, against the real
# registries: pip download from PyPI (-p pip), npm view from the npm registry (-p npm), cargo
# fetch from crates.io (-p cargo, copied with the host's toolchain bound read-only: a copy of a
# starter wins over it), apt-get update and download from Debian's mirror (-p apt, in a private
# directory). Under each, curl https://example.org is refused. Then `airlock policy replay`
# over those recorded runs: each starter breaks nothing its run needed, and pip narrowed to
# pypi.org alone would break the download (exit 1, naming files.pythonhosted.org:443).
#
# A missing tool or an unreachable registry fails the test; it is never skipped. The go and
# github starters have no test here: proxy.golang.org and GitHub are not reachable from CI.
#
#   scripts/test-starters.sh       # ~1 minute; AIRLOCK_BIN=path to test another binary
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

if [ -n "${AIRLOCK_BIN:-}" ]; then
  airlock=$AIRLOCK_BIN
else
  scripts/build.sh
  airlock="$repo/target/release/airlock"
fi

work=$(mktemp -d /tmp/airlock-starters-XXXXXX)
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT
# A profile directory of this test's own: no profile of this machine hides a starter.
export XDG_CONFIG_HOME="$work/config"
mkdir -p "$work/state" "$work/workspace" "$XDG_CONFIG_HOME/airlock/profiles"
al() { "$airlock" --state-dir "$work/state" "$@"; }

failed=0
fail() { echo "FAILED: $*" >&2; failed=1; }
need() { command -v "$1" >/dev/null || { echo "FAILED: $1 is not installed; the $2 starter's test needs it ($3)" >&2; exit 1; }; }
need pip3 pip "apt-get install python3-pip"
need npm npm "apt-get install npm, or Node.js from nodejs.org"
need apt-get apt "a Debian or Ubuntu machine"
need curl every "apt-get install curl"
# cargo: the real toolchain (rustup's proxy needs its home, which the sandbox does not see).
toolchain=$(rustup which cargo 2>/dev/null || command -v cargo || true)
[ -n "$toolchain" ] || { echo "FAILED: no cargo; the cargo starter's test needs one (rustup.rs)" >&2; exit 1; }
toolchain=$(dirname "$(dirname "$(readlink -f "$toolchain")")")

# Every starter is listed, and each is a valid profile as a file too.
listed=$(al policy list --json)
for name in apt cargo github go npm pip; do
  echo "$listed" | python3 -c "import json,sys; sys.exit(0 if any(p['name']=='$name' and p['kind']=='starter' and p['used'] for p in json.load(sys.stdin)) else 1)" \
    || fail "policy list does not list the starter $name"
  mkdir -p "$work/check/$name"
  al policy show "$name" --starter >"$work/check/$name/$name.toml"
  al policy check "$work/check/$name/$name.toml" >/dev/null || fail "starter $name does not pass policy check"
done

# run NAME CMD...: CMD under starter NAME in the workspace; its output in $work/NAME.out.
run() {
  local name=$1
  shift
  echo "-- airlock run -p $name -- $*"
  if ! (cd "$work/workspace" && al run -p "$name" -- "$@") >"$work/$name.out" 2>&1; then
    cat "$work/$name.out" >&2
    return 1
  fi
}

# ...and a host no starter names is refused under it.
refuses_others() {
  local name=$1
  if (cd "$work/workspace" && al run -p "$name" -- curl -sS -m 20 -o /dev/null https://example.org) >"$work/$name.refused" 2>&1; then
    fail "-p $name: curl https://example.org went through"
  elif ! grep -q "refused example.org:443" "$work/$name.refused"; then
    cat "$work/$name.refused" >&2
    fail "-p $name: curl https://example.org failed, but not by airlock's refusal"
  fi
}

run pip pip3 download --no-deps --no-cache-dir -d /tmp/dl six && grep -q "Successfully downloaded six" "$work/pip.out" \
  || fail "pip download six under -p pip"
refuses_others pip

run npm npm view is-number version && grep -Eq '^[0-9]+\.[0-9]+\.[0-9]+' "$work/npm.out" \
  || fail "npm view is-number under -p npm"
refuses_others npm

# cargo: a copy of the starter that also binds the toolchain; the copy wins over the starter.
{
  al policy show cargo --starter
  printf '\n# The host toolchain, read-only (added to the copy by scripts/test-starters.sh).\n[filesystem]\nread_only = ["%s"]\n' "$toolchain"
} >"$XDG_CONFIG_HOME/airlock/profiles/cargo.toml"
al policy show cargo | head -1 | grep -q "from $XDG_CONFIG_HOME" || fail "a file named cargo.toml does not win over the starter"
mkdir -p "$work/workspace/src"
printf '[package]\nname = "tiny"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\nitoa = "=1.0.11"\n' >"$work/workspace/Cargo.toml"
echo 'fn main() {}' >"$work/workspace/src/main.rs"
run cargo env PATH="$toolchain/bin:/usr/bin:/bin" cargo fetch && grep -q "Downloaded itoa v1.0.11" "$work/cargo.out" \
  || fail "cargo fetch under -p cargo"
refuses_others cargo
rm "$XDG_CONFIG_HOME/airlock/profiles/cargo.toml"

# apt: update and download in a private directory (a sandbox cannot write the host's).
cat >"$work/workspace/apt.sh" <<'EOF'
set -e
d=$(mktemp -d)
mkdir -p "$d/state/lists/partial" "$d/cache/archives/partial"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main" >"$d/sources.list"
o="-o Dir::State=$d/state -o Dir::Cache=$d/cache -o Dir::Etc::SourceList=$d/sources.list -o Dir::Etc::SourceParts=/dev/null -o Dir::State::status=/var/lib/dpkg/status -o Debug::NoLocking=1 -o APT::Sandbox::User=$(id -un) -o Acquire::Languages=none"
apt-get $o -q update
cd "$d" && apt-get $o download hostname && ls ./*.deb
EOF
# Known to fail while the gate writes the relay's address into the connecting program's own
# sockaddr: apt keeps the address it connected to and reconnects to it ("Connection failed
# [IP: 127.64.0.1 …]"), a relay address that is gone by then.
run apt sh apt.sh && grep -q "hostname_.*\.deb" "$work/apt.out" || fail "apt-get update and download hostname under -p apt"
refuses_others apt

# Replay: each starter breaks nothing its own runs needed...
for name in pip npm apt; do
  if ! al policy replay "$name" >"$work/replay-$name.out" 2>&1; then
    cat "$work/replay-$name.out" >&2
    fail "policy replay $name: the starter would refuse something its runs needed"
  fi
done
# ...and pip narrowed to the index alone would break the download.
mkdir -p "$work/narrowed"
printf '[network]\nallow = ["pypi.org:443"]\n' >"$work/narrowed/pip.toml"
status=0
al policy replay "$work/narrowed/pip.toml" >"$work/replay-narrowed.out" 2>&1 || status=$?
if [ "$status" != 1 ] || ! grep -q "loses files.pythonhosted.org:443" "$work/replay-narrowed.out"; then
  cat "$work/replay-narrowed.out" >&2
  fail "policy replay of pip narrowed to pypi.org: exit $status, expected 1 naming files.pythonhosted.org:443"
fi

if [ "$failed" != 0 ]; then
  exit 1
fi
echo "starters: pip, npm, cargo and apt reached their registries and nothing else; replay agreed"
