#!/usr/bin/env bash
# Session benchmark: what a session costs on a big workspace, next to what the alternatives cost.
#
# Builds a synthetic workspace of BENCH_FILES files (default 100,000: 1,000 directories of 100
# files of ~100 bytes, committed to git) and a 10-file one, then times with hyperfine:
#   session new      on the 10-file and on the big workspace (should cost the same: nothing copied)
#   cp -a            of the big workspace (what a "throwaway copy" costs)
#   run              a command that edits 10 files, in a session over the big workspace
#   diff --stat      of that session, and of a 10-file session over the small workspace
#   git status       on the big workspace (what noticing changes costs without a layer)
#   apply            of the 10 changed files (each timed run starts from a revert)
#
# Usage: bench/sessions.sh           (as root it installs hyperfine and git if missing)
# Environment: BENCH_FILES=N (default 100000), BENCH_RUNS=N (default 20)
set -euo pipefail

files=${BENCH_FILES:-100000}
runs=${BENCH_RUNS:-20}
per_dir=100
dirs=$(( (files + per_dir - 1) / per_dir ))

missing=()
command -v hyperfine >/dev/null || missing+=(hyperfine)
command -v git >/dev/null || missing+=(git)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "missing: ${missing[*]}; install with: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi

cd "$(dirname "$(realpath "$0")")/.."
scripts/build.sh
airlock="$PWD/target/release/airlock"

scratch=$(mktemp -d "${TMPDIR:-/tmp}/airlock-sessions-bench.XXXXXX")
chmod 755 "$scratch"
cleanup() { chmod -R u+rwx "$scratch" 2>/dev/null || true; rm -rf "$scratch"; }
trap cleanup EXIT
export AIRLOCK_STATE_DIR="$scratch/state"
big="$scratch/big"
small="$scratch/small"

# ---- the workspaces ------------------------------------------------------------------------------
echo "building a workspace of $files files…" >&2
python3 - "$big" "$dirs" "$per_dir" "$files" <<'EOF'
import os, sys
root, dirs, per_dir, files = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
line = b"the quick brown fox jumps over the lazy dog 0123456789\n"
n = 0
for d in range(dirs):
    path = os.path.join(root, f"d{d:04}")
    os.makedirs(path)
    for f in range(per_dir):
        if n == files:
            break
        with open(os.path.join(path, f"f{f:03}.txt"), "wb") as out:
            out.write(line * 2)
        n += 1
EOF
git -C "$big" init -q
git -C "$big" -c user.name=bench -c user.email=bench@example.invalid add -A
git -C "$big" -c user.name=bench -c user.email=bench@example.invalid commit -qm base
mkdir -p "$small"
for i in $(seq 0 9); do echo "small $i" > "$small/f$i.txt"; done
chmod -R a+rX "$scratch"

edit10='for i in 0 1 2 3 4 5 6 7 8 9; do echo edited >> d000$i/f000.txt; done'
edit10_small='for i in 0 1 2 3 4 5 6 7 8 9; do echo edited >> f$i.txt; done'
big_session=$("$airlock" session new -w "$big" --name big)
small_session=$("$airlock" session new -w "$small" --name small)
"$airlock" run --session big -- sh -c "$edit10" >/dev/null
"$airlock" run --session small -- sh -c "$edit10_small" >/dev/null

json="$scratch/hyperfine.json"
hyperfine -N --style basic --time-unit millisecond --warmup 2 --runs "$runs" --export-json "$json" \
  -n "session new (10 files)" "$airlock session new -w $small" \
  -n "session new ($files files)" "$airlock session new -w $big" \
  -n "run editing 10 files" "$airlock run --session big -- sh -c '$edit10'" \
  -n "diff --stat (10 changed, 10-file workspace)" "$airlock diff --stat small" \
  -n "diff --stat (10 changed, $files-file workspace)" "$airlock diff --stat big" \
  -n "git status ($files files)" "git -C $big status --porcelain" \
  >"$scratch/hyperfine.out"
copy_json="$scratch/copy.json"
hyperfine -N --style basic --time-unit millisecond --runs 3 --export-json "$copy_json" \
  --prepare "rm -rf $scratch/copy" \
  -n "cp -a ($files files)" "cp -a $big $scratch/copy" >"$scratch/copy.out"
apply_json="$scratch/apply.json"
hyperfine -N --style basic --time-unit millisecond --runs "$runs" --export-json "$apply_json" \
  --prepare "sh -c '$airlock revert big >/dev/null 2>&1 || true'" \
  -n "apply (10 files)" "$airlock apply big" >"$scratch/apply.out"

echo "# airlock session benchmark"
echo
echo "- machine: $(nproc) CPUs, kernel $(uname -r), running as uid $(id -u)"
echo "- workspace: $files files in $dirs directories, committed to git; sessions $big_session, $small_session"
echo
python3 - "$json" "$copy_json" "$apply_json" "$files" <<'EOF'
import json, sys
rows = []
for path in sys.argv[1:4]:
    rows += json.load(open(path))["results"]
res = {r["command"]: r["median"] * 1000 for r in rows}
files = sys.argv[4]
print("| operation | median ms |")
print("| --- | ---: |")
for name, ms in res.items():
    print(f"| {name} | {ms:.1f} |")
print()
new_small, new_big = res["session new (10 files)"], res[f"session new ({files} files)"]
copy = res[f"cp -a ({files} files)"]
diff_small = res["diff --stat (10 changed, 10-file workspace)"]
diff_big = res[f"diff --stat (10 changed, {files}-file workspace)"]
status = res[f"git status ({files} files)"]
print(f"- session new, {files} files / 10 files: **{new_big / new_small:.2f}**")
print(f"- cp -a / session new ({files} files): **{copy / new_big:.0f}x**")
print(f"- diff --stat, {files}-file / 10-file workspace: **{diff_big / diff_small:.2f}**")
print(f"- git status / diff --stat ({files} files): **{status / diff_big:.1f}x**")
EOF
