#!/usr/bin/env bash
# The .deb installed as a user installs it: into a clean Debian 12 (bookworm) root made by
# debootstrap, with dpkg -i, and then used there: `airlock --version` (the static build),
# `airlock check`, a sandboxed run, the manual page found by man, the completions, the AppArmor
# profile and the systemd units where they belong, not enabled. Run as root.
#
#   scripts/test-package.sh [PATH.deb]     # default: build one with scripts/package-deb.sh
#
# The pristine root is made once, into ${AIRLOCK_CI_CACHE:-~/.cache/airlock-ci}/bookworm-root
# (debootstrap --variant=minbase, plus man-db; deb.debian.org), and copied for each run, so
# every run installs into a root nothing was installed into before.
#
# The commands run in that root through `unshare --mount --pid --fork` and pivot_root rather than
# a bare chroot: /proc, /sys and /dev are mounted for them in a mount namespace of their own, so
# nothing is left mounted on the host whatever happens to this script, and a PID namespace ends
# every process started there with it. airlock inside it sees a machine of its own (its own
# /proc, the host's kernel and cgroups), as in a container. systemd-nspawn is not used: it is
# not installed here (systemd-container), and it would add a seccomp filter and a cgroup
# setup of its own that this test does not mean to test (see issue 18's container part).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "scripts/test-package.sh: run as root (debootstrap, dpkg in a root, chroot)" >&2; exit 1; }
cache=${AIRLOCK_CI_CACHE:-$HOME/.cache/airlock-ci}
# shellcheck source=scripts/lib/bookworm-root.sh
. scripts/lib/bookworm-root.sh
base=$(bookworm_root)

deb=${1:-}
if [ -z "$deb" ]; then
  start=$SECONDS
  deb=$(scripts/package-deb.sh)
  echo "package: $((SECONDS - start)) s ($deb)"
fi
[ -f "$deb" ] || { echo "scripts/test-package.sh: no package at $deb" >&2; exit 1; }

work=$(mktemp -d "$cache/package-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root
cp -a "$base" "$root"
cp "$deb" "$root/tmp/airlock.deb"

# A command in the root, as described above. The root becomes the mount namespace's own root
# (pivot_root), not a chroot: the kernel refuses a chrooted process a user namespace (EPERM),
# and airlock's sandbox begins with one.
inside() {
  # shellcheck disable=SC2016 # expanded by the inner shells, from their arguments
  unshare --mount --pid --fork --propagation private sh -c '
    root=$1; shift
    mount --bind "$root" "$root"
    mount -t proc proc "$root/proc"
    mount --rbind /sys "$root/sys"
    mount --rbind /dev "$root/dev"
    cd "$root" && mkdir -p .host && pivot_root . .host
    exec /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root sh -c "
      umount -l /.host && rmdir /.host && cd / && exec \"\$@\"" sh "$@"
  ' inside "$root" "$@"
}

echo "== dpkg -i"
inside dpkg -i /tmp/airlock.deb
echo "== airlock --version"
version=$(inside airlock --version)
echo "$version"
case $version in
  *"statically linked"*) ;;
  *) echo "FAILED: the package's airlock is not the static build: $version" >&2; exit 1 ;;
esac
echo "== airlock check"
# 0: every layer; 4: run works with less (a stand-in, such as rlimits for cgroups); 3 fails.
inside airlock check || [ $? = 4 ]
echo "== airlock run -- sh -c 'id -u; echo ok'"
# In a project directory: airlock refuses a home directory as the workspace.
ran=$(inside sh -c 'mkdir -p /srv/project && cd /srv/project && airlock run -- sh -c "id -u; echo ok"')
echo "$ran"
# The sandbox's own unprivileged identity (uid 1000 inside), never root.
[ "$ran" = "$(printf '1000\nok')" ] || { echo "FAILED: the run printed $ran" >&2; exit 1; }
echo "== installed files"
page=$(inside man -w airlock)
echo "man -w airlock: $page"
inside man -w airlock-run >/dev/null
for file in /usr/share/bash-completion/completions/airlock /usr/share/zsh/vendor-completions/_airlock \
  /usr/share/fish/vendor_completions.d/airlock.fish /etc/apparmor.d/airlock \
  /lib/systemd/system/airlock.service /lib/systemd/system/airlock.socket \
  /usr/share/doc/airlock/profiles/pip.toml; do
  [ -s "$root$file" ] || { echo "FAILED: $file is missing" >&2; exit 1; }
  echo "present: $file"
done
inside bash -n /usr/share/bash-completion/completions/airlock
grep -qx /etc/apparmor.d/airlock "$root/var/lib/dpkg/info/airlock.conffiles" ||
  { echo "FAILED: /etc/apparmor.d/airlock is not a conffile" >&2; exit 1; }
grep -q '^ExecStart=/usr/bin/airlock ' "$root/lib/systemd/system/airlock.service" ||
  { echo "FAILED: airlock.service does not start /usr/bin/airlock" >&2; exit 1; }
if ls "$root"/etc/systemd/system/*.wants/airlock.* >/dev/null 2>&1; then
  echo "FAILED: the package enabled airlock's units" >&2
  exit 1
fi
echo "== airlock policy list: the starter profiles are in the binary"
listed=$(inside airlock policy list)
for name in apt cargo github go npm pip; do
  echo "$listed" | grep -q "^$name  *starter, built into airlock" ||
    { echo "FAILED: the starter $name is not listed: $listed" >&2; exit 1; }
done
echo "== dpkg -r"
inside dpkg -r airlock >/dev/null
[ ! -e "$root/usr/bin/airlock" ] || { echo "FAILED: dpkg -r left /usr/bin/airlock" >&2; exit 1; }
echo "package test: passed"
