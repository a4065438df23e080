#!/usr/bin/env bash
# Secret-injection benchmark (issue 17): small HTTPS requests direct, through the gate's plain
# relay (TLS passed through untouched), and through the injecting path (TLS terminated with the
# run's CA, Host checked, the header set, a second TLS session upstream), in one run.
#   - requests/s and p50/p99 latency of BENCH_REQUESTS (default 2,000) GETs on one kept-alive
#     HTTP/1.1 connection;
#   - p50/p99 of BENCH_CONNECTS (default 200) requests each on a new connection (TLS handshakes
#     included: two of them on the injecting path).
# The server is Python's on the host's 127.0.0.1 with a test CA of its own; the sandbox reaches it
# as bench.test via --resolve, and airlock trusts that CA for upstreams through SSL_CERT_FILE.
set -euo pipefail
requests=${BENCH_REQUESTS:-2000}
connects=${BENCH_CONNECTS:-200}
cd "$(dirname "$(realpath "$0")")/.."
scripts/build.sh
airlock="$PWD/target/release/airlock"
python=/usr/bin/python3
scratch=$(mktemp -d "${TMPDIR:-/tmp}/airlock-inject-bench.XXXXXX")
chmod 755 "$scratch"
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null
  rm -rf "$scratch"
}
trap cleanup EXIT
mkdir "$scratch/ws" "$scratch/pki"
(
  cd "$scratch/pki"
  ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
  openssl req -x509 -days 2 -subj "/CN=bench CA" "${ec[@]}" -keyout ca.key -out ca.pem \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
  openssl req -subj /CN=bench.test "${ec[@]}" -keyout key.pem -out req.csr \
    -addext subjectAltName=DNS:bench.test 2>/dev/null
  openssl x509 -req -in req.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -out cert.pem \
    -copy_extensions copy 2>/dev/null
)
cp "$scratch/pki/ca.pem" "$scratch/ws/ca.pem"
port=$($python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# The server: HTTP/1.1 keep-alive, answers every GET with 2 bytes, in one write with
# TCP_NODELAY (a head and a body written apart meet the client's delayed ACK: 40 ms a request).
$python - "$port" "$scratch/pki" <<'PY' &
import http.server, socket, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    def do_GET(self):
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    def log_message(self, *a): pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[2] + "/cert.pem", sys.argv[2] + "/key.pem")
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
PY
server_pid=$!
sleep 0.5
cat > "$scratch/ws/client.py" <<'PY'
import http.client, os, socket, ssl, sys, time
host, port, what, n, cafile = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
# "default": the sandbox's own trust store (where airlock put its CA); otherwise the named file.
ctx = ssl.create_default_context() if cafile == "default" else ssl.create_default_context(cafile=cafile)
token = os.environ.get("API_TOKEN", "none")
def conn():
    c = http.client.HTTPSConnection("bench.test", port, context=ctx)
    if host != "bench.test":  # direct: connect to the address, verify the name
        c._create_connection = lambda addr, *a, **k: socket.create_connection((host, port))
    return c
def get(c):
    c.request("GET", "/", headers={"Authorization": "Bearer " + token})
    r = c.getresponse(); r.read()
    assert r.status == 200, r.status
times = []
if what == "keepalive":
    c = conn(); get(c)
    start = time.perf_counter()
    for _ in range(n):
        t = time.perf_counter(); get(c); times.append(time.perf_counter() - t)
    total = time.perf_counter() - start
else:
    start = time.perf_counter()
    for _ in range(n):
        t = time.perf_counter(); c = conn(); get(c); c.close(); times.append(time.perf_counter() - t)
    total = time.perf_counter() - start
times.sort()
print(f"{n / total:.0f} {times[len(times)//2]*1e6:.0f} {times[int(len(times)*0.99)]*1e6:.0f}")
PY
cat > "$scratch/relay.toml" <<EOF2
[network]
allow = ["bench.test:$port"]
EOF2
cat > "$scratch/inject.toml" <<EOF2
[network]
allow = ["bench.test:$port"]

[[secret]]
name = "API_TOKEN"
from = { env = "BENCH_SECRET" }
hosts = ["bench.test"]
inject = { header = "Authorization", format = "Bearer {}" }
EOF2
export BENCH_SECRET=bench-secret-value-0123456789
sandboxed() {
  local profile=$1 cafile=$2
  shift 2
  SSL_CERT_FILE="$scratch/pki/ca.pem" "$airlock" --state-dir "$scratch/state" run --profile-file "$profile" \
    --resolve "bench.test=127.0.0.1" -w "$scratch/ws" -- $python "$scratch/ws/client.py" bench.test "$port" "$@" "$cafile"
}
direct() { $python "$scratch/ws/client.py" 127.0.0.1 "$port" "$@" "$scratch/pki/ca.pem"; }
relay() { sandboxed "$scratch/relay.toml" "$scratch/ws/ca.pem" "$@"; }
inject() { sandboxed "$scratch/inject.toml" default "$@"; }

echo "# airlock secret-injection benchmark"
echo
echo "- machine: $(nproc) CPUs, kernel $(uname -r), uid $(id -u); Python's HTTPS server on loopback"
echo
read -r dk dk50 dk99 <<<"$(direct keepalive "$requests")"
read -r rk rk50 rk99 <<<"$(relay keepalive "$requests")"
read -r ik ik50 ik99 <<<"$(inject keepalive "$requests")"
read -r dc dc50 dc99 <<<"$(direct connects "$connects")"
read -r rc rc50 rc99 <<<"$(relay connects "$connects")"
read -r ic ic50 ic99 <<<"$(inject connects "$connects")"
ratio() { $python -c "print(f'{$1/$2:.2f}')"; }
echo "| | direct | plain relay | injecting | injecting / direct | injecting / relay |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
echo "| kept-alive GETs, requests/s | $dk | $rk | $ik | $(ratio "$ik" "$dk") | $(ratio "$ik" "$rk") |"
echo "| kept-alive GET p50, µs | $dk50 | $rk50 | $ik50 | +$((ik50 - dk50)) | +$((ik50 - rk50)) |"
echo "| kept-alive GET p99, µs | $dk99 | $rk99 | $ik99 | +$((ik99 - dk99)) | +$((ik99 - rk99)) |"
echo "| new connection + GET, requests/s | $dc | $rc | $ic | $(ratio "$ic" "$dc") | $(ratio "$ic" "$rc") |"
echo "| new connection + GET p50, µs | $dc50 | $rc50 | $ic50 | +$((ic50 - dc50)) | +$((ic50 - rc50)) |"
echo "| new connection + GET p99, µs | $dc99 | $rc99 | $ic99 | +$((ic99 - dc99)) | +$((ic99 - rc99)) |"
