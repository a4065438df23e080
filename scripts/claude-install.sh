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
label="Claude Code"
slug=claude-code
installer=scripts/claude-install.sh
exe=claude
native="@anthropic-ai/claude-code-$platform/claude"
expected_version="$version (Claude Code)"
version_of() { HOME="$1" "$1/bin/claude" --version 2>&1; }
# shellcheck source=lib/npm-install.sh
. "$here/lib/npm-install.sh"
install_cached
