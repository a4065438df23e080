#!/usr/bin/env bash
# Smoke test of airlock's n8n workflow (docs/n8n/) against a stand-in for `airlock serve`: a real
# n8n, installed by scripts/n8n-install.sh, imports the credential and the workflow, runs the
# workflow with `n8n execute`, and the reply's stdout must reach the node after the HTTP request;
# then with a wrong token the execution must fail and carry the server's 401 message. All traffic
# stays on 127.0.0.1. Written to be the template of the real test against `airlock serve`.
#
# Facts it rests on (n8n 2.40.7, Node 24.22.3, checked 2026-12-02 on a 2-core machine that other
# builds kept busy, so the times are upper bounds; the lower figures are from quieter moments):
# - Install: see scripts/n8n-install.sh. The first time 7 to 13 min (npm ci 4 to 9 min with an
#   empty npm cache, the sqlite3 build 2.5 to 4 min), 2.8 GB in the cache plus ~750 MB in npm's own
#   cache (~/.npm); afterwards 0.3 s.
# - Every n8n command is a fresh process that loads all of n8n (~25 s of CPU for this script's
#   five). The first command on a new N8N_USER_FOLDER also creates its SQLite database (~300
#   migrations, listed on stdout). Measured: import:credentials 8-17 s (the first), 7 s (later),
#   import:workflow 4-14 s, execute 4-15 s; this whole script 45-70 s.
# - Quiet and fast: N8N_DIAGNOSTICS_ENABLED=false (otherwise each command spends ~3 s failing to
#   reach n8n's telemetry server and prints stack traces), N8N_VERSION_NOTIFICATIONS_ENABLED=false,
#   N8N_TEMPLATES_ENABLED=false; the install's wrapper sets these three unless the caller does.
# - Task runners: `n8n execute` always starts a task broker, on port 5679 unless told otherwise, and
#   exits 1 if that port is taken ("n8n Task Broker's port 5679 is already in use": two executes at
#   once collide; seen), and by default spawns a JavaScript runner process (`node` from PATH, hence
#   the wrapper's PATH) and tries a Python one. Only the Code node needs a runner: it works so, but
#   an execute with one took 15 s against 7 s. This workflow uses a Set node instead, so:
#   N8N_RUNNERS_MODE=external (no runner processes), N8N_RUNNERS_AUTH_TOKEN=<anything> (external
#   mode requires one), N8N_RUNNERS_BROKER_PORT=0 (the broker listens on a free port; nothing
#   connects to it). A Code node under these settings fails "Task request timed out" after
#   N8N_RUNNERS_TASK_REQUEST_TIMEOUT (60 s).
# - n8n's expressions ({{ $json.stdout }}) run in isolated-vm by default; its prebuilt binary for
#   Node 24 loads without a build.
# - Credentials: `n8n import:credentials` takes plain data: a credential whose "data" is a JSON
#   object is encrypted on import with the instance's key, which n8n generates on first use into
#   $N8N_USER_FOLDER/.n8n/config; no N8N_ENCRYPTION_KEY is needed. Importing a credential with an
#   id that exists replaces it (so the token can be changed between executions).
# - Workflow ids are kept from the file (at most 21 characters); `n8n execute --id ID`.
# - Output of `n8n execute --rawOutput`: everything goes to stdout (n8n's logger; stderr stays
#   empty): a few log lines, then the execution pretty-printed as JSON from a line "{" to a line
#   "}" (without --rawOutput, "Execution was successful:" and a line of "=" come before it). The
#   JSON is printed at log level info: N8N_LOG_LEVEL=warn would hide it.
#   Success: exit status 0, .status "success", each node's items in
#   .data.resultData.runData[NODE][0].data.main[0][*].json.
#   An HTTP node that fails: exit status 1; log lines with the error first ("Authorization failed -
#   please check your credentials", `401 - "<body>"`, a stack), then "Execution was NOT
#   successful", the execution JSON with .status "error", and .data.resultData.error holding
#   .name "NodeApiError", .httpCode "401" (a string), .message n8n's own text, .description the
#   server's JSON "message" field, .messages[0] `401 - "<the raw body>"`, .node.name the HTTP node;
#   .data.resultData.lastNodeExecuted is the HTTP node and the next node has no runData. Then the
#   error again as text. A 403: .httpCode "403", .message "Forbidden - perhaps check your
#   credentials?", .description again the server's message. Nothing listening: .httpCode
#   "ECONNREFUSED", .message "The service refused the connection - perhaps it is offline".
set -euo pipefail
cd "$(dirname "$0")/.."
n8n=$(scripts/n8n-install.sh | tail -n 1)
work=$(mktemp -d "${TMPDIR:-/tmp}/airlock-n8n-smoke.XXXXXX")
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

