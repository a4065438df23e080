#!/usr/bin/env bash
# Startup benchmark for `airlock run`: what a sandbox costs a command that does nothing.
#
# Measures /bin/true four ways in ONE hyperfine run (same machine state, so the figures compare):
#   plain    /bin/true
#   bwrap    a bare bubblewrap sandbox of similar shape (read-only /usr, private /proc /dev /tmp,
#            every namespace unshared): the reference airlock should not be slower than
#   airlock  airlock run with a fresh state dir and workspace, from a copy of the binary (as
#            `install` leaves it: written through the page cache)
#   airlock, re-read   the same from a copy whose pages were dropped from the page cache first,
#            so that the kernel reads them back as exec touches them (as after a reboot or under
#            memory pressure): this is slower, by ~0.3-0.4 ms here, because on this kernel
#            a file read by page faults is cached in small folios and a large static binary then
#            takes more faults in each of the run's processes
# then the peak RSS of each under GNU time. Target: airlock/bwrap median ratio <= 1.0.
#
# Usage: bench/startup.sh            (from anywhere; as root it installs what it needs)
# Environment:
#   BENCH_RUNS=N        timed runs per command (default 200)
#   BENCH_WARMUP=N      untimed warmup runs per command (default 20)
#   BENCH_RSS_RUNS=N    runs per command for peak RSS (default 10)
#   BENCH_PACED_RUNS=N  runs per command with a pause before each (default 30; 0 skips): an agent
#                       calls every few seconds, and some kernel costs (RCU grace periods) only
#                       show when the machine has gone quiet between runs
#   BENCH_AS_USER=UID   as root: build as root, then measure as this unprivileged uid (via setpriv)
#   BENCH_AIRLOCK=PATH  measure this airlock binary instead of building one (no install, no build)
set -euo pipefail
script=$(realpath "$0")

runs=${BENCH_RUNS:-200}
warmup=${BENCH_WARMUP:-20}
rss_runs=${BENCH_RSS_RUNS:-10}
paced_runs=${BENCH_PACED_RUNS:-30}
as_user=${BENCH_AS_USER:-}
is_root=false
[ "$(id -u)" = 0 ] && is_root=true
# /usr/bin/python3, not whatever is first in PATH: a pyenv shim under /root is unusable as another uid.
python=/usr/bin/python3

# Everything this script creates lives under one directory, removed on exit. It is 0755 so that the
# sandbox uid airlock uses as root (and BENCH_AS_USER) can enter the workspace inside it.
# The overlay leaves a mode-000 `work/work` in the state dir: make everything writable before rm.
scratch=$(mktemp -d "${TMPDIR:-/tmp}/airlock-bench.XXXXXX")
chmod 755 "$scratch"
cleanup() { chmod -R u+rwx "$scratch" 2>/dev/null || true; rm -rf "$scratch"; }
trap cleanup EXIT

