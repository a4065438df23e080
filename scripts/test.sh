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
AIRLOCK_TEST_BIN="$PWD/target/release/airlock" cargo test --workspace "$@"
