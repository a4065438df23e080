#!/usr/bin/env bash
# airlock on a real Debian 12 machine with cgroup v2 (unified), systemd and AppArmor: a VM under
# qemu, because these machines have neither (cgroup v1 here; no AppArmor). It proves, as root, as
# an ordinary user with a systemd user manager (tester, uid 1000, lingering: systemd delegates the
# memory, pids and cpu controllers to it; issue 30) and as one without (nolinger, uid 1001):
#   - `airlock check` (and --json): the cgroups layer and the cpus limit each user really has,
#     and a verdict and exit status that agree with the lines;
#   - memory, processes and cpus limits hold against an attack that works without airlock, by
#     the kernel (the OOM kill in the run's cgroup; its pids.max and memory.max read from outside
#     while it runs; cpu.max), or by the rlimit fallback / a refusal without a user manager;
#   - the .deb installs with dpkg -i; its AppArmor profile loads into the running kernel (Debian
#     12's parser 3.0 cannot parse ABI 4.0, as packaging/deb/postinst expects, so Debian 13's
#     parser from scripts/lib/apparmor4.sh loads it too) and airlock runs under it;
#   - airlock serve started by systemd through airlock.socket answers POST /v1/runs on its socket,
#     makes its runs' cgroups inside its unit's (Delegate=yes), and systemctl stop ends them;
#   - nothing airlock mounts is left in the host's mount namespace (systemd makes mounts shared).
# The checks are scripts/vm/guest-test.sh, run in the VM by a oneshot unit at boot; its result
# comes back on the VM's second serial port, and this script exits with its verdict. Run as root.
#
#   scripts/test-vm.sh [--airlock PATH] [--deb PATH]
#     default: target/release/airlock from scripts/build.sh, and the .deb of scripts/package-deb.sh
#
# qemu-system-x86_64 with TCG (-accel tcg): /dev/kvm here is a paravirtual device stock kernels
# cannot use. The image (scripts/vm/image.sh, scripts/vm/build-image.sh: Debian's kernel and
# initramfs, systemd, AppArmor, the users, the test unit) is made once per recipe from the
# debootstrap'd root of scripts/lib/bookworm-root.sh and cached outside the repository in
# ${AIRLOCK_CI_CACHE:-~/.cache/airlock-ci}/vm-image-HASH; the VM runs it with snapshot=on, never
# writing it. Each run gets a small payload disk (the binary, the .deb, the guest test, Debian
# 13's apparmor_parser). The console and the result are kept in
# ${AIRLOCK_ARTIFACTS:-target/artifacts}/vm/ (console.log, result.log).
#
# Timings on 2 cores (TCG), measured: from nothing (debootstrap 26 s, the image 52 s) 3 min in all;
# with the image cached 2-2.5 min: boot to the guest test 20-31 s, the guest test ~90 s, power
# off ~5 s. qemu is given 20 minutes (the guest test 15, after which the guest powers off).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
say() { echo "test-vm: $*" >&2; }
die() {
  say "FAILED: $*"
  exit 1
}
[ "$(id -u)" = 0 ] || die "run as root (apt, debootstrap, chroot)"
began=$SECONDS

airlock='' deb=''
while [ $# -gt 0 ]; do
  case $1 in
    --airlock) airlock=${2:?--airlock needs a path}; shift 2 ;;
    --deb) deb=${2:?--deb needs a path}; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (scripts/test-vm.sh [--airlock PATH] [--deb PATH])" ;;
  esac
done

missing=()
command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v mkfs.ext4 >/dev/null || missing+=(e2fsprogs)
command -v unshare >/dev/null || missing+=(util-linux)
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]} (apt)"
  install=(apt-get install -y -qq --no-install-recommends "${missing[@]}")
  DEBIAN_FRONTEND=noninteractive "${install[@]}" >/dev/null ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive "${install[@]}" >/dev/null; }
fi

if [ -z "$airlock" ]; then
  start=$SECONDS
  scripts/build.sh
  airlock=${CARGO_TARGET_DIR:-target}/release/airlock
  say "build: $((SECONDS - start)) s"
fi
if [ -z "$deb" ]; then
  start=$SECONDS
  deb=$(scripts/package-deb.sh)
  say "package: $((SECONDS - start)) s ($deb)"
fi
[ -x "$airlock" ] || die "no airlock binary at $airlock"
[ -f "$deb" ] || die "no package at $deb"
# The image's glibc is bookworm's; a static airlock needs none.
case $("$airlock" --version) in
  *"statically linked"*) ;;
  *) say "warning: $airlock is not the static build; it must run on Debian 12's glibc" ;;
esac

cache=${AIRLOCK_CI_CACHE:-$HOME/.cache/airlock-ci}
artifacts=${AIRLOCK_ARTIFACTS:-$repo/target/artifacts}/vm
mkdir -p "$cache" "$artifacts"
console=$artifacts/console.log result=$artifacts/result.log
rm -f "$console" "$result"

