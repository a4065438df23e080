#!/usr/bin/env bash
# Fuzz airlock's hand-written readers and the patch writer (the targets in fuzz/fuzz_targets/),
# each for a bounded time, starting from the seed corpus in fuzz/corpus/. Fails on a crash: the
# input that caused it is left in fuzz/artifacts/<target>/ (make it a regression test in its
# crate, with the input bytes). Prints the executions run per target.
#
#   scripts/fuzz.sh [TARGET...]      # all targets when none is named
#   FUZZ_SECONDS=300 scripts/fuzz.sh # seconds per target (default 40)
#
# Needs only the stable toolchain: cargo-fuzz is installed from crates.io into
# $AIRLOCK_CI_CACHE (default ~/.cache/airlock-ci), and the -Z flags it passes are allowed with
# RUSTC_BOOTSTRAP=1. No sanitizer (-s none): the code under test is safe Rust, where a bug shows
# as a panic (every property is an assertion) rather than as memory corruption.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-40}
version=0.13.2
cache=${AIRLOCK_CI_CACHE:-$HOME/.cache/airlock-ci}
bin="$cache/cargo-fuzz-$version/bin"
if ! "$bin/cargo-fuzz" --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked --version "$version" --root "$cache/cargo-fuzz-$version"
fi
export PATH="$bin:$PATH" RUSTC_BOOTSTRAP=1
command -v git >/dev/null || { echo "scripts/fuzz.sh: the patch_names target needs git" >&2; exit 1; }
cd fuzz
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo fuzz list)
fi
cargo fuzz build -s none
summary=()
failed=0
for target in "${targets[@]}"; do
  # New inputs go to a scratch corpus (first directory), so the committed seeds stay as they are.
  work="corpus-work/$target"
  mkdir -p "$work" "artifacts/$target"
  log="$work.log"
  echo "== $target: ${seconds}s"
  if cargo fuzz run -s none "$target" "$work" "corpus/$target" -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    >"$log" 2>&1; then
    status=ok
  else
    status=CRASH
    failed=1
    grep -E 'panicked|Test unit written|SUMMARY' "$log" | head -5 >&2 || true
  fi
  runs=$(grep -oE '^stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo '?')
  cov=$(grep -oE '#[0-9]+ +DONE +cov: [0-9]+' "$log" | grep -oE 'cov: [0-9]+' | tail -1 || true)
  summary+=("$(printf '%-18s %-6s %12s runs  %s' "$target" "$status" "$runs" "$cov")")
done
printf '%s\n' "${summary[@]}"
exit "$failed"
