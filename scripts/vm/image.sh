# shellcheck shell=bash
# The VM image of scripts/test-vm.sh, made by scripts/vm/build-image.sh (what is in it: see
# there) and cached in ${AIRLOCK_CI_CACHE:-~/.cache/airlock-ci}/vm-image-HASH, where HASH is that
# of the recipe (build-image.sh, this file, airlock-vm-test.service): a change to the recipe makes
# a new image, and the images of older recipes are removed. Built under a .partial name and
# renamed when complete, as scripts/lib/bookworm-root.sh does, so that an interrupted build is
# never taken for a whole one. Sourced; run as root.
#
#   . scripts/vm/image.sh
#   image=$(vm_image)     # a directory: image.raw (ext4 of /, 3 GB sparse), vmlinuz, initrd.img
vm_image() {
  local cache=${AIRLOCK_CI_CACHE:-$HOME/.cache/airlock-ci} here base hash dir part start
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  hash=$(cat "$here/build-image.sh" "$here/image.sh" "$here/airlock-vm-test.service" | sha256sum | cut -c1-16)
  dir=$cache/vm-image-$hash
  if [ ! -e "$dir/.airlock-complete" ]; then
    # shellcheck source=scripts/lib/bookworm-root.sh
    . "$here/../lib/bookworm-root.sh"
    base=$(bookworm_root) || return 1
    start=$SECONDS
    part=$dir.partial
    echo "== building the VM image (once per recipe) into $dir" >&2
    rm -rf "$part"
    mkdir -p "$part"
    if ! "$here/build-image.sh" "$base" "$part" >"$part/build.log" 2>&1; then
      echo "vm image: the build failed; the end of $part/build.log:" >&2
      tail -40 "$part/build.log" >&2
      return 1
    fi
    touch "$part/.airlock-complete"
    # The images of older recipes are of no further use.
    find "$cache" -maxdepth 1 -name 'vm-image-*' ! -name "vm-image-$hash" ! -name "vm-image-$hash.partial" \
      -exec rm -rf {} +
    rm -rf "$dir" && mv "$part" "$dir"
    echo "vm image: built in $((SECONDS - start)) s" >&2
  fi
  echo "$dir"
}
