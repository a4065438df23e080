# shellcheck shell=bash
# A pristine Debian 12 (bookworm) root, made once by debootstrap (--variant=minbase, plus
# man-db; deb.debian.org) into ${AIRLOCK_CI_CACHE:-~/.cache/airlock-ci}/bookworm-root, for the
# tests that need a clean system: scripts/test-package.sh copies it for each run,
# scripts/test-container.sh imports it as a podman image. Sourced; run as root.
#
#   . scripts/lib/bookworm-root.sh
#   base=$(bookworm_root)      # the root's path; made first if it is not there yet
bookworm_root() {
  local cache=${AIRLOCK_CI_CACHE:-$HOME/.cache/airlock-ci}
  local base=$cache/bookworm-root mirror=http://deb.debian.org/debian start
  if [ ! -e "$base/.airlock-complete" ]; then
    mkdir -p "$cache"
    command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
    echo "== debootstrap bookworm (once) into $base" >&2
    start=$SECONDS
    rm -rf "$base.partial"
    debootstrap --variant=minbase --include=man-db bookworm "$base.partial" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
      { tail -20 "$cache/debootstrap.log" >&2; return 1; }
    # A root left half-made by an interrupted run is never taken for a whole one.
    touch "$base.partial/.airlock-complete"
    rm -rf "$base" && mv "$base.partial" "$base"
    echo "debootstrap: $((SECONDS - start)) s" >&2
  fi
  echo "$base"
}