export N8N_USER_FOLDER="$work/n8n-home"
export N8N_DIAGNOSTICS_ENABLED=false N8N_VERSION_NOTIFICATIONS_ENABLED=false N8N_TEMPLATES_ENABLED=false
export N8N_RUNNERS_MODE=external N8N_RUNNERS_AUTH_TOKEN=no-runner-connects N8N_RUNNERS_BROKER_PORT=0
mkdir -p "$N8N_USER_FOLDER"
token=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
workflow_id=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["id"])' docs/n8n/airlock-run.json)

# A stand-in for `airlock serve` with the same contract: POST /v1/runs {"command": "..."} with
# "Authorization: Bearer TOKEN" answers {"exit_code", "stdout", "stderr"}; errors are JSON
# {"code", "message"}. It runs nothing: `echo WORDS` gives "WORDS\n". Each request is logged.
cat >"$work/fake-airlock.py" <<'EOF'
import json, os, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

token, port_file, request_log = sys.argv[1:4]

class Handler(BaseHTTPRequestHandler):
    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
        with open(request_log, "a") as log:
            log.write(json.dumps({"path": self.path, "authorization": self.headers.get("Authorization"),
                                  "content_type": self.headers.get("Content-Type"), "body": body}) + "\n")
        if self.headers.get("Authorization") != "Bearer " + token:
            return self.reply(401, {"code": "unauthorized", "message": "fake airlock: wrong or missing bearer token"})
        if self.path != "/v1/runs":
            return self.reply(404, {"code": "not_found", "message": "fake airlock: no " + self.path})
        command = json.loads(body)["command"]
        stdout = command[len("echo "):] + "\n" if command.startswith("echo ") else ""
        self.reply(200, {"exit_code": 0, "stdout": stdout, "stderr": "", "duration_ms": 1})

    def log_message(self, *args):
        pass

