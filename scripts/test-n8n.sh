#!/usr/bin/env bash
# airlock from a real n8n: the workflows of docs/n8n/ (docs/n8n.md says how to use them) run in
# n8n 2.40.7 (installed once by scripts/n8n-install.sh) against a real `airlock serve` (the
# release binary target/release/airlock, built by scripts/build.sh if it is missing), over TCP on
# 127.0.0.1 with an agent token bound to a scratch workspace. It checks:
#   1. airlock-run.json (POST /v1/runs): the command ran in airlock's sandbox (as its user "agent",
#      reading the workspace's file), its stdout and exit_code reached the next node, the file it
#      wrote is not in the host workspace, and the audit log has the run with the token's id.
#   2. airlock-session.json (POST /v1/sessions, then .../runs): the next node has the session's id
#      and the run's output; `airlock diff ID` run here by the operator shows the file the command
#      wrote, the agent's token may not apply it (403), the host workspace still lacks it, and
#      `airlock apply ID` run here then writes it.
#   3. airlock-mcp.json (n8n's MCP Client node calling the `run` tool of airlock serve's /mcp):
#      the command's stdout and exit_code reached the next node; the file it wrote is in the
#      token's own session (the token reads it and its diff through the API) and not in the host
#      workspace; the audit log has the run with the token's id and that session.
#   4. With the token's profile disabled, the HTTP workflow fails with a 403 that carries the
#      switch's reason, the MCP workflow fails with airlock's refusal (the reason, code disabled)
#      as the node's error, and both refusals are audited under the token; enabled again, a run
#      passes.
#   5. With the token revoked, the HTTP workflow fails with airlock's 401 token_revoked message, the
#      MCP workflow with n8n's "Authentication failed" whose description holds airlock's answer.
# It exits non-zero on the first failure, showing the output concerned; the server and any n8n
# are stopped on exit (TEST_N8N_KEEP=1 keeps the scratch directory). Timings go to stderr: the
# whole run took 89-102 s on a 2-core machine busy with other builds (54-78 s before the three MCP
# executions), ~50 s of it CPU, nearly all in the nine n8n commands (each a fresh process that
# loads all of n8n; see below).
#
# Facts about n8n it rests on (n8n 2.40.7, Node 24.22.3):
# - Every n8n command loads all of n8n: import:credentials 7-17 s (the first one also creates the
#   SQLite database of N8N_USER_FOLDER, ~300 migrations), import:workflow 4-14 s, execute 4-15 s.
# - Quiet and fast: N8N_DIAGNOSTICS_ENABLED=false (else each command spends ~3 s failing to reach
#   n8n's telemetry and prints stack traces), N8N_VERSION_NOTIFICATIONS_ENABLED=false,
#   N8N_TEMPLATES_ENABLED=false; the install's wrapper sets these unless the caller does.
# - Task runners: `n8n execute` always starts a task broker, on port 5679 unless told otherwise
#   (two executes at once then collide: "n8n Task Broker's port 5679 is already in use"), and by
#   default spawns a JavaScript runner process. Only the Code node needs one; these workflows use
#   Set nodes, so: N8N_RUNNERS_MODE=external (no runner processes), N8N_RUNNERS_AUTH_TOKEN=<any>
#   (external mode requires one), N8N_RUNNERS_BROKER_PORT=0 (a free port; nothing connects).
# - `n8n import:credentials` takes the credential's data in plain text and encrypts it with the
#   instance's key, which n8n makes on first use in $N8N_USER_FOLDER/.n8n/config. Workflow and
#   credential ids are kept from the files; `import:workflow --separate --input=DIR` imports
#   every file of DIR in one process.
# - `n8n execute --id ID --rawOutput` writes everything to stdout: log lines, then the execution
#   as JSON from a line "{" to a line "}" (printed at log level info). Success: exit status 0,
#   .status "success", each node's items in .data.resultData.runData[NODE][0].data.main[0][*].json.
#   An HTTP Request node answered with an error status: exit status 1, .status "error",
#   .data.resultData.error with .httpCode "401" (a string), .description the server's JSON
#   "message", .messages[0] `401 - "<the raw body>"`, .node.name the HTTP node; the next node has
#   no runData.
# - The MCP Client node (@n8n/n8n-nodes-langchain.mcpClient, version 1.1; the MCP SDK 1.26.0
#   inside) opens one MCP connection per execution of the node (initialize, tools/call, close),
#   Streamable HTTP with the credential's header on each request. Its item is {structuredContent:
#   the tool's structured answer, content: [{type: "text", text}]}. A tool result with isError
#   fails the node (from version 1.1 on; 1 passed it on as an item) with the tool's text as
#   .error.message (no httpCode, messages []). A 401 or 403 while connecting fails it with
#   .message "Could not connect to your MCP server. Authentication failed." and .description
#   "Streamable HTTP error: Error POSTing to endpoint: <the raw body>".
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
clock() { date +%s%N; }
since() { echo $((($(clock) - $1) / 1000000)); }
say() { echo "test-n8n: $*" >&2; }
began=$(clock)

