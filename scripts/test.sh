#!/usr/bin/env bash
# Run airlock's whole test suite: unit tests, integration tests that really sandbox commands, and
# the attack tests (as root and as an unprivileged uid when run as root).
# As root on Debian, installs what the tests use inside the sandbox first.
set -euo pipefail
cd "$(dirname "$0")/.."
needed=(python3 python3-requests git procps util-linux openssl curl iproute2 postgresql-client zsh fish)
# zsh and fish: the completion scripts are parsed and asked by the shells they are for.
# Node's fetch is one of the clients a secret is injected for; any node will do.
command -v node >/dev/null || needed+=(nodejs)
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  missing=()
  for pkg in "${needed[@]}"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
fi
# /usr/bin/python3 is what runs inside the sandbox; a python3 earlier in PATH (pyenv) is not visible there.
test -x /usr/bin/python3 || { echo "the tests need /usr/bin/python3 (apt-get install python3)" >&2; exit 1; }
# The integration tests run the binary users run: the release build scripts/build.sh makes.
# (cargo test --release would relink that file its own way, and build the hook tests' binary
# without its debug-only hooks.)
for arg in "$@"; do
  case $arg in
    --release | --profile | --profile=*)
      echo "scripts/test.sh: $arg is not supported: the tests already run the release binary scripts/build.sh makes" >&2
      exit 2 ;;
  esac
done
# The shipped AppArmor profile is parsed by a parser that knows its ABI (4.0): Debian 13's,
# unpacked into the cache (Debian 12's parser is too old). In CI the test fails without one.
if [ "$(id -u)" = 0 ]; then
  eval "$(scripts/lib/apparmor4.sh)"
fi
scripts/build.sh
bin="$PWD/target/release/airlock"
# The processes running this suite's binaries (a server someone left running is there before and
# not blamed; another checkout's suite runs other builds): the release build, and the copies the
# tests run of it and of the debug build (support::airlock_bin: named by size and mtime).
copies="${TMPDIR:-/tmp}/airlock-test-bin"
copy_of() { [ -f "$1" ] && echo "$copies/airlock-$(stat -c %s "$1")-$(date -r "$1" +%s%N)"; }
ours=("$bin")
running_airlock() {
  for exe in /proc/[0-9]*/exe; do
    target=$(readlink "$exe" 2>/dev/null) || continue
    target=${target% (deleted)}
    for mine in "${ours[@]}"; do
      if [ "$target" = "$mine" ]; then p=${exe#/proc/}; echo "${p%/exe}"; fi
    done
  done | sort
}
before=$(running_airlock)
status=0
AIRLOCK_TEST_BIN="$bin" cargo test --workspace "$@" || status=$?
for build in "$bin" target/debug/airlock; do
  copy=$(copy_of "$build") && ours+=("$copy")
done
# Nothing the suite started may outlive it: a worker, supervisor or namespace helper left behind
# is a process airlock failed to end (their parents are gone, so no test would see it). Those
# of the last tests may still be ending: looked at again for up to 30 s.
for _ in $(seq 30); do
  sleep 1
  left=$(comm -13 <(echo "$before") <(running_airlock) | sed '/^$/d')
  [ -z "$left" ] && break
done
if [ -n "$left" ]; then
  echo "scripts/test.sh: the tests left airlock processes behind:" >&2
  for pid in $left; do ps -o pid=,ppid=,stat=,wchan:24=,args= -p "$pid" >&2 || true; done
  exit 1
fi
exit "$status"