if [ -z "${BENCH_AIRLOCK:-}" ]; then
  # ---- 1. tools -------------------------------------------------------------------------------
  missing=()
  command -v bwrap >/dev/null || missing+=(bubblewrap)
  command -v hyperfine >/dev/null || missing+=(hyperfine)
  [ -x /usr/bin/time ] || missing+=(time)  # GNU time: the shell builtin cannot report peak RSS
  if [ ${#missing[@]} -gt 0 ]; then
    if $is_root && command -v apt-get >/dev/null; then
      echo "installing: ${missing[*]}" >&2
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
      echo "missing: ${missing[*]}; install with: sudo apt-get install ${missing[*]}" >&2
      exit 1
    fi
  fi

  # ---- 2. build -------------------------------------------------------------------------------
  cd "$(dirname "$script")/.."
  scripts/build.sh
  airlock="$PWD/target/release/airlock"

  # BENCH_AS_USER: re-run the measuring half of this script as that uid. The binary and the script
  # are copied into the 0755 scratch dir because the build tree may sit where that uid cannot go.
  if [ -n "$as_user" ]; then
    if ! $is_root; then echo "BENCH_AS_USER needs root (it switches uid with setpriv)" >&2; exit 1; fi
    case $as_user in '' | *[!0-9]* | 0) echo "BENCH_AS_USER must be a non-zero uid" >&2; exit 1 ;; esac
    mkdir "$scratch/bin"
    cp "$airlock" "$script" "$scratch/bin/"
    chmod 755 "$scratch/bin" "$scratch/bin/"*
    # A minimal environment, as an unprivileged caller would have; no passwd entry is needed.
    setpriv --reuid="$as_user" --regid="$as_user" --clear-groups -- \
      env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$scratch" LANG=C.UTF-8 \
      BENCH_RUNS="$runs" BENCH_WARMUP="$warmup" BENCH_RSS_RUNS="$rss_runs" \
      BENCH_PACED_RUNS="$paced_runs" \
      BENCH_AIRLOCK="$scratch/bin/airlock" \
      bash "$scratch/bin/$(basename "$script")"
    exit $?
  fi
else
  airlock=$BENCH_AIRLOCK
fi

for tool in bwrap hyperfine /usr/bin/time "$python"; do
  command -v "$tool" >/dev/null || { echo "missing: $tool" >&2; exit 1; }
done

# ---- 3. what is measured ------------------------------------------------------------------------
state="$scratch/state"
ws="$scratch/workspace"
mkdir "$state" "$ws"
chmod 755 "$ws"
cd "$scratch"  # a cwd every identity here can reach

# The binary measured is a copy (see the header), and a second copy's pages are dropped from the
# page cache (clean once synced, so posix_fadvise DONTNEED drops them) before its first run.
cp "$airlock" "$scratch/airlock"
cp "$airlock" "$scratch/airlock-reread"
"$python" - "$scratch/airlock-reread" <<'EOF'
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.fdatasync(fd)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
os.close(fd)
EOF
plain_cmd="/bin/true"
bwrap_cmd="bwrap --ro-bind /usr /usr --symlink usr/lib /lib --symlink usr/lib64 /lib64 --symlink usr/bin /bin --proc /proc --dev /dev --tmpfs /tmp --unshare-all --die-with-parent /bin/true"
airlock_cmd="$scratch/airlock --state-dir $state run --workspace $ws -- /bin/true"
reread_cmd="$scratch/airlock-reread --state-dir $state run --workspace $ws -- /bin/true"

echo "# airlock startup benchmark"
echo
echo "- machine: $(nproc) CPUs ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)), kernel $(uname -r)"
if [ "$(id -u)" = 0 ]; then
  echo "- running as: root (airlock runs the command as its dedicated sandbox uid)"
else
  echo "- running as: uid $(id -u), unprivileged"
fi
# scripts/build.sh falls back to a dynamically linked binary, ~0.4 ms slower to start: say which.
linkage=$("$python" - "$scratch/airlock" <<'EOF'
import struct, sys
elf = open(sys.argv[1], "rb").read(1 << 16)
(phoff,) = struct.unpack_from("<Q", elf, 0x20)
phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
kinds = [struct.unpack_from("<I", elf, phoff + i * phentsize)[0] for i in range(phnum)]
print("dynamically linked" if 3 in kinds else "statically linked")  # 3: PT_INTERP
EOF
)
echo "- airlock binary: $linkage"
echo "- runs: $runs timed + $warmup warmup per command, hyperfine -N (no shell), in rounds that alternate the commands"
echo "- commands:"
echo "  - plain:   \`$plain_cmd\`"
echo "  - bwrap:   \`$bwrap_cmd\`"
echo "  - airlock: \`$airlock_cmd\`"
echo "  - airlock, re-read: the same from \`$scratch/airlock-reread\`, dropped from the page cache first"
echo

# Run each once first, so a sandbox that cannot start here reports its own error instead of
# hyperfine's "command terminated with non-zero exit code".
for name in bwrap airlock; do
  cmd_var="${name}_cmd"
  # shellcheck disable=SC2086  # the command lines are meant to be split on spaces
  if ! ${!cmd_var} </dev/null >"$scratch/preflight.out" 2>&1; then
    echo "$name failed to run /bin/true; its output:" >&2
    sed 's/^/    /' "$scratch/preflight.out" >&2
    exit 1
  fi
done

# ---- 4. timing ----------------------------------------------------------------------------------
# In rounds: hyperfine times one command's runs back to back, and this machine's speed drifts by
# ±10% over seconds, which would favour whichever command ran in a fast stretch. Each round times
# all four for a slice of the runs; the medians are over every run of every round.
rounds=$(( runs >= 10 ? 10 : 1 ))
per_round=$(( (runs + rounds - 1) / rounds ))
for round in $(seq "$rounds"); do
  hyperfine -N --style basic --time-unit millisecond \
    --warmup "$(( round == 1 ? warmup : 2 ))" --runs "$per_round" \
    --export-json "$scratch/hyperfine.$round.json" \
    -n plain "$plain_cmd" \
    -n bwrap "$bwrap_cmd" \
    -n airlock "$airlock_cmd" \
    -n "airlock, re-read" "$reread_cmd" >"$scratch/hyperfine.out"
done
echo "## time (ms; $rounds rounds of $per_round runs per command, interleaved)"
echo
"$python" - "$scratch"/hyperfine.*.json <<'EOF'
import json, statistics, sys
times = {}
for path in sys.argv[1:]:
    for r in json.load(open(path))["results"]:
        times.setdefault(r["command"], []).extend(r["times"])
ms = lambda s: s * 1000.0
med = {name: statistics.median(t) for name, t in times.items()}
print("| command | median ms | mean ± stddev ms | min ms |")
print("| --- | ---: | ---: | ---: |")
for name in ("plain", "bwrap", "airlock", "airlock, re-read"):
    t = times[name]
    print(f"| {name} | {ms(med[name]):.3f} | {ms(statistics.mean(t)):.3f} ± {ms(statistics.stdev(t)):.3f} | {ms(min(t)):.3f} |")
ab = med["airlock"] / med["bwrap"]
rb = med["airlock, re-read"] / med["bwrap"]
ap = med["airlock"] / med["plain"]
verdict = lambda ratio: "met" if ratio <= 1.0 else "NOT met"
print()
print(f"- airlock/bwrap (median): **{ab:.2f}**; re-read binary: **{rb:.2f}**")
print(f"- airlock/plain (median): {ap:.1f}")
print(f"- target: airlock/bwrap median ratio <= 1.0 — {verdict(ab)}; re-read binary: {verdict(rb)}")
EOF
echo

# ---- 5. paced timing ----------------------------------------------------------------------------
# Back-to-back runs keep the kernel warm; an agent's runs come seconds apart. hyperfine's
# --prepare runs untimed before each timed run.
if [ "$paced_runs" -gt 0 ]; then
  paced_json="$scratch/paced.json"
  hyperfine -N --style basic --time-unit millisecond \
    --runs "$paced_runs" --prepare "sleep 0.5" --export-json "$paced_json" \
    -n bwrap "$bwrap_cmd" \
    -n airlock "$airlock_cmd" \
    -n "airlock, re-read" "$reread_cmd" >"$scratch/paced.out"
  echo "## paced time (ms; 0.5 s pause before each of $paced_runs runs)"
  echo
  "$python" - "$paced_json" <<'EOF'
import json, sys
res = {r["command"]: r for r in json.load(open(sys.argv[1]))["results"]}
print("| command | median ms | mean ± stddev ms |")
print("| --- | ---: | ---: |")
for name in ("bwrap", "airlock", "airlock, re-read"):
    r = res[name]
    print(f"| {name} | {r['median'] * 1000:.3f} | {r['mean'] * 1000:.3f} ± {r['stddev'] * 1000:.3f} |")
print()
ratio = lambda name: res[name]["median"] / res["bwrap"]["median"]
print(f"- airlock/bwrap paced (median): **{ratio('airlock'):.2f}**; re-read binary: **{ratio('airlock, re-read'):.2f}**")
EOF
  echo
fi

# ---- 6. peak RSS --------------------------------------------------------------------------------
# GNU time's %M is ru_maxrss of the waited-for children: the largest single process in the tree
# (airlock, its helpers, the sandbox init, the command), not their sum. Max over several runs.
peak_rss() {
  local max=0 kib
  for _ in $(seq "$rss_runs"); do
    # shellcheck disable=SC2086
    /usr/bin/time -o "$scratch/rss" -f '%M' $1 </dev/null >/dev/null 2>&1
    kib=$(tail -1 "$scratch/rss")
    [ "$kib" -gt "$max" ] && max=$kib
  done
  echo "$max"
}
echo "## peak RSS (KiB, max over $rss_runs runs; max over each command's process tree)"
echo
echo "| command | peak RSS KiB |"
echo "| --- | ---: |"
for name in plain bwrap airlock; do
  cmd_var="${name}_cmd"
  echo "| $name | $(peak_rss "${!cmd_var}") |"
done
