#!/usr/bin/env bash
# Build airlock's OCI image (packaging/oci/Containerfile) with podman, from the static release
# binary: scripts/build.sh first when target/release/airlock is missing (or give AIRLOCK_BINARY).
#
#   scripts/build-oci.sh [TAG]        # default localhost/airlock:VERSION
#
# AIRLOCK_OCI_BASE names the base image (default docker.io/library/debian:bookworm-slim; the
# tests give an image made from a debootstrap'd bookworm, as no registry is reachable there).
# Extra `podman build` options (e.g. --runtime, --cgroup-manager on hosts that need them) come
# from PODMAN_OPTIONS. Prints the image's tag as stdout's last line.
set -euo pipefail
cd "$(dirname "$0")/.."
binary=${AIRLOCK_BINARY:-target/release/airlock}
if [ ! -x "$binary" ] && [ -z "${AIRLOCK_BINARY:-}" ]; then
  echo "build-oci: $binary is missing: building it (scripts/build.sh)" >&2
  scripts/build.sh
fi
[ -x "$binary" ] || { echo "build-oci: $binary: no such program (AIRLOCK_BINARY)" >&2; exit 1; }
# The image's base has its own libc: only a static binary runs in any image.
if readelf -d "$binary" | grep -q '(NEEDED)'; then
  echo "build-oci: $binary is not statically linked: build it with scripts/build.sh (glibc's libc.a, Debian's libc6-dev)" >&2
  exit 1
fi
version=$("$binary" --version | awk '{print $2}')
tag=${1:-localhost/airlock:$version}
base=${AIRLOCK_OCI_BASE:-docker.io/library/debian:bookworm-slim}
context=$(mktemp -d "${TMPDIR:-/tmp}/airlock-oci.XXXXXX")
trap 'rm -rf "$context"' EXIT
cp packaging/oci/Containerfile "$context/Containerfile"
cp "$binary" "$context/airlock"
read -r -a podman_options <<<"${PODMAN_OPTIONS:-}"
podman "${podman_options[@]}" build --quiet --build-arg "BASE=$base" --tag "$tag" \
  --ulimit nofile=1024:1024 --ulimit nproc=4096:4096 "$context" >&2
echo "$tag"
