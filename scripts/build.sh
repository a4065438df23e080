#!/usr/bin/env bash
# Build airlock's release binary, target/release/airlock, the way it is meant to be run: linked
# statically against glibc (a static PIE, so the kernel still places it at a random address).
#
# Why: a dynamically linked Rust program spends ~0.4 ms of every start in the dynamic loader
# (mapping libc and libgcc_s, resolving their symbols, copy-on-write faults on the relocated
# pages), and airlock starts once per sandboxed command. Measured by bench/compare.sh, the same
# source linked both ways: 5.22 ms dynamic vs 4.80 ms static per `airlock run -- /bin/true` as
# root, 4.36 vs 3.93 ms as an unprivileged user.
#
# Only the final link of the airlock binary gets `-C target-feature=+crt-static` (cargo rustc
# passes it to that crate alone): the procedural macros the build uses must stay dynamic
# libraries, which a crate-wide or RUSTFLAGS setting would forbid.
#
# A static glibc still reads /etc/nsswitch.conf; services other than files and dns (sss, ldap,
# systemd's) are loaded from this machine's glibc at run time, so build on the machine (or the
# glibc version) that runs it. Without glibc's static library (Debian: libc6-dev) this falls
# back to a dynamically linked binary, says so, and exits 0; `cargo build --release` always
# gives the dynamic one.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! cargo rustc --release --quiet -p airlock --bin airlock -- -C target-feature=+crt-static; then
  echo "scripts/build.sh: the static link failed (is glibc's libc.a installed? Debian: apt-get install libc6-dev);" >&2
  echo "scripts/build.sh: building a dynamically linked airlock instead (it works the same, and starts ~0.4 ms slower)" >&2
  cargo build --release --quiet -p airlock --bin airlock
fi
