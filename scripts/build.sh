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
  static=(-C target-feature=+crt-static)
  # The start of a static PIE applies its ~20,000 relative relocations (pointers in its data,
  # moved to where the kernel placed it): packed (DT_RELR, glibc 2.36, binutils 2.38), their
  # table is ~4 KB instead of ~480 KB read at every start. Only where a program linked so runs.
  probe=$(mktemp -d)
  printf 'static const char *t[] = {"a", "b"};\nconst char **p = t;\nint main(void) { return p[1][0] != 98; }\n' >"$probe/relr.c"
  if cc -static-pie -Wl,-z,pack-relative-relocs -o "$probe/relr" "$probe/relr.c" 2>/dev/null && "$probe/relr"; then
    static+=(-C link-arg=-Wl,-z,pack-relative-relocs)
  fi
  rm -rf "$probe"
  cargo rustc --profile "$profile" --quiet -p airlock --bin airlock -- "${static[@]}"
else
  echo "scripts/build.sh: glibc's static library libc.a is not installed (Debian: libc6-dev; Fedora: glibc-static);" >&2
  echo "scripts/build.sh: building a dynamically linked airlock instead (it starts ~0.4 ms slower)" >&2
  cargo build --profile "$profile" --quiet -p airlock --bin airlock
fi
