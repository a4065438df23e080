#!/usr/bin/env bash
# Install a real Claude Code (Anthropic's coding agent) for airlock's Claude Code test, outside the
# repository, once.
#
# Prints as its last stdout line the absolute path of an executable that runs that Claude Code:
# <cache>/claude-code-<version>/bin/claude, where <cache> is $AIRLOCK_CI_CACHE or else
# ~/.cache/airlock-ci. Everything else it says goes to stderr. With the install already there it
# returns at once. The first install took 10 s here and takes ~380 MB (the native binary alone is
# 373 MB). It needs npm (any Node: only npm runs, at install time).
#
# What gets installed is pinned whole by scripts/claude-code/package-lock.json (versions and
# sha512 integrity): @anthropic-ai/claude-code 2.1.328 and its native binary for this platform
# (@anthropic-ai/claude-code-linux-x64, an optional dependency). Why it is done so:
# - The package's own bin/claude.exe is a placeholder that its postinstall script replaces with
#   the native binary. npm runs with --ignore-scripts (no package's code runs at install time),
#   and the wrapper below runs the platform package's binary directly: no Node at run time, so
#   the package's "node >= 22" (its JavaScript installer's need) does not matter here (npm only
#   warns, EBADENGINE, on the machine's Node 20).
# - Atomic: the install is made in a temporary directory beside the cache and renamed into place
#   only once complete and checked (`claude --version` says the pinned version), so an
#   interrupted install is never taken for a finished one (its leftovers are removed by the next
#   run). A marker inside records a fingerprint of the inputs; an install of other inputs is redone.
# - Concurrent runs wait for each other on a lock file.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
inputs="$here/claude-code"
# Bump when the build steps below change in a way that makes an existing install wrong.
RECIPE=1
NEEDED_KIB=$((1024 * 1024))

say() { echo "claude-install: $*" >&2; }
die() {
  say "$*"
  exit 1
}

command -v npm >/dev/null || die "npm is not on PATH (Debian: apt-get install npm)"
version=$(sed -n 's/.*"@anthropic-ai\/claude-code": "\([0-9.]*\)".*/\1/p' "$inputs/package.json")
[ -n "$version" ] || die "cannot read the Claude Code version from $inputs/package.json"
case "$(uname -m)" in
x86_64) platform=linux-x64 ;;
aarch64) platform=linux-arm64 ;;
*) die "no Claude Code native binary for $(uname -m)" ;;
esac
# musl systems (Alpine) need the -musl package, which the lock file also pins.
if ldd --version 2>&1 | grep -qi musl; then platform="$platform-musl"; fi
cache_root=${AIRLOCK_CI_CACHE:-$HOME/.cache/airlock-ci}
final="$cache_root/claude-code-$version"
marker="$final/.airlock-install-complete"
wrapper="$final/bin/claude"
fingerprint=$( (
  echo "recipe $RECIPE $platform"
  cat "$inputs/package.json" "$inputs/package-lock.json"
) | sha256sum | cut -d' ' -f1)

installed() { [ -x "$wrapper" ] && [ "$(cat "$marker" 2>/dev/null)" = "$fingerprint" ]; }

# The wrapper finds the install from its own location, so it keeps working after the rename.
write_wrapper() {
  mkdir -p "$1/bin"
  cat >"$1/bin/claude" <<EOF
#!/bin/sh
# Claude Code $version's native binary; written by airlock's scripts/claude-install.sh.
dir=\$(dirname "\$(readlink -f "\$0")")/..
exec "\$dir/node_modules/@anthropic-ai/claude-code-$platform/claude" "\$@"
EOF
  chmod +x "$1/bin/claude"
}

build_into() {
  local dir=$1 log="$1/install.log" got
  cp "$inputs/package.json" "$inputs/package-lock.json" "$dir/"
  say "npm ci (Claude Code $version, $platform)..."
  if ! env -C "$dir" npm ci --ignore-scripts --no-audit --no-fund --prefer-offline >>"$log" 2>&1; then
    tail -n 30 "$log" >&2
    die "npm ci failed; its end is above"
  fi
  write_wrapper "$dir"
  got=$(HOME="$dir" "$dir/bin/claude" --version 2>&1) || die "$dir/bin/claude --version failed: $got"
  [ "$got" = "$version (Claude Code)" ] || die "$dir/bin/claude --version printed '$got', not $version"
  echo "$fingerprint" >"$dir/.airlock-install-complete"
}

free_kib() { df -Pk "$1" | awk 'NR == 2 { print $4 }'; }

install() {
  # Anything partial left now is from a run that was killed: a live one would hold the lock.
  rm -rf "$cache_root/.claude-code-$version.partial."*
  local free
  free=$(free_kib "$cache_root")
  [ "$free" -ge "$NEEDED_KIB" ] ||
    die "$cache_root has $((free / 1024)) MiB free; Claude Code needs about 1 GiB (set AIRLOCK_CI_CACHE to elsewhere?)"
  partial=$(mktemp -d "$cache_root/.claude-code-$version.partial.XXXXXX")
  chmod 755 "$partial" # mktemp makes it 0700; other users (the tests' unprivileged uid) run it too
  build_into "$partial"
  if [ -e "$final" ]; then
    # An install of other inputs: moved aside first, so the rename below cannot land inside it.
    local old
    old=$(mktemp -d "$cache_root/.claude-code-$version.partial.XXXXXX")
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
  exec 9>"$cache_root/.claude-code-$version.lock"
  if ! flock -n 9; then
    say "waiting for another Claude Code install into $cache_root to finish"
    flock 9
  fi
  if ! installed; then
    say "installing Claude Code $version into $final"
    started=$SECONDS
    install
    say "installed in $((SECONDS - started)) s"
  fi
fi
echo "$wrapper"
