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
# A static glibc cannot safely load NSS services from shared libraries (libnss_systemd crashed
# in it), so the static airlock uses glibc's built-in ones only: users from /etc/passwd and
# /etc/group, host names from /etc/hosts and the DNS servers of /etc/resolv.conf (see
# crates/airlock-jail/src/nss.rs). Without glibc's static library this builds a dynamically
# linked airlock instead, and says so; `cargo build --release` always gives the dynamic one.
#
# AIRLOCK_BUILD_PROFILE=demo builds target/demo/airlock instead, unoptimised, in a third of the
# time (scripts/demo.sh's; see [profile.demo] in Cargo.toml): never for use.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${AIRLOCK_BUILD_PROFILE:-release}
# cc prints the library's full path when it has it, and the bare name when not.
libc_a=$(cc -print-file-name=libc.a 2>/dev/null || true)
if [[ $libc_a == /* ]] && [ -e "$libc_a" ]; then
  cargo rustc --profile "$profile" --quiet -p airlock --bin airlock -- -C target-feature=+crt-static
else
  echo "scripts/build.sh: glibc's static library libc.a is not installed (Debian: libc6-dev; Fedora: glibc-static);" >&2
  echo "scripts/build.sh: building a dynamically linked airlock instead (it starts ~0.4 ms slower)" >&2
  cargo build --profile "$profile" --quiet -p airlock --bin airlock
fi
