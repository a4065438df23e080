#!/usr/bin/env bash
# Make the VM image of scripts/test-vm.sh into OUT (called by vm_image of scripts/vm/image.sh,
# which caches it): Debian 12 (bookworm) with its kernel, systemd, udev, dbus, logind and
# AppArmor; two users, tester (uid 1000, lingering: its user manager starts at boot) and
# nolinger (uid 1001: no user manager); a oneshot unit (airlock-vm-test.service) that runs the
# payload disk's guest-test.sh with its output on the second serial port, then powers off.
#
#   scripts/vm/build-image.sh BASE OUT   # BASE: the pristine root of scripts/lib/bookworm-root.sh
#
# OUT gets image.raw (the root as ext4, 3 GB sparse, made by mkfs.ext4 -d: no loop mount),
# vmlinuz and initrd.img (qemu boots them from outside the image) and kernel-version. BASE is
# copied, never changed. apt from deb.debian.org; ~1 minute here; ~800 MB on disk (image.raw is
# sparse).
#
# The commands in the root run by chroot in a mount and PID namespace of their own
# (`unshare --mount --pid --fork`), where /proc, /sys and /dev are mounted for them: nothing is
# left mounted on the host whatever happens, and no daemon a package starts outlives the
# namespace (a policy-rc.d forbids starting them anyway while the image is made).
set -euxo pipefail
base=$1 out=$2
here=$(cd "$(dirname "$0")" && pwd)
root=$out/root
trap 'rm -rf "$root"' EXIT

# The packages installed into the root (and their dependencies; no recommends): the kernel and
# its initramfs (virtio_blk and ext4 are modules there, and so is overlay), systemd as init with
# udev, dbus and logind (libpam-systemd: linger and user managers; dbus-user-session: their
# buses), AppArmor's parser and its loading of profiles at boot, and what the guest test runs.
packages=(linux-image-amd64 systemd-sysv udev apparmor dbus libpam-systemd dbus-user-session
  python3 procps util-linux e2fsprogs kmod)

# A command in the root being made, as described above.
_vm_chroot() {
  # shellcheck disable=SC2016 # expanded by the inner shell, from its arguments
  unshare --mount --pid --fork --propagation private sh -c '
    root=$1; shift
    mount -t proc proc "$root/proc"
    mount --rbind /sys "$root/sys"
    mount --rbind /dev "$root/dev"
    exec chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
      DEBIAN_FRONTEND=noninteractive "$@"
  ' vm-chroot "$1" "${@:2}"
}

cp -a "$base" "$root"
rm -f "$root/.airlock-complete"
# apt needs the host's resolver while the image is made; the VM has no network.
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod +x "$root/usr/sbin/policy-rc.d"
# The kernel's postinst makes the initramfs (initramfs-tools, MODULES=most: not the host's
# modules but every driver a machine may need to find its root, virtio_blk among them).
_vm_chroot "$root" apt-get update -qq
_vm_chroot "$root" apt-get install -y -qq --no-install-recommends "${packages[@]}"
_vm_chroot "$root" apt-get clean
rm -f "$root/usr/sbin/policy-rc.d"
rm -rf "$root"/var/lib/apt/lists/*

# The kernel and initramfs boot the VM from outside the image (qemu -kernel, -initrd).
kernel=
for file in "$root"/boot/vmlinuz-*; do kernel=${file#"$root"/boot/vmlinuz-}; done
cp "$root/boot/vmlinuz-$kernel" "$out/vmlinuz"
cp "$root/boot/initrd.img-$kernel" "$out/initrd.img"
echo "$kernel" >"$out/kernel-version"

echo airlock-vm >"$root/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\tairlock-vm\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
: >"$root/etc/resolv.conf"
# No fsck at boot: the disk is made fresh by mkfs and run with snapshot=on, never written.
printf '/dev/vda\t/\text4\trw,errors=remount-ro\t0\t0\n' >"$root/etc/fstab"
# A machine id of its own (an empty one would make systemd take the boot for a first boot and
# run systemd-firstboot, which asks on the console).
rm -f "$root/etc/machine-id" "$root/var/lib/dbus/machine-id"
_vm_chroot "$root" systemd-machine-id-setup
_vm_chroot "$root" passwd -l root
_vm_chroot "$root" useradd -m -u 1000 -U -s /bin/bash tester
_vm_chroot "$root" useradd -m -u 1001 -U -s /bin/bash nolinger
printf 'tester:100000:65536\nnolinger:200000:65536\n' | tee "$root/etc/subuid" >"$root/etc/subgid"
# loginctl enable-linger tester, done the way it is recorded: logind starts user@1000.service
# at boot, so tester has a user manager (/run/user/1000/systemd/private) without logging in.
mkdir -p "$root/var/lib/systemd/linger"
touch "$root/var/lib/systemd/linger/tester"

# A small volatile journal, nothing forwarded to the console.
mkdir -p "$root/etc/systemd/journald.conf.d"
printf '[Journal]\nStorage=volatile\nRuntimeMaxUse=32M\nForwardToConsole=no\n' \
  >"$root/etc/systemd/journald.conf.d/airlock-vm.conf"
# Timers and jobs that would only slow a TCG boot down, or run in the middle of the test.
for unit in apt-daily.timer apt-daily-upgrade.timer man-db.timer e2scrub_all.timer \
  e2scrub_reap.service fstrim.timer dpkg-db-backup.timer systemd-tmpfiles-clean.timer \
  systemd-networkd-wait-online.service; do
  ln -sf /dev/null "$root/etc/systemd/system/$unit"
done
install -m 0644 "$here/airlock-vm-test.service" "$root/etc/systemd/system/airlock-vm-test.service"
mkdir -p "$root/etc/systemd/system/multi-user.target.wants"
ln -sf /etc/systemd/system/airlock-vm-test.service \
  "$root/etc/systemd/system/multi-user.target.wants/airlock-vm-test.service"
mkdir -p "$root/payload"

# The root as an ext4 file system (sparse), without a loop mount.
mkfs.ext4 -q -L airlock-vm -d "$root" -F "$out/image.raw" 3G
