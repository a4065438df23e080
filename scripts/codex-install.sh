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
label="Codex"
slug=codex
installer=scripts/codex-install.sh
exe=codex
native="@openai/codex-$platform/vendor/$triple/bin/codex"
expected_version="codex-cli $version"
version_of() { CODEX_HOME="$1" "$1/bin/codex" --version 2>&1; }
# shellcheck source=lib/npm-install.sh
. "$here/lib/npm-install.sh"
install_cached
