#!/usr/bin/env bash
# The audit log's export ([audit] export = ["stdout", "otlp"]) with a receiver that decodes what
# airlock sends with the official OTLP messages (opentelemetry-proto from PyPI, pinned):
# scripts/otlp_receiver.py. `airlock serve` exports; runs are made with the CLI, through the API
# and in a session that is then applied, one with a connection the gate refuses. Checked:
#   - every local record arrives, in order, each body the stored line byte for byte, with its
#     seq/hash/prev, OCSF class and severity beside it, under a resource that names the log;
#     `airlock log verify --from` finds the received copy intact;
#   - the receiver down for a while: runs go on and complete; the records written meanwhile
#     arrive once it is back, in order, none lost; its first answers 503 (Retry-After) and are
#     retried; it refuses a request without the configured Authorization header (never sent);
#   - the server restarted, with runs made while it was down: export catches up from its cursor;
#   - stdout: serve's stdout holds the same records as JSON lines, verifiable by `log verify --from`;
#   - `airlock log export` (one shot, its own cursor) and a config that names an unknown
#     destination, which stops the server at start.
# The log rolls every 2 KiB here (AIRLOCK_AUDIT_SEGMENT_SIZE), so every check above is also one
# of export across segment rolls: the local log compared is every sealed segment, then the open
# one.
#
#   scripts/test-otlp.sh     # ~30 s; the receiver's venv is cached in ${AIRLOCK_CI_CACHE:-~/.cache/airlock-ci}
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${AIRLOCK_CI_CACHE:-$HOME/.cache/airlock-ci}
python=${PYTHON:-python3}
# The newest opentelemetry-proto on PyPI when this was written, and the protobuf it resolved to.
pins=("opentelemetry-proto==1.45.2" "protobuf==7.36.2")

# shellcheck source=scripts/lib/clients.sh
. scripts/lib/clients.sh
venv="$cache/otlp-proto-1.45.2"
pinned_venv "$venv" opentelemetry.proto.collector.logs.v1.logs_service_pb2 "${pins[@]}"
airlock_binary

work=$(mktemp -d /tmp/airlock-otlp-XXXXXX)
chmod 755 "$work"
receiver=
stop_receiver() {
  if [ -n "$receiver" ]; then
    kill "$receiver" 2>/dev/null || true
    wait "$receiver" 2>/dev/null || true
  fi
  receiver=
}
trap 'stop_server; stop_receiver; rm -rf "$work"' EXIT

fail() {
  echo "test-otlp: FAILED: $*" >&2
  for f in serve.err receiver.log; do
    [ -f "$work/$f" ] && { echo "--- $f" >&2; tail -20 "$work/$f" >&2; }
  done
  exit 1
}

