#!/usr/bin/env bash
# An apparmor_parser that knows ABI 4.0 (the `userns` rule Ubuntu 23.10+ needs), for the test
# that parses packaging/apparmor/airlock: Debian 12's parser is 3.0 and knows neither. Debian 13's
# apparmor package and the glibc it needs are unpacked (never installed) into a cache outside the
# repository, with an apt list of their own so that the machine's apt setup is untouched. Prints
# the two variables the test reads; prints nothing when it cannot (no apt, no network).
#   eval "$(scripts/lib/apparmor4.sh)"
set -euo pipefail
cache=${AIRLOCK_CI_CACHE:-${HOME:-/root}/.cache/airlock-ci}/apparmor4
root=$cache/root
parser=$cache/apparmor_parser
if [ ! -x "$parser" ]; then
  command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || exit 0
  rm -rf "$cache" && mkdir -p "$cache/lists/partial" "$cache/archives/partial" "$root"
  keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  echo "deb [signed-by=$keyring] http://deb.debian.org/debian trixie main" >"$cache/sources.list"
  apt=(apt-get -qq -o "Dir::Etc::SourceList=$cache/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$cache/lists" -o "Dir::Cache::Archives=$cache/archives"
    -o Debug::NoLocking=1)
  (
    cd "$cache"
    "${apt[@]}" update >/dev/null 2>&1 && "${apt[@]}" download apparmor libc6 >/dev/null 2>&1
  ) || { rm -rf "$cache"; exit 0; }
  for deb in "$cache"/apparmor_*.deb "$cache"/libc6_*.deb; do dpkg-deb -x "$deb" "$root"; done
  cat >"$parser.tmp" <<EOF
#!/bin/sh
exec $root/usr/lib64/ld-linux-x86-64.so.2 --library-path $root/usr/lib/x86_64-linux-gnu $root/usr/sbin/apparmor_parser "\$@"
EOF
  chmod +x "$parser.tmp" && mv "$parser.tmp" "$parser"
fi
"$parser" --version >/dev/null 2>&1 || exit 0
echo "export AIRLOCK_TEST_APPARMOR_PARSER=$parser AIRLOCK_TEST_APPARMOR_BASE=$root/etc/apparmor.d"