start=$SECONDS
# shellcheck source=scripts/vm/image.sh
. scripts/vm/image.sh
image=$(vm_image)
image_time=$((SECONDS - start))
say "image: ${image_time} s ($image, kernel $(cat "$image/kernel-version"))"

work=$(mktemp -d "$cache/vm-run.XXXXXX")
qemu_pid=
cleanup() {
  [ -z "$qemu_pid" ] || kill "$qemu_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# The payload disk: what this run tests, and the test.
payload=$work/payload
mkdir -p "$payload"
install -m 0755 "$airlock" "$payload/airlock"
install -m 0644 "$deb" "$payload/airlock.deb"
install -m 0755 scripts/vm/guest-test.sh "$payload/guest-test.sh"
# Debian 13's apparmor_parser (ABI 4.0), unpacked with its glibc: the guest loads the profile
# with it too, since Debian 12's parser cannot read it.
eval "$(scripts/lib/apparmor4.sh)"
if [ -n "${AIRLOCK_TEST_APPARMOR_BASE:-}" ]; then
  cp -a "${AIRLOCK_TEST_APPARMOR_BASE%/etc/apparmor.d}" "$payload/apparmor4"
else
  say "warning: no Debian 13 apparmor_parser (scripts/lib/apparmor4.sh): the guest tries Debian 12's only"
fi
size=$(($(du -sm "$payload" | cut -f1) + 64))
mkfs.ext4 -q -L payload -d "$payload" -F "$work/payload.img" "${size}M" >/dev/null

# -accel tcg, never kvm (see above). The kernel's command line: cgroup v2 only, AppArmor as the
# major LSM (Debian's default, said explicitly), and no mitigations (they only slow TCG down).
# The first serial port is the console, the second the guest test's output; qemu exits when
# the guest powers off (-no-reboot: a reboot or panic ends it as well).
append="root=/dev/vda rw console=ttyS0 systemd.unified_cgroup_hierarchy=1 apparmor=1 security=apparmor"
append+=" panic=-1 mitigations=off systemd.show_status=1 systemd.journald.forward_to_console=0"
say "booting the VM (qemu, TCG; console: $console)"
boot_start=$SECONDS
timeout --kill-after=30 20m qemu-system-x86_64 -accel tcg -cpu max -m 2048 -smp 2 \
  -nographic -monitor none -no-reboot -nic none \
  -kernel "$image/vmlinuz" -initrd "$image/initrd.img" -append "$append" \
  -drive "file=$image/image.raw,format=raw,if=virtio,snapshot=on" \
  -drive "file=$work/payload.img,format=raw,if=virtio" \
  -serial "file:$console" -serial "file:$result" </dev/null >"$work/qemu.out" 2>&1 &
qemu_pid=$!
# The guest test's first line on the second serial port: how long the boot took.
booted=
while kill -0 "$qemu_pid" 2>/dev/null; do
  if [ -z "$booted" ] && [ -s "$result" ]; then
    booted=$((SECONDS - boot_start))
    say "boot: ${booted} s to the guest test's start"
  fi
  sleep 1
done
qemu_status=0
wait "$qemu_pid" || qemu_status=$?
qemu_pid=
run_time=$((SECONDS - boot_start))

tr -d '\r' <"$result" >"$work/result" && mv "$work/result" "$result"
echo "---- the guest test's result ($result):"
cat "$result"
echo "----"
verdict=$(grep -a '^RESULT: ' "$result" | tail -1 || true)
if [ "$verdict" != "RESULT: PASS" ]; then
  # Without the colours systemd gives its status lines.
  plain() { sed 's/\x1b\[[0-9;]*m//g; s/\r//g' "$console"; }
  echo "---- what the guest's console ($console) says of the test, and of failures:"
  plain | grep -aiE 'airlock-vm-test|payload|fail|error|emergency|panic|oops|timed out|call trace' |
    grep -aiv 'command line' | tail -n 40 || true
  echo "---- the end of the guest's console:"
  plain | tail -n 40 || true
  echo "---- qemu's own output:"
  cat "$work/qemu.out"
  echo "----"
  case $qemu_status in
    0) ;;
    124 | 137) say "qemu was killed after 20 minutes (exit $qemu_status)" ;;
    *) say "qemu exited with $qemu_status" ;;
  esac
  say "timings: image ${image_time} s, boot ${booted:-?} s, VM ${run_time} s, whole run $((SECONDS - began)) s"
  die "${verdict:-no RESULT line from the guest test (it did not run, or did not finish)}"
fi
say "timings: image ${image_time} s, boot ${booted:-?} s, VM ${run_time} s, whole run $((SECONDS - began)) s"
say "passed"