free_port() {
  "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

state="$work/state"
workspace="$work/workspace"
mkdir -p "$workspace"
echo seed >"$workspace/seed.txt"
port=$(free_port)
token="otlp-test-$RANDOM$RANDOM"

start_receiver() {
  "$venv/bin/python" scripts/otlp_receiver.py --port "$port" --records "$work/received.jsonl" \
    --meta "$work/meta.jsonl" --token "$token" "$@" >>"$work/receiver.log" 2>&1 &
  receiver=$!
  for _ in $(seq 100); do
    (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return
    sleep 0.1
  done
  fail "the receiver did not start"
}

cat >"$work/config.toml" <<EOF
[audit]
export = ["stdout", "otlp"]

[audit.otlp]
endpoint = "http://127.0.0.1:$port/v1/logs"
headers = { authorization = { env = "AIRLOCK_TEST_OTLP_AUTH" } }
EOF
export AIRLOCK_TEST_OTLP_AUTH="Bearer $token"
# A segment every few records: export across rolls, throughout.
export AIRLOCK_AUDIT_SEGMENT_SIZE=2K
export OTEL_RESOURCE_ATTRIBUTES="k8s.pod.name=otlp-test-pod"

start_serve() {
  local api_port started
  api_port=$(free_port)
  started=$(grep -c "serving on" "$work/serve.err" 2>/dev/null || true)
  "$airlock" --state-dir "$state" serve --config "$work/config.toml" --listen "127.0.0.1:$api_port" \
    >>"$work/serve.out" 2>>"$work/serve.err" &
  server=$!
  for _ in $(seq 100); do
    [ "$(grep -c "serving on" "$work/serve.err" 2>/dev/null || true)" -gt "${started:-0}" ] && break
    sleep 0.1
  done
  [ "$(grep -c "serving on" "$work/serve.err")" -gt "${started:-0}" ] || fail "airlock serve did not start"
  api="http://127.0.0.1:$api_port"
}

run() {
  "$airlock" --state-dir "$state" run --workspace "$workspace" "$@" >/dev/null
}

# The local log of state directory $1, as stored: its sealed segments, oldest first (their names
# are their first seq in 20 digits, so they sort), then the open segment.
local_log() {
  local sealed=("$1"/audit/*.log)
  [ -e "${sealed[0]}" ] || sealed=()
  cat "${sealed[@]}" "$1/audit.log"
}

# Does FILE hold every record of the local log, in order, each the stored line? Records sent
# again (at-least-once) may repeat, identical; anything else is a failure. Prints why not.
holds_all() {
  local_log "$state" >"$work/local.jsonl"
  "$python" - "$work/local.jsonl" "$1" <<'EOF'
import json, sys
local = open(sys.argv[1], "rb").read().decode().splitlines()
got, seen = [], {}
for line in open(sys.argv[2], "rb").read().decode().splitlines():
    try:
        record = json.loads(line)
        seq = record["seq"]
    except (ValueError, KeyError, TypeError):
        continue  # not a record (another line of serve's stdout)
    if seq in seen:
        if seen[seq] != line:
            sys.exit(f"record {seq} came twice, different")
        continue
    if got and seq != json.loads(got[-1])["seq"] + 1:
        sys.exit(f"record {seq} came after record {json.loads(got[-1])['seq']}")
    seen[seq] = line
    got.append(line)
if got != local[: len(got)]:
    sys.exit("what came is not the local log's lines, byte for byte")
if len(got) < len(local):
    sys.exit(f"{len(got)} of {len(local)} records came")
EOF
}

wait_for_all() {
  local why
  for _ in $(seq 150); do
    why=$(holds_all "$1" 2>&1) && return
    sleep 0.2
  done
  fail "$1: $why"
}

echo "== the receiver up: runs from the CLI, the API and a session, each record exported"
start_receiver
start_serve
run -- /bin/echo one
run -- /bin/sh -c 'exit 3' || true
printf '[network]\nallow = ["example.invalid"]\n' >"$work/net.toml"
run --profile-file "$work/net.toml" -- /usr/bin/python3 -c \
  'import socket; socket.create_connection(("192.0.2.1", 80), timeout=2)' 2>/dev/null || true
agent=$("$airlock" --state-dir "$state" token create --role agent --workspace "$workspace" --name otlp 2>/dev/null | tail -1)
curl -fsS -H "Authorization: Bearer $agent" -H 'Content-Type: application/json' \
  -d "{\"command\": \"echo from the API\", \"workspace\": \"$workspace\"}" "$api/v1/runs" >/dev/null ||
  fail "a run through the API"
"$airlock" --state-dir "$state" session new --workspace "$workspace" --name applied >/dev/null
"$airlock" --state-dir "$state" run --session applied -- /bin/sh -c 'echo new >new.txt' >/dev/null
"$airlock" --state-dir "$state" apply applied >/dev/null 2>&1 || fail "apply"
wait_for_all "$work/received.jsonl"
"$airlock" log verify --from "$work/received.jsonl" >/dev/null || fail "the received copy does not verify"
local_log "$state" >"$work/local.jsonl"
"$python" - "$work/meta.jsonl" "$work/local.jsonl" <<'EOF' || fail "what came beside the records"
import json, sys
meta = [json.loads(line) for line in open(sys.argv[1])]
local = [json.loads(line) for line in open(sys.argv[2])]
by_action = {}
for m, record in zip(meta, local):
    a = m["attributes"]
    assert a["airlock.seq"] == record["seq"], (a, record["seq"])
    assert a["airlock.hash"] == record["hash"] and a["airlock.prev"] == record["prev"], a
    assert a["airlock.action"] == record["action"] and m["event_name"] == "airlock." + record["action"], m
    assert m["scope"] == "airlock.audit" and m["time_unix_nano"] > 0, m
    assert m["resource"]["service.name"] == "airlock", m["resource"]
    assert m["resource"]["k8s.pod.name"] == "otlp-test-pod", m["resource"]
    assert m["resource"]["airlock.audit_log"].endswith("/state/audit.log"), m["resource"]
    by_action.setdefault(record["action"], []).append((m, record))
def ocsf(action, pick=lambda m, r: True):
    found = [m["attributes"] for m, r in by_action.get(action, []) if pick(m, r)]
    assert found, f"no {action} record"
    a = found[0]
    return (a.get("ocsf.class_uid"), a.get("ocsf.activity_id"), a.get("ocsf.status_id"))
assert ocsf("run.intent") == (1007, 1, 1), ocsf("run.intent")
assert ocsf("run.result") == (1007, 2, 1), ocsf("run.result")
assert ocsf("apply.result") == (1001, 3, 1), ocsf("apply.result")
refused = ocsf("net.connect", lambda m, r: r.get("allowed") is False)
assert refused == (4001, 5, 2), refused
warn = [m for m, r in by_action["net.connect"] if r.get("allowed") is False][0]
assert (warn["severity_number"], warn["severity_text"]) == (13, "WARN"), warn
assert "ocsf.class_uid" not in by_action["session.create"][0][0]["attributes"]
api = [r for m, r in by_action["run.intent"] if r.get("by", {}).get("token")]
assert api, "no run of the API's token"
EOF
echo "   $(wc -l <"$work/received.jsonl") records received, intact; OCSF classes as documented"

echo "== the receiver down: runs go on; once it is back (503 twice first), the records come"
stop_receiver
for i in 1 2 3; do
  run -- /bin/echo "while down $i" || fail "a run while the receiver was down"
done
for _ in $(seq 150); do
  grep -q "export to otlp: cannot connect" "$work/serve.err" && break
  sleep 0.2
done
grep -q "export to otlp: cannot connect" "$work/serve.err" || fail "the exporter's trouble was not said on stderr (in 30 s)"
start_receiver --fail 2
wait_for_all "$work/received.jsonl"
[ "$(grep -c '"status": 503' "$work/receiver.log")" = 2 ] || fail "the receiver answered 503 other than twice"
grep -q "export to otlp: delivering again" "$work/serve.err" || fail "the recovery was not said"
"$airlock" log verify --from "$work/received.jsonl" >/dev/null || fail "the copy after the outage does not verify"
echo "   $(wc -l <"$work/received.jsonl") records received after the outage, in order, none lost"

echo "== every request carried the configured Authorization header (the receiver refuses one without)"
grep -q '"status": 401' "$work/receiver.log" && fail "airlock sent a request without its Authorization header"

echo "== the server restarted, with runs made while it was down: export catches up from its cursor"
stop_server
run -- /bin/echo "no server 1"
run -- /bin/echo "no server 2"
start_serve
wait_for_all "$work/received.jsonl"
"$airlock" log verify --from "$work/received.jsonl" >/dev/null || fail "the copy after the restart does not verify"

echo "== stdout: the same records, one JSON line each, verifiable"
wait_for_all "$work/serve.out"
"$airlock" log verify --from "$work/serve.out" || fail "serve's stdout does not verify"
stop_server
grep -q "exporting the audit log to stdout and otlp" "$work/serve.err" || fail "serve did not say it exports"

echo "== airlock log export: one shot, its own cursor, to a file through stdout"
printf '[audit]\nexport = ["stdout"]\n' >"$work/stdout.toml"
state2="$work/state2"
"$airlock" --state-dir "$state2" run --workspace "$workspace" -- /bin/true
"$airlock" --state-dir "$state2" log export --config "$work/stdout.toml" >"$work/exported.jsonl" 2>"$work/export.err" ||
  fail "log export: $(cat "$work/export.err")"
"$airlock" --state-dir "$state2" run --workspace "$workspace" -- /bin/true
"$airlock" --state-dir "$state2" log export --config "$work/stdout.toml" >>"$work/exported.jsonl" 2>"$work/export.err"
local_log "$state2" | cmp -s "$work/exported.jsonl" - || fail "two one-shot exports are not the log, once each"

sealed=$(find "$state/audit" -name '*.log' | wc -l)
[ "$sealed" -ge 5 ] || fail "the log rolled only $sealed times: no test of export across rolls"
echo "   the log exported rolled into $sealed sealed segments meanwhile; none lost a record"
"$airlock" --state-dir "$state" log verify >/dev/null || fail "the local log does not verify across its segments"

echo "== a config naming an unknown destination stops the server at start"
printf '[audit]\nexport = ["stdout", "splunk"]\n' >"$work/bad.toml"
if "$airlock" --state-dir "$state" serve --config "$work/bad.toml" --listen "127.0.0.1:$(free_port)" 2>"$work/bad.err"; then
  fail "serve started with an unknown destination"
fi
grep -q "bad.toml:2:21: unknown export destination \"splunk\"" "$work/bad.err" || fail "the error: $(cat "$work/bad.err")"
echo "test-otlp: all passed"
