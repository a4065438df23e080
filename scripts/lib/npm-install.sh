# Sourced by scripts/claude-install.sh and scripts/codex-install.sh: install a pinned npm package
# whose native binary is then run directly (no Node at run time), into the cache, once, atomically
# (built in a temporary directory beside it, checked, renamed into place; a marker records a
# fingerprint of the inputs), with concurrent installs waiting on a lock. The caller sets:
#   label, slug          how it is named to people, and in the cache (<cache>/<slug>-<version>)
#   installer            the script, for the wrapper's comment
#   inputs               the directory with the pinned package.json and package-lock.json
#   version, platform    the pinned version, the npm platform suffix
#   exe, native          the wrapper's name (bin/<exe>), the native binary under node_modules
#   expected_version     what `<exe> --version` prints; version_of DIR prints what it does print
#   RECIPE, NEEDED_KIB   bump when the steps change; the free space an install needs
# and say/die; then calls install_cached, which prints the wrapper's absolute path last.
cache_root=${AIRLOCK_CI_CACHE:-$HOME/.cache/airlock-ci}
final="$cache_root/$slug-$version"
marker="$final/.airlock-install-complete"
wrapper="$final/bin/$exe"
fingerprint=$( (
  echo "recipe $RECIPE $platform"
  cat "$inputs/package.json" "$inputs/package-lock.json"
) | sha256sum | cut -d' ' -f1)

installed() { [ -x "$wrapper" ] && [ "$(cat "$marker" 2>/dev/null)" = "$fingerprint" ]; }

# The wrapper finds the install from its own location, so it keeps working after the rename.
write_wrapper() {
  mkdir -p "$1/bin"
  cat >"$1/bin/$exe" <<EOF
#!/bin/sh
# $label $version's native binary; written by airlock's $installer.
dir=\$(dirname "\$(readlink -f "\$0")")/..
exec "\$dir/node_modules/$native" "\$@"
EOF
  chmod +x "$1/bin/$exe"
}

build_into() {
  local dir=$1 log="$1/install.log" got
  cp "$inputs/package.json" "$inputs/package-lock.json" "$dir/"
  say "npm ci ($label $version, $platform)..."
  if ! env -C "$dir" npm ci --ignore-scripts --no-audit --no-fund --prefer-offline >>"$log" 2>&1; then
    tail -n 30 "$log" >&2
    die "npm ci failed; its end is above"
  fi
  write_wrapper "$dir"
  got=$(version_of "$dir") || die "$dir/bin/$exe --version failed: $got"
  [ "$got" = "$expected_version" ] || die "$dir/bin/$exe --version printed '$got', not $expected_version"
  echo "$fingerprint" >"$dir/.airlock-install-complete"
}

free_kib() { df -Pk "$1" | awk 'NR == 2 { print $4 }'; }

install() {
  # Anything partial left now is from a run that was killed: a live one would hold the lock.
  rm -rf "$cache_root/.$slug-$version.partial."*
  local free
  free=$(free_kib "$cache_root")
  [ "$free" -ge "$NEEDED_KIB" ] ||
    die "$cache_root has $((free / 1024)) MiB free; $label needs about 1 GiB (set AIRLOCK_CI_CACHE to elsewhere?)"
  partial=$(mktemp -d "$cache_root/.$slug-$version.partial.XXXXXX")
  chmod 755 "$partial" # mktemp makes it 0700; other users (the tests' unprivileged uid) run it too
  build_into "$partial"
  if [ -e "$final" ]; then
    # An install of other inputs: moved aside first, so the rename below cannot land inside it.
    local old
    old=$(mktemp -d "$cache_root/.$slug-$version.partial.XXXXXX")
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

install_cached() {
  if ! installed; then
    mkdir -p "$cache_root"
    exec 9>"$cache_root/.$slug-$version.lock"
    if ! flock -n 9; then
      say "waiting for another $label install into $cache_root to finish"
      flock 9
    fi
    if ! installed; then
      say "installing $label $version into $final"
      started=$SECONDS
      install
      say "installed in $((SECONDS - started)) s"
    fi
  fi
  echo "$wrapper"
}