if [ ! -x target/release/airlock ]; then
  say "target/release/airlock is missing: building it (scripts/build.sh)"
  scripts/build.sh
fi
airlock_bin=$repo/target/release/airlock
n8n=$(scripts/n8n-install.sh | tail -n 1)

work=$(mktemp -d "${TMPDIR:-/tmp}/airlock-test-n8n.XXXXXX")
chmod 755 "$work"
state=$work/state
workspace=$work/workspace
mkdir -p "$state" "$workspace" "$work/workflows"
# The CLI works here, as the operator: a server named in the caller's environment is not asked.
unset AIRLOCK_URL AIRLOCK_TOKEN AIRLOCK_SANDBOX_UID
airlock() { "$airlock_bin" --state-dir "$state" "$@"; }

server_pid=
n8n_pid=
stop() {
  local pid=$1 _
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 50); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
}
cleanup() {
  if [ -n "$n8n_pid" ]; then stop "$n8n_pid"; fi
  if [ -n "$server_pid" ]; then stop "$server_pid"; fi
  if [ -n "${TEST_N8N_KEEP:-}" ]; then
    say "kept $work (TEST_N8N_KEEP is set)"
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT
# So that a signal also runs the cleanup (bash runs the EXIT trap on exit, not on a signal).
trap 'say interrupted; exit 130' INT
trap 'say terminated; exit 143' TERM

fail() {
  say "FAILED: $1"
  if [ -n "${2:-}" ]; then
    echo "--- $2 (last 60 lines)" >&2
    tail -n 60 "$2" >&2
  fi
  exit 1
}

# The workspace, a token bound to it, and the server on a free port of 127.0.0.1.
echo "hello from the host workspace" >"$workspace/file.txt"
token=$(airlock token create --role agent --workspace "$workspace" --name n8n-test 2>"$work/token.err" | tail -n 1)
[[ $token =~ ^airlock_([^_]+)_ ]] || fail "token create printed '$token', not airlock_<id>_<secret>"
token_id=${BASH_REMATCH[1]}
started=$(clock)
# The binary itself, not the airlock function: $! must be the server's pid for the trap to stop it.
# Its stderr file is made first: the background child opens it only when it gets to run.
: >"$work/serve.err"
"$airlock_bin" --state-dir "$state" serve --listen 127.0.0.1:0 --grace 1s >"$work/serve.out" 2>"$work/serve.err" &
server_pid=$!
url=
for _ in $(seq 200); do
  url=$(sed -n 's|^airlock: serving on \(http://127\.0\.0\.1:[0-9]*\)$|\1|p' "$work/serve.err")
  [ -n "$url" ] && break
  kill -0 "$server_pid" 2>/dev/null || fail "airlock serve exited" "$work/serve.err"
  sleep 0.05
done
[ -n "$url" ] || fail "airlock serve did not say where it listens" "$work/serve.err"
curl -fsS "$url/v1/health" >/dev/null || fail "GET $url/v1/health failed" "$work/serve.err"
say "airlock serve on $url: $(since "$started") ms"

export N8N_USER_FOLDER="$work/n8n-home"
export N8N_DIAGNOSTICS_ENABLED=false N8N_VERSION_NOTIFICATIONS_ENABLED=false N8N_TEMPLATES_ENABLED=false
export N8N_RUNNERS_MODE=external N8N_RUNNERS_AUTH_TOKEN=no-runner-connects N8N_RUNNERS_BROKER_PORT=0
mkdir -p "$N8N_USER_FOLDER"

# Fills the templates' placeholders inside JSON strings, so that any value (quotes, backslashes,
# newlines) stays valid JSON: fill TEMPLATE OUT NAME=VALUE...
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
command='id -un; cat file.txt; echo made > made.txt'
expected_stdout=$'agent\nhello from the host workspace\n'
fill docs/n8n/airlock-credential.json "$work/credential.json" "AIRLOCK_TOKEN=$token"
for flow in run session mcp; do
  fill "docs/n8n/airlock-$flow.json" "$work/workflows/$flow.json" "AIRLOCK_URL=$url" "AIRLOCK_COMMAND=$command"
done

# Runs one n8n command with its output in $work/NAME.out (stderr in .err), in the background so
# that the trap can stop it; sets $status to its exit status and says how long it took.
n8n_step() {
  local name=$1 started
  shift
  started=$(clock)
  status=0
  "$n8n" "$@" >"$work/$name.out" 2>"$work/$name.err" &
  n8n_pid=$!
  wait "$n8n_pid" || status=$?
  n8n_pid=
  say "n8n $1 ($name): $(since "$started") ms, exit status $status"
}

# Checks the execution JSON in `n8n execute`'s output against the workflow's file:
#   check_execution OUT WORKFLOW run STDOUT       airlock's answer and what the next node made of it
#   check_execution OUT WORKFLOW session STDOUT   the same with the session; prints the session's id
#   check_execution OUT WORKFLOW refused STATUS CODE TEXT   the request failed with airlock's error
#     CODE, whose message (saying TEXT) is n8n's description of the error; prints the message
#   check_execution OUT WORKFLOW mcp STDOUT   the MCP Client node's item (the run tool's structured
#     answer) and what the next node made of it; prints the session's id
#   check_execution OUT WORKFLOW failed FIELD TEXT   the node that ran last failed, and its error's
#     FIELD (message or description) says TEXT; prints the error's message and description
cat >"$work/check.py" <<'EOF'
import json, sys
out, workflow_file, mode, *args = sys.argv[1:]
lines = open(out).read().split("\n")
try:
    start, end = lines.index("{"), len(lines) - 1 - lines[::-1].index("}")
except ValueError:
    sys.exit("no execution JSON (a line '{' ... a line '}') in the output")
execution = json.loads("\n".join(lines[start:end + 1]))
nodes = [n["name"] for n in json.load(open(workflow_file))["nodes"]]
result = execution["data"]["resultData"]
def fail(why):
    sys.exit(why + "\nexecution: " + json.dumps(execution)[:4000])
def expect(what, got, want):
    if got != want:
        fail("%s is %r, not %r" % (what, got, want))
def item(node):
    return result["runData"][node][0]["data"]["main"][0][0]["json"]
if mode in ("run", "session"):
    [stdout] = args
    expect("the status", execution.get("status"), "success")
    # The last HTTP Request node's item is airlock's answer; the node after it uses it.
    answer, used = item(nodes[-2]), item(nodes[-1])
    expect("the answer's stdout", answer.get("stdout"), stdout)
    expect("the answer's exit_code", answer.get("exit_code"), 0)
    if mode == "run":
        expect("the next node's item", used, {"output": stdout.strip(), "succeeded": True})
    else:
        session = item(nodes[-3]).get("id")
        expect("the answer's session", answer.get("session"), session)
        expect("the next node's item", used, {"session": session, "output": stdout.strip(), "exit_code": 0})
        print(session)
elif mode == "mcp":
    [stdout] = args
    expect("the status", execution.get("status"), "success")
    node_item, used = item(nodes[-2]), item(nodes[-1])
    answer = node_item.get("structuredContent") or {}
    expect("the run tool's stdout", answer.get("stdout"), stdout)
    expect("the run tool's exit_code", answer.get("exit_code"), 0)
    session = answer.get("session")
    if not session or session not in (answer.get("review") or ""):
        fail("the run tool's answer names no session, or its review note another one")
    expect("the text content's type", [c.get("type") for c in node_item.get("content", [])], ["text"])
    expect("the next node's item", used, {"output": stdout.strip(), "succeeded": True, "session": session})
    print(session)
elif mode == "failed":
    field, text = args
    error = result.get("error") or {}
    expect("the status", execution.get("status"), "error")
    if text not in (error.get(field) or ""):
        fail("the error's %s does not say %r" % (field, text))
    ran = [n for n in nodes[1:] if n in result["runData"]]
    expect("the nodes that ran (the failed one last)", ran[-1:], [error.get("node", {}).get("name")])
    print("%s | %s" % (error.get("message"), error.get("description")))
else:
    status, code, text = args
    error = result.get("error") or {}
    expect("the status", execution.get("status"), "error")
    expect("the error's HTTP status", error.get("httpCode"), status)
    # messages[0] is: STATUS - "<the body as a JSON string>"
    raw = (error.get("messages") or [""])[0]
    try:
        body = json.loads(json.loads(raw.split(" - ", 1)[1]))
    except (IndexError, ValueError):
        fail("the error does not hold the server's body: %r" % raw)
    expect("the code in the error's body", body.get("code"), code)
    expect("the error's description", error.get("description"), body.get("message"))
    if text not in body["message"]:
        fail("airlock's message %r does not say %r" % (body["message"], text))
    ran = [n for n in nodes[1:] if n in result["runData"]]
    expect("the nodes that ran (the failed one last)", ran[-1:], [error.get("node", {}).get("name")])
    print(body["message"])
EOF
check_execution() { python3 "$work/check.py" "$@"; }

n8n_step import-credential import:credentials --input="$work/credential.json"
[ "$status" = 0 ] || fail "import:credentials exited $status" "$work/import-credential.out"
n8n_step import-workflows import:workflow --separate --input="$work/workflows"
[ "$status" = 0 ] || fail "import:workflow exited $status" "$work/import-workflows.out"

checks=0
passed() {
  checks=$((checks + 1))
  say "ok: $*"
}

# 1. A throwaway run.
n8n_step execute-run execute --id=airlockRunWorkflow --rawOutput
[ "$status" = 0 ] || fail "executing airlock-run exited $status" "$work/execute-run.out"
check_execution "$work/execute-run.out" "$work/workflows/run.json" run "$expected_stdout" ||
  fail "the execution of airlock-run is not as expected" "$work/execute-run.out"
[ ! -e "$workspace/made.txt" ] || fail "the throwaway run wrote made.txt into the host workspace"
passed "airlock-run: the command ran in the sandbox as 'agent' and read the workspace; its stdout and exit_code reached the next node; the host workspace has no made.txt"

# Is there an audit record of ACTION by the token, in SESSION ("-": none), whose FIELD (argv or
# error) holds TEXT? audited ACTION SESSION FIELD TEXT
audited() {
  airlock log --json --action "$1" | python3 -c '
import json, sys
token, action, session, field, text = sys.argv[1:]
records = [json.loads(line) for line in sys.stdin if line.strip()]
def holds(value):
    return text in value if isinstance(value, (list, str)) else False
mine = [r for r in records if (r.get("by") or {}).get("token") == token
        and r.get("session") == (None if session == "-" else session) and holds(r.get(field))]
if not mine:
    sys.exit("no %s record by token %s in session %s with %r in its %s among:\n%s"
             % (action, token, session, text, field, json.dumps(records, indent=1)[:4000]))
' "$token_id" "$@"
}
audited run.intent - argv "$command" || fail "the audit log does not have the run"
passed "audit: a run.intent record by token $token_id with the command in its argv"

# 2. A session: the changes stay in it until a person applies them.
n8n_step execute-session execute --id=airlockSessionFlow --rawOutput
[ "$status" = 0 ] || fail "executing airlock-session exited $status" "$work/execute-session.out"
session=$(check_execution "$work/execute-session.out" "$work/workflows/session.json" session "$expected_stdout") ||
  fail "the execution of airlock-session is not as expected" "$work/execute-session.out"
audited run.intent "$session" argv "$command" || fail "the audit log does not have the session's run"
airlock diff --no-pager "$session" >"$work/diff.out" 2>"$work/diff.err" || fail "airlock diff $session failed" "$work/diff.err"
if ! { grep -q '^+++ b/made.txt$' "$work/diff.out" && grep -q '^+made$' "$work/diff.out"; }; then
  fail "airlock diff $session does not show made.txt" "$work/diff.out"
fi
# The token is an agent's: a person applies, not the workflow.
status=$(curl -sS -o "$work/agent-apply.json" -w '%{http_code}' -X POST "$url/v1/sessions/$session/apply" \
  -H "Authorization: Bearer $token") || fail "POST /v1/sessions/$session/apply failed"
if [ "$status" != 403 ] || ! grep -qF '"code":"role_forbidden"' "$work/agent-apply.json"; then
  fail "the agent token's apply answered $status, not 403 role_forbidden" "$work/agent-apply.json"
fi
[ ! -e "$workspace/made.txt" ] || fail "made.txt is in the host workspace before a person applied the session"
passed "airlock-session: session $session; 'airlock diff' shows made.txt; the token may not apply it (403 role_forbidden); the host workspace lacks it; the run is audited with the session"
airlock apply "$session" >"$work/apply.out" 2>&1 || fail "airlock apply $session failed" "$work/apply.out"
[ "$(cat "$workspace/made.txt" 2>/dev/null)" = made ] || fail "airlock apply $session did not write made.txt" "$work/apply.out"
passed "'airlock apply $session' wrote made.txt into the workspace"
rm "$workspace/made.txt"

# 3. The MCP Client node: the same command through /mcp, in the session airlock keeps for the token.
n8n_step execute-mcp execute --id=airlockMcpWorkflow --rawOutput
[ "$status" = 0 ] || fail "executing airlock-mcp exited $status" "$work/execute-mcp.out"
mcp_session=$(check_execution "$work/execute-mcp.out" "$work/workflows/mcp.json" mcp "$expected_stdout") ||
  fail "the execution of airlock-mcp is not as expected" "$work/execute-mcp.out"
audited run.intent "$mcp_session" argv "$command" || fail "the audit log does not have the MCP run"
# The session is the token's: the token itself reads it and its diff (GET /v1/sessions/ID[/diff]).
curl -fsS -o "$work/mcp-session.json" "$url/v1/sessions/$mcp_session" -H "Authorization: Bearer $token" ||
  fail "GET /v1/sessions/$mcp_session with the token failed"
grep -qF "\"token\":\"$token_id\"" "$work/mcp-session.json" ||
  fail "session $mcp_session is not the token's" "$work/mcp-session.json"
curl -fsS -o "$work/mcp-diff.out" "$url/v1/sessions/$mcp_session/diff" -H "Authorization: Bearer $token" \
  -H 'Accept: text/x-diff' || fail "GET /v1/sessions/$mcp_session/diff with the token failed"
if ! { grep -q '^+++ b/made.txt$' "$work/mcp-diff.out" && grep -q '^+made$' "$work/mcp-diff.out"; }; then
  fail "the diff of session $mcp_session does not show made.txt" "$work/mcp-diff.out"
fi
[ ! -e "$workspace/made.txt" ] || fail "the MCP run wrote made.txt into the host workspace"
passed "airlock-mcp: the MCP Client node's run ran as 'agent'; its stdout and exit_code reached the next node; made.txt is in session $mcp_session, the token's (GET /v1/sessions/$mcp_session and its diff with the token), not in the host workspace; the run is audited with the token and the session"

# 4. The profile disabled: 403 with the reason (HTTP); the tool's refusal with it (MCP).
reason="n8n test: disabled"
airlock disable --profile default --reason "$reason" 2>"$work/disable.err" || fail "airlock disable failed" "$work/disable.err"
n8n_step execute-disabled execute --id=airlockRunWorkflow --rawOutput
disabled_status=$status
n8n_step execute-mcp-disabled execute --id=airlockMcpWorkflow --rawOutput
mcp_disabled_status=$status
airlock enable --profile default 2>"$work/enable.err" || fail "airlock enable failed" "$work/enable.err"
[ "$disabled_status" = 1 ] ||
  fail "executing airlock-run with the profile disabled exited $disabled_status, not 1" "$work/execute-disabled.out"
check_execution "$work/execute-disabled.out" "$work/workflows/run.json" refused 403 disabled "$reason" >/dev/null ||
  fail "the execution with the profile disabled did not fail with airlock's 403" "$work/execute-disabled.out"
grep -qF "$reason" "$work/execute-disabled.out" || fail "n8n's output does not carry the reason" "$work/execute-disabled.out"
audited run.refused - error "$reason" || fail "the audit log does not have the refusal"
curl -fsS "$url/v1/runs" -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
  -d '{"command": "echo enabled"}' >"$work/enabled.json" || fail "a run after 'airlock enable' failed" "$work/enabled.json"
grep -qF '"stdout":"enabled\n"' "$work/enabled.json" || fail "a run after 'airlock enable' did not run" "$work/enabled.json"
passed "with profile default disabled the execution failed with a 403 carrying the reason, audited as run.refused by the token; enabled again, a run passes"
[ "$mcp_disabled_status" = 1 ] ||
  fail "executing airlock-mcp with the profile disabled exited $mcp_disabled_status, not 1" "$work/execute-mcp-disabled.out"
message=$(check_execution "$work/execute-mcp-disabled.out" "$work/workflows/mcp.json" failed message "$reason") ||
  fail "the MCP execution with the profile disabled did not fail with airlock's refusal" "$work/execute-mcp-disabled.out"
[[ $message == "airlock refused: "*"(disabled) | "* ]] ||
  fail "the MCP node's error is not airlock's refusal with its code: $message" "$work/execute-mcp-disabled.out"
audited run.refused "$mcp_session" error "$reason" || fail "the audit log does not have the MCP refusal"
passed "with profile default disabled the MCP execution failed, the node's error being the run tool's refusal: ${message% | *}; audited as run.refused by the token in session $mcp_session"

# 5. The token revoked: 401 token_revoked.
airlock token revoke "$token_id" >"$work/revoke.out" 2>&1 || fail "airlock token revoke failed" "$work/revoke.out"
n8n_step execute-revoked execute --id=airlockRunWorkflow --rawOutput
[ "$status" = 1 ] || fail "executing airlock-run with a revoked token exited $status, not 1" "$work/execute-revoked.out"
message=$(check_execution "$work/execute-revoked.out" "$work/workflows/run.json" refused 401 token_revoked revoked) ||
  fail "the execution with a revoked token did not fail with airlock's 401 token_revoked" "$work/execute-revoked.out"
passed "with the token revoked the execution failed with a 401 token_revoked: $message"
n8n_step execute-mcp-revoked execute --id=airlockMcpWorkflow --rawOutput
[ "$status" = 1 ] || fail "executing airlock-mcp with a revoked token exited $status, not 1" "$work/execute-mcp-revoked.out"
message=$(check_execution "$work/execute-mcp-revoked.out" "$work/workflows/mcp.json" failed description '"code":"token_revoked"') ||
  fail "the MCP execution with a revoked token did not fail with airlock's 401 token_revoked" "$work/execute-mcp-revoked.out"
[[ $message == "Could not connect to your MCP server. Authentication failed. | "* ]] ||
  fail "the MCP node's error is not n8n's authentication failure: $message" "$work/execute-mcp-revoked.out"
passed "with the token revoked the MCP execution failed: $message"

say "$checks passed in $(since "$began") ms"
