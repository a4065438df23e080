#!/usr/bin/env bash
# Egress-gate benchmark: through airlock's gate vs direct, in one run.
#   - throughput of a download (BENCH_BYTES, default 1 GiB) from a loopback server;
#   - connection setup latency: p50/p99 of BENCH_CONNECTS (default 1,000) connects;
#   - request/response latency: p50/p99 of BENCH_CONNECTS round trips of 100 bytes on one
#     connection (an echo);
#   - the supervisor's peak RSS with BENCH_CONCURRENT (default 1,000) connections open at once.
# The server runs on the host's 127.0.0.1; the sandbox reaches it as bench.test via --resolve.
set -euo pipefail
bytes=${BENCH_BYTES:-1073741824}
connects=${BENCH_CONNECTS:-1000}
concurrent=${BENCH_CONCURRENT:-1000}
cd "$(dirname "$(realpath "$0")")/.."
scripts/build.sh
airlock="$PWD/target/release/airlock"
python=/usr/bin/python3
scratch=$(mktemp -d "${TMPDIR:-/tmp}/airlock-egress-bench.XXXXXX")
chmod 755 "$scratch"
server_pid=
relay_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null
  [ -n "$relay_pid" ] && kill "$relay_pid" 2>/dev/null
  rm -rf "$scratch"
}
trap cleanup EXIT
mkdir "$scratch/ws"
port=$($python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# The server: "BYTES=<n>\n" -> n bytes of zeros (one word: two words and a wait would be
# taken for an HTTP/0.9 request that might carry headers); "ECHO\n" -> what it reads, back; anything
# else -> close at once.
$python - "$port" <<'PY' &
import socket, sys, threading
zeros = bytes(1 << 20)
def serve(c):
    try:
        line = c.makefile("rb").readline()
        if line.startswith(b"BYTES="):
            left = int(line[6:])
            while left > 0:
                n = c.send(zeros[: min(left, len(zeros))])
                left -= n
        elif line.startswith(b"ECHO"):
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            c.sendall(b"OK\n")  # nothing more was sent before this: the line's reader kept nothing
            while True:
                data = c.recv(65536)
                if not data: break
                c.sendall(data)
        c.close()
    except Exception:
        pass
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(4096)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
PY
server_pid=$!
# For reference, the least any relay does: a bare splice loop per direction, no checks at all
# (what a byte costs when it crosses the kernel's TCP twice on this machine).
relay_port=$($python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
$python - "$relay_port" "$port" <<'PY' &
import os, socket, sys, threading
def copy(a, b):
    r, w = os.pipe()
    while True:
        n = os.splice(a.fileno(), w, 1 << 20)
        if n == 0: break
        while n: n -= os.splice(r, b.fileno(), n)
    b.shutdown(socket.SHUT_WR)
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(64)
while True:
    c, _ = s.accept(); u = socket.create_connection(("127.0.0.1", int(sys.argv[2])))
    threading.Thread(target=copy, args=(c, u), daemon=True).start()
    threading.Thread(target=copy, args=(u, c), daemon=True).start()
PY
relay_pid=$!
sleep 0.5
cat > "$scratch/ws/client.py" <<'PY'
import socket, sys, time
host, port, what, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
if what == "download":
    s = socket.create_connection((host, port)); s.sendall(b"BYTES=%d\n" % n)
    got, start, buf = 0, time.perf_counter(), bytearray(1 << 20)
    while True:
        k = s.recv_into(buf)
        if not k: break
        got += k
    secs = time.perf_counter() - start
    print(f"{got / secs / (1 << 20):.0f}")
elif what == "connects":
    times = []
    addr = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)[0][4]
    for _ in range(n):
        s = socket.socket(); t = time.perf_counter(); s.connect(addr); times.append(time.perf_counter() - t); s.close()
    times.sort()
    print(f"{times[len(times)//2]*1e6:.0f} {times[int(len(times)*0.99)]*1e6:.0f}")
elif what == "echo":
    s = socket.create_connection((host, port)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b"ECHO\n"); s.recv(3)
    times = []
    for _ in range(n):
        t = time.perf_counter(); s.sendall(b"x" * 100); got = 0
        while got < 100: got += len(s.recv(100 - got))
        times.append(time.perf_counter() - t)
    times.sort()
    print(f"{times[len(times)//2]*1e6:.0f} {times[int(len(times)*0.99)]*1e6:.0f}")
elif what == "concurrent":
    socks = [socket.create_connection((host, port)) for _ in range(n)]
    time.sleep(1)
    print(len(socks))
PY
cat > "$scratch/profile.toml" <<EOF2
[network]
allow = ["bench.test:$port"]
[limits]
open_files = 8192
processes = 4096
EOF2
gated() {
  "$airlock" --state-dir "$scratch/state" run --profile-file "$scratch/profile.toml" \
    --resolve "bench.test=127.0.0.1" -w "$scratch/ws" -- $python "$scratch/ws/client.py" bench.test "$port" "$@"
}
direct() { $python "$scratch/ws/client.py" 127.0.0.1 "$port" "$@"; }

echo "# airlock egress-gate benchmark"
echo
echo "- machine: $(nproc) CPUs, kernel $(uname -r), uid $(id -u)"
echo
direct_mib=$(direct download "$bytes")
gated_mib=$(gated download "$bytes")
bare_mib=$($python "$scratch/ws/client.py" 127.0.0.1 "$relay_port" download "$bytes")
read -r d50 d99 <<<"$(direct connects "$connects")"
read -r g50 g99 <<<"$(gated connects "$connects")"
read -r de50 de99 <<<"$(direct echo "$connects")"
read -r ge50 ge99 <<<"$(gated echo "$connects")"
echo "| | direct | through the gate | ratio / added |"
echo "| --- | ---: | ---: | ---: |"
echo "| download of $bytes bytes, MiB/s | $direct_mib | $gated_mib | $($python -c "print(f'{$gated_mib/$direct_mib:.2f}')") |"
echo "| same through a bare splice relay (reference), MiB/s | $direct_mib | $bare_mib | $($python -c "print(f'{$bare_mib/$direct_mib:.2f}')") |"
echo "| connect p50, µs | $d50 | $g50 | +$((g50 - d50)) |"
echo "| connect p99, µs | $d99 | $g99 | +$((g99 - d99)) |"
echo "| round trip of 100 bytes p50, µs | $de50 | $ge50 | +$((ge50 - de50)) |"
echo "| round trip of 100 bytes p99, µs | $de99 | $ge99 | +$((ge99 - de99)) |"
echo
peak=$( { /usr/bin/time -f '%M' "$airlock" --state-dir "$scratch/state" run --profile-file "$scratch/profile.toml" \
  --resolve "bench.test=127.0.0.1" -w "$scratch/ws" -- $python "$scratch/ws/client.py" bench.test "$port" concurrent "$concurrent" >/dev/null; } 2>&1 | tail -1)
echo "- peak RSS of the largest process (the supervisor with its gate, or the client) with $concurrent connections open: $peak KiB"