server = HTTPServer(("127.0.0.1", 0), Handler)
with open(port_file + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(port_file + ".tmp", port_file)
server.serve_forever()
EOF
python3 "$work/fake-airlock.py" "$token" "$work/port" "$work/requests.log" &
server_pid=$!
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.1; done
[ -s "$work/port" ] || { echo "n8n-smoke: the fake airlock server did not start" >&2; exit 1; }
url="http://127.0.0.1:$(cat "$work/port")"

# Fills the templates' placeholders inside JSON strings, so any value (quotes, backslashes,
# newlines in a command) stays valid JSON: fill TEMPLATE OUT NAME=VALUE...
fill() {
  python3 - "$@" <<'EOF'
import json, sys
template, out, pairs = sys.argv[1], sys.argv[2], [a.split("=", 1) for a in sys.argv[3:]]
def walk(v):
    if isinstance(v, str):
        for name, value in pairs:
            v = v.replace("__" + name + "__", value)
        return v
    if isinstance(v, list):
        return [walk(x) for x in v]
    if isinstance(v, dict):
        return {k: walk(x) for k, x in v.items()}
    return v
json.dump(walk(json.load(open(template))), open(out, "w"), indent=2)
EOF
}
fill docs/n8n/airlock-run.json "$work/workflow.json" "AIRLOCK_URL=$url" "AIRLOCK_COMMAND=echo hi"
fill docs/n8n/airlock-credential.json "$work/credential.json" "AIRLOCK_TOKEN=$token"
fill docs/n8n/airlock-credential.json "$work/credential-wrong.json" "AIRLOCK_TOKEN=not-$token"

# Runs one n8n command with its stdout and stderr in $work/NAME.out, .err; says how long it took.
# Sets $status to its exit status.
n8n_step() {
  local name=$1 started
  shift
  started=$(date +%s%N)
  status=0
  "$n8n" "$@" >"$work/$name.out" 2>"$work/$name.err" || status=$?
  echo "n8n-smoke: n8n $1: $((($(date +%s%N) - started) / 1000000)) ms, exit status $status" >&2
}
fail() {
  echo "n8n-smoke: FAILED: $1" >&2
  if [ -n "${2:-}" ]; then
    echo "--- $2 (last 60 lines)" >&2
    tail -n 60 "$2" >&2
  fi
  exit 1
}

# Reads the execution JSON out of `n8n execute` stdout and checks it: check_execution OUT MODE.
cat >"$work/check.py" <<'EOF'
import json, sys
out, mode, workflow_file = sys.argv[1], sys.argv[2], sys.argv[3]
lines = open(out).read().split("\n")
try:
    start, end = lines.index("{"), len(lines) - 1 - lines[::-1].index("}")
except ValueError:
    sys.exit("no execution JSON (a line '{' ... a line '}') in the output")
execution = json.loads("\n".join(lines[start:end + 1]))
nodes = [n["name"] for n in json.load(open(workflow_file))["nodes"]]
http_node, result_node = nodes[1], nodes[2]
result = execution["data"]["resultData"]
def fail(why):
    sys.exit(why + "\nexecution: " + json.dumps(execution)[:3000])
if mode == "ok":
    if execution.get("status") != "success":
        fail("status is %r, not 'success'" % execution.get("status"))
    reply = result["runData"][http_node][0]["data"]["main"][0][0]["json"]
    if reply.get("stdout") != "hi\n" or reply.get("exit_code") != 0:
        fail("the HTTP node's item is %r" % reply)
    used = result["runData"][result_node][0]["data"]["main"][0][0]["json"]
    if used != {"output": "hi", "succeeded": True}:
        fail("the node after the HTTP request made %r of the reply" % used)
else:
    error = result.get("error") or {}
    if execution.get("status") != "error":
        fail("status is %r, not 'error'" % execution.get("status"))
    if error.get("httpCode") != "401" or error.get("node", {}).get("name") != http_node:
        fail("the error is not a 401 from %r" % http_node)
    if error.get("description") != "fake airlock: wrong or missing bearer token":
        fail("the error does not carry the server's message: %r" % error.get("description"))
    if result_node in result["runData"]:
        fail("%r ran after the failed request" % result_node)
EOF
check_execution() {
  python3 "$work/check.py" "$1" "$2" "$work/workflow.json" || fail "the execution in $1 is not as expected" "$1"
}

n8n_step import-credential import:credentials --input="$work/credential.json"
[ "$status" = 0 ] || fail "import:credentials exited $status" "$work/import-credential.out"
n8n_step import-workflow import:workflow --input="$work/workflow.json"
[ "$status" = 0 ] || fail "import:workflow exited $status" "$work/import-workflow.out"

n8n_step execute execute --id="$workflow_id" --rawOutput
[ "$status" = 0 ] || fail "execute exited $status" "$work/execute.out"
check_execution "$work/execute.out" ok
python3 - "$work/requests.log" "$token" <<'EOF' || fail "the request n8n sent is not as expected" "$work/requests.log"
import json, sys
[request] = [json.loads(line) for line in open(sys.argv[1])]
assert request["path"] == "/v1/runs", request
assert request["authorization"] == "Bearer " + sys.argv[2], request
assert request["content_type"] == "application/json", request
assert json.loads(request["body"]) == {"command": "echo hi"}, request
EOF
echo "n8n-smoke: ok: the reply's stdout reached the next node" >&2

n8n_step import-wrong-credential import:credentials --input="$work/credential-wrong.json"
[ "$status" = 0 ] || fail "import:credentials (wrong token) exited $status" "$work/import-wrong-credential.out"
n8n_step execute-wrong-token execute --id="$workflow_id" --rawOutput
[ "$status" = 1 ] || fail "execute with a wrong token exited $status, not 1" "$work/execute-wrong-token.out"
check_execution "$work/execute-wrong-token.out" unauthorized
echo "n8n-smoke: ok: with a wrong token the execution failed with the server's 401 message" >&2
echo "n8n-smoke: 2 passed, 0 failed"
