#!/usr/bin/env bash
# Where an API run's time goes, next to a CLI run's: bench/api_load.py's pairs (one API run of
# /bin/true, then one CLI run, in turn) under `perf record` of a few tracepoints (syscall entries
# and exits, process exec and exit: little overhead), then the median of each step.
#
#   API: client sends -> server has read the request -> server starts the worker (clone3) ->
#        worker exec'd -> worker's main (its first prctl) -> worker exits -> server's first read
#        after (the pipes' end) -> server writes the answer -> client has it
#   CLI: client starts it (clone3) -> exec'd -> exits -> client's wait4 returns
#
# Usage: bench/api_trace.sh [AIRLOCK_BINARY] (default: target/release/airlock, built)
# Environment: BENCH_PAIRS=N (default 300), BENCH_AUDIT_FSYNC (default 1). Needs root and perf.
set -euo pipefail
pairs=${BENCH_PAIRS:-300}
python=/usr/bin/python3
cd "$(dirname "$(realpath "$0")")/.."
load="$PWD/bench/api_load.py"
if [ $# -eq 0 ]; then
  scripts/build.sh
  airlock="$PWD/target/release/airlock"
else
  airlock=$(realpath "$1")
fi
command -v perf >/dev/null || { echo "missing: perf (Debian: apt-get install linux-perf)" >&2; exit 1; }
export AIRLOCK_AUDIT_FSYNC=${BENCH_AUDIT_FSYNC:-1}
scratch=$(mktemp -d "${TMPDIR:-/tmp}/airlock-api-trace.XXXXXX")
chmod 755 "$scratch"
server=
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null && wait "$server" 2>/dev/null; fi
  chmod -R u+rwx "$scratch" 2>/dev/null || true
  rm -rf "$scratch"
}
trap cleanup EXIT
ws="$scratch/workspace"
mkdir "$ws"
chmod 755 "$ws"
cd "$scratch"
if ! token=$("$airlock" --state-dir "$scratch/state" token create --role agent --workspace "$ws" 2>token.log | tail -1); then
  cat token.log >&2
  exit 1
