#!/usr/bin/env bash
# Install a real Codex (OpenAI's coding agent, the @openai/codex npm package) for airlock's Codex
# test, outside the repository, once.
#
# Prints as its last stdout line the absolute path of an executable that runs that Codex:
# <cache>/codex-<version>/bin/codex, where <cache> is $AIRLOCK_CI_CACHE or else
# ~/.cache/airlock-ci. Everything else it says goes to stderr. With the install already there it
# returns at once. The first install took 16 s here and takes ~430 MB (the native binary alone is
# 315 MB). It needs npm (any Node: only npm runs, at install time).
#
# What gets installed is pinned whole by scripts/codex/package-lock.json (versions and sha512
# integrity): @openai/codex 0.171.0 and its native binary for this platform
# (@openai/codex-linux-x64, an alias of @openai/codex@0.171.0-linux-x64, an optional
# dependency; a static musl build, so it runs on glibc and musl systems alike). Why so:
# - npm runs with --ignore-scripts (no package's code runs at install time), and the wrapper
#   below runs the platform package's binary directly, as the package's bin/codex.js would: no
#   Node at run time.
# - Atomic: the install is made in a temporary directory beside the cache and renamed into place
#   only once complete and checked (`codex --version` says the pinned version), so an
#   interrupted install is never taken for a finished one (its leftovers are removed by the next
#   run). A marker inside records a fingerprint of the inputs; an install of other inputs is redone.
# - Concurrent runs wait for each other on a lock file.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
inputs="$here/codex"
# Bump when the build steps below change in a way that makes an existing install wrong.
RECIPE=1
NEEDED_KIB=$((1024 * 1024))

say() { echo "codex-install: $*" >&2; }
die() {
  say "$*"
  exit 1
}

command -v npm >/dev/null || die "npm is not on PATH (Debian: apt-get install npm)"
version=$(sed -n 's/.*"@openai\/codex": "\([0-9.]*\)".*/\1/p' "$inputs/package.json")
[ -n "$version" ] || die "cannot read the Codex version from $inputs/package.json"
case "$(uname -m)" in
x86_64) platform=linux-x64 triple=x86_64-unknown-linux-musl ;;
aarch64) platform=linux-arm64 triple=aarch64-unknown-linux-musl ;;
*) die "no Codex native binary for $(uname -m)" ;;
esac
cache_root=${AIRLOCK_CI_CACHE:-$HOME/.cache/airlock-ci}
final="$cache_root/codex-$version"
marker="$final/.airlock-install-complete"
wrapper="$final/bin/codex"
fingerprint=$( (
  echo "recipe $RECIPE $platform"
  cat "$inputs/package.json" "$inputs/package-lock.json"
) | sha256sum | cut -d' ' -f1)

installed() { [ -x "$wrapper" ] && [ "$(cat "$marker" 2>/dev/null)" = "$fingerprint" ]; }

# The wrapper finds the install from its own location, so it keeps working after the rename.
write_wrapper() {
  mkdir -p "$1/bin"
  cat >"$1/bin/codex" <<EOF
#!/bin/sh
# Codex $version's native binary; written by airlock's scripts/codex-install.sh.
dir=\$(dirname "\$(readlink -f "\$0")")/..
exec "\$dir/node_modules/@openai/codex-$platform/vendor/$triple/bin/codex" "\$@"
EOF
  chmod +x "$1/bin/codex"
}

build_into() {
  local dir=$1 log="$1/install.log" got
  cp "$inputs/package.json" "$inputs/package-lock.json" "$dir/"
  say "npm ci (Codex $version, $platform)..."
  if ! env -C "$dir" npm ci --ignore-scripts --no-audit --no-fund --prefer-offline >>"$log" 2>&1; then
    tail -n 30 "$log" >&2
    die "npm ci failed; its end is above"
  fi
  write_wrapper "$dir"
  got=$(CODEX_HOME="$dir" "$dir/bin/codex" --version 2>&1) || die "$dir/bin/codex --version failed: $got"
  [ "$got" = "codex-cli $version" ] || die "$dir/bin/codex --version printed '$got', not $version"
  echo "$fingerprint" >"$dir/.airlock-install-complete"
}

free_kib() { df -Pk "$1" | awk 'NR == 2 { print $4 }'; }

install() {
  # Anything partial left now is from a run that was killed: a live one would hold the lock.
  rm -rf "$cache_root/.codex-$version.partial."*
  local free
  free=$(free_kib "$cache_root")
  [ "$free" -ge "$NEEDED_KIB" ] ||
    die "$cache_root has $((free / 1024)) MiB free; Codex needs about 1 GiB (set AIRLOCK_CI_CACHE to elsewhere?)"
  partial=$(mktemp -d "$cache_root/.codex-$version.partial.XXXXXX")
  chmod 755 "$partial" # mktemp makes it 0700; other users (the tests' unprivileged uid) run it too
  build_into "$partial"
  if [ -e "$final" ]; then
    # An install of other inputs: moved aside first, so the rename below cannot land inside it.
    local old
    old=$(mktemp -d "$cache_root/.codex-$version.partial.XXXXXX")
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
trap 'exit 130' INT
trap 'exit 143' TERM

if ! installed; then
  mkdir -p "$cache_root"
  exec 9>"$cache_root/.codex-$version.lock"
  if ! flock -n 9; then
    say "waiting for another Codex install into $cache_root to finish"
    flock 9
  fi
  if ! installed; then
    say "installing Codex $version into $final"
    started=$SECONDS
    install
    say "installed in $((SECONDS - started)) s"
  fi
fi
echo "$wrapper"