fi
port=$($python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$airlock" --state-dir "$scratch/state" serve --listen "127.0.0.1:$port" \
  --requests-per-second 1000000 --runs-per-token 1000 2>serve.log &
server=$!
sleep 0.5
$python "$load" pairs 127.0.0.1 "$port" "$token" "$airlock" "$scratch/state" "$ws" 20 >/dev/null
events=syscalls:sys_enter_sendto,syscalls:sys_exit_recvfrom,syscalls:sys_enter_clone3
events+=,syscalls:sys_exit_clone3,syscalls:sys_enter_writev,syscalls:sys_exit_wait4
events+=,syscalls:sys_enter_read,syscalls:sys_enter_prctl,sched:sched_process_exec,sched:sched_process_exit
perf record -q -a -e "$events" -o perf.data -- \
  $python "$load" pairs 127.0.0.1 "$port" "$token" "$airlock" "$scratch/state" "$ws" "$pairs" >pairs.json 2>/dev/null
perf script -i perf.data -F comm,pid,tid,time,event,trace 2>/dev/null >events.txt

echo "# where a run's time goes: API vs CLI ($pairs pairs of /bin/true, medians, ms)"
echo
echo "- machine: $(nproc) CPUs, kernel $(uname -r), uid $(id -u), nice $(nice); load average $(cut -d' ' -f1-3 /proc/loadavg); AIRLOCK_AUDIT_FSYNC=$AIRLOCK_AUDIT_FSYNC"
echo "- binary: $airlock"
echo
$python - events.txt "$server" pairs.json <<'EOF'
import json, re, statistics, sys

server = int(sys.argv[2])
line_re = re.compile(r"\s*(\S.*?)\s+(\d+)/(\d+)\s+([\d.]+):\s+(\S+):\s*(.*)")
events = []
for line in open(sys.argv[1]):
    m = line_re.match(line)
    if m:
        comm, pid, tid, t, name, rest = m.groups()
        events.append((float(t), comm, int(pid), int(tid), name.split(":")[1], rest))
events.sort()

def value(rest):
    try:
        return int(rest.rsplit("0x", 1)[-1], 16)
    except ValueError:
        return -1

clone_at, started, execd, main, exited = {}, {}, {}, {}, {}
api, cli, request, after_exit = [], [], None, {}
for t, comm, pid, tid, name, rest in events:
    client = comm.startswith("python")
    if name == "sched_process_exit":
        m = re.search(r"pid=(\d+)", rest)
        if m:
            exited.setdefault(int(m.group(1)), t)
    elif name == "sched_process_exec":
        execd.setdefault(pid, t)
    elif name == "sys_enter_prctl":
        main.setdefault(pid, t)
    elif name == "sys_enter_clone3":
        clone_at[tid] = t
    elif name == "sys_exit_clone3" and tid in clone_at and 0 < value(rest) < 1 << 22:
        started[value(rest)] = (clone_at.pop(tid), pid)
        if pid == server and request is not None:
            request["worker"] = value(rest)
    if client and name == "sys_enter_sendto":
        request = {"send": t}
    elif client and name == "sys_exit_recvfrom" and request and "answer" in request and value(rest) > 0:
        request["received"] = t
        api.append(request)
        request = None
    elif client and name == "sys_exit_wait4" and value(rest) in started:
        cli.append({"child": value(rest), "waited": t})
    elif pid == server and request is not None:
        if name == "sys_exit_recvfrom" and value(rest) > 0 and "read" not in request:
            request["read"] = t
        elif name == "sys_enter_read" and request.get("worker") in exited and "eof" not in request:
            request["eof"] = t
        elif name == "sys_enter_writev" and "worker" in request:
            request["answer"] = t

def median(values):
    values = [v for v in values if v is not None]
    return f"{statistics.median(values) * 1e3:.3f}" if values else "–"

def span(a, b):
    return None if a is None or b is None else b - a

runs = [r for r in api if {"read", "worker", "eof", "answer"} <= r.keys() and r["worker"] in exited]
steps = [
    ("client sends -> server has read the request", lambda r: span(r["send"], r["read"])),
    ("-> server starts the worker (clone3)", lambda r: span(r["read"], started[r["worker"]][0])),
    ("-> worker exec'd", lambda r: span(started[r["worker"]][0], execd.get(r["worker"]))),
    ("-> worker's main", lambda r: span(execd.get(r["worker"]), main.get(r["worker"]))),
    ("-> worker exits", lambda r: span(main.get(r["worker"]), exited[r["worker"]])),
    ("-> server's first read after (end of the pipes)", lambda r: span(exited[r["worker"]], r["eof"])),
    ("-> server writes the answer", lambda r: span(r["eof"], r["answer"])),
    ("-> client has it", lambda r: span(r["answer"], r["received"])),
    ("total", lambda r: span(r["send"], r["received"])),
    ("(worker: clone3 -> exit)", lambda r: span(started[r["worker"]][0], exited[r["worker"]])),
    ("(the rest: total - worker)", lambda r: span(r["send"], r["received"])
     - span(started[r["worker"]][0], exited[r["worker"]])),
]
print(f"| API step ({len(runs)} runs) | median ms |")
print("| --- | ---: |")
for name, step in steps:
    print(f"| {name} | {median(step(r) for r in runs)} |")
print()
runs = [c for c in cli if c["child"] in exited]
steps = [
    ("client starts it (clone3) -> exec'd", lambda c: span(started[c["child"]][0], execd.get(c["child"]))),
    ("-> exits", lambda c: span(execd.get(c["child"]), exited[c["child"]])),
    ("-> client's wait4 returns", lambda c: span(exited[c["child"]], c["waited"])),
    ("total", lambda c: span(started[c["child"]][0], c["waited"])),
    ("(CLI: clone3 -> exit)", lambda c: span(started[c["child"]][0], exited[c["child"]])),
    ("(the rest: total - CLI)", lambda c: c["waited"] - exited[c["child"]]),
]
print(f"| CLI step ({len(runs)} runs) | median ms |")
print("| --- | ---: |")
for name, step in steps:
    print(f"| {name} | {median(step(c) for c in runs)} |")
print()
measured = json.load(open(sys.argv[3]))
print(f"- as the client measured them: API p50 {median(measured['api'])} ms, CLI p50 {median(measured['cli'])} ms")
EOF
