#!/usr/bin/env bash
# Approvals answered by a real n8n: docs/n8n/airlock-approval.json (docs/n8n.md, section 10)
# runs in n8n 2.40.7 (installed once by scripts/n8n-install.sh), started with `n8n start`
# on a free port of 127.0.0.1 and the workflow published, so that its Webhook node listens on
# the production URL http://127.0.0.1:PORT/webhook/airlock-approval. A profile asks a person
# about *.asked.test, with that URL as its ask_webhook; n8n's credential holds an operator token
# of a real `airlock serve` (over TCP on 127.0.0.1). A probe in the workspace connects to a
# server on the host's loopback through `airlock run --resolve NAME=127.0.0.1` (a CLI run as the
# server's user and state directory) and waits while its connection is held. It checks, as root
# and (when run as root) with airlock as an ordinary user (uid 4242, setpriv):
#   1. api.asked.test, the host on the workflow's list: n8n reads the approval from airlock and
#      allows it once; the probe reaches the server; the audit log has approval.asked,
#      approval.webhook (status 200), approval.decided (allow_once, decided_by the token n8n
#      holds, n8n's reason), in that order.
#   2. deny.asked.test, not on the list: n8n denies it; the probe is refused, and the run's
#      refusal summary says "denied by token ID: <n8n's reason>"; the log has asked, webhook,
#      decided (deny).
#   3. A webhook's answer alone counts for nothing: a profile whose webhook (a small server of
#      this script's) answers 200 with {"decision":"allow_once"} and calls no API; the webhook
#      got the approval, yet the probe is refused after ask_timeout (5 s): the log has asked,
#      webhook (200), expired, and no decision.
#   4. An offer forged to n8n: a run asks about deny.asked.test, its profile's webhook now that
#      silent server; this script then posts the approval's id to n8n's webhook claiming
#      api.asked.test. The workflow decides on the approval as airlock gives it (GET
#      /v1/approvals/ID), not on the webhook's body: denied, the run says so, the log has it.
# It exits non-zero on the first failure, showing the output concerned; n8n, the server, the
# probe and the helper servers are stopped on exit (TEST_N8N_KEEP=1 keeps the scratch directory).
# AIRLOCK_BIN=path tests that binary, else the release binary (scripts/build.sh makes it).
# Timings go to stderr (never asserted): the whole run took 42 s twice in a row on a 2-core
# machine, ~30 s of it the eight n8n commands (import, publish, start: 2-7 s each).
#
# Facts about n8n it rests on (n8n 2.40.7), besides those in scripts/test-n8n.sh:
# - A workflow imported with `n8n import:workflow` is inactive (its Webhook node answers 404 "not
#   registered"). `n8n publish:workflow --id=ID` (2.x; `update:workflow --active=true` is
#   deprecated) makes it active, in the database: an n8n started afterwards registers its
#   webhooks; a running n8n does not notice.
# - `n8n start` answers GET /healthz/readiness (200) a few seconds before it has registered the
#   published workflows' webhooks: until then a POST to /webhook/PATH is a 404 "The requested
#   webhook "POST PATH" is not registered". Once registered, a GET on that POST-only path answers
#   404 "This webhook is not registered for GET requests. Did you mean to make a POST request?",
#   which is what this script waits for (nothing is executed by it).
# - Importing a changed workflow again (same id, another airlock URL) into the n8n database where
#   it was published, and publishing it again, was not enough: the database named the new version
#   as the published one, yet the next `n8n start` ran the earlier version's nodes (seen once, not
#   looked into). So each identity gets an n8n database of its own (N8N_USER_FOLDER).
# - A Webhook node with "Respond: Immediately" (responseMode onReceived) answers 200
#   {"message":"Workflow was started"} before the workflow runs.
# - N8N_LISTEN_ADDRESS=127.0.0.1 and N8N_PORT bind n8n's one HTTP port (editor, REST and webhooks)
#   to loopback; N8N_RUNNERS_BROKER_PORT=0 gives its task broker a free port. SIGTERM stops it in
#   a second or two.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
uid=4242
clock() { date +%s%N; }
since() { echo $((($(clock) - $1) / 1000000)); }
say() { echo "test-n8n-approval: $*" >&2; }
began=$(clock)

if [ -n "${AIRLOCK_BIN:-}" ]; then
  airlock_bin=$AIRLOCK_BIN
else
  [ -x target/release/airlock ] || scripts/build.sh
  airlock_bin=$repo/target/release/airlock
fi
n8n=$(scripts/n8n-install.sh | tail -n 1)

work=$(mktemp -d "${TMPDIR:-/tmp}/airlock-test-n8n-approval.XXXXXX")
chmod 755 "$work"
# A copy the ordinary user can run whatever the binary's own directory allows.
cp "$airlock_bin" "$work/airlock"
chmod 755 "$work/airlock"
unset AIRLOCK_URL AIRLOCK_TOKEN AIRLOCK_SANDBOX_UID AIRLOCK_STATE_DIR

pids=()
stop() {
  local pid=$1 _
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 50); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
}
# Stops what this script started and is still running, newest first.
stop_all() {
  local i started=("${pids[@]}")
  for ((i = ${#started[@]} - 1; i >= 0; i--)); do stop "${started[i]}"; done
  pids=()
}
cleanup() {
  stop_all
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
  local file
  for file in "${@:2}"; do
    echo "--- $file (last 60 lines)" >&2
    tail -n 60 "$file" >&2
  done
  exit 1
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# Starts a Python server given as a program text, which prints its port first: sets $port.
python_server() {
  local name=$1 program=$2 _
  shift 2
  : >"$work/$name.port"
  python3 -c "$program" "$@" >"$work/$name.port" 2>"$work/$name.err" &
  pids+=($!)
  port=
  for _ in $(seq 100); do
    port=$(head -n 1 "$work/$name.port")
    [ -n "$port" ] && return 0
    sleep 0.05
  done
  fail "the $name server did not start" "$work/$name.err"
}

# What the probe connects to: a server on the host's loopback, answering "hello from host".
python_server target '
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"hello from host"
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
'
target_port=$port
# A webhook that answers 200 with what looks like an approval, and calls no API: keeps the last
# body it got.
python_server silent '
import http.server, os, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        open(sys.argv[1] + ".tmp", "wb").write(body)
        os.rename(sys.argv[1] + ".tmp", sys.argv[1])
        answer = b"{\"decision\": \"allow_once\", \"reason\": \"the webhook says so\"}"
        self.send_response(200); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer))); self.end_headers()
        self.wfile.write(answer)
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
' "$work/silent.json"
silent_port=$port
n8n_port=$(free_port)
webhook="http://127.0.0.1:$n8n_port/webhook/airlock-approval"

export N8N_DIAGNOSTICS_ENABLED=false N8N_VERSION_NOTIFICATIONS_ENABLED=false N8N_TEMPLATES_ENABLED=false
export N8N_RUNNERS_MODE=external N8N_RUNNERS_AUTH_TOKEN=no-runner-connects N8N_RUNNERS_BROKER_PORT=0
mkdir -p "$work/workflows"

# Fills the templates' placeholders inside JSON strings (any value stays valid JSON):
# fill TEMPLATE OUT NAME=VALUE...
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

# Runs one n8n command to its end, output in $work/NAME.out; fails the test if it fails.
n8n_step() {
  local name=$1 started status=0
  shift
  started=$(clock)
  "$n8n" "$@" >"$work/$name.out" 2>&1 &
  pids+=($!)
  wait "${pids[-1]}" || status=$?
  unset 'pids[-1]'
  say "n8n $1: $(since "$started") ms"
  [ "$status" = 0 ] || fail "n8n $* exited $status" "$work/$name.out"
}

# The audit log's approval records of the last approval asked about HOST, checked:
#   approvals STATE HOST asked,webhook,decided DECISION TOKEN_ID REASON
#   approvals STATE HOST asked,webhook,expired
# prints a line saying what it found, with how long the answer took.
cat >"$work/approvals.py" <<'EOF'
import datetime, json, sys
log, host, want, *decided = sys.argv[1:]
records = [json.loads(line) for line in open(log) if line.strip()]
asked = [r for r in records if r.get("action") == "approval.asked" and r.get("host") == host]
if not asked:
    sys.exit("no approval.asked for %s in the audit log" % host)
id = asked[-1]["id"]
mine = [r for r in records if r.get("action", "").startswith("approval.") and r.get("id") == id]
def fail(why):
    sys.exit("%s\nthe approval's records:\n%s" % (why, "\n".join(json.dumps(r) for r in mine)))
actions = [r["action"].removeprefix("approval.") for r in mine]
if actions != want.split(","):
    fail("approval %s's records are %s, not %s" % (id, ",".join(actions), want))
hook = mine[1]
if hook.get("status") != 200 or "error" in hook or hook.get("webhook_host") != "127.0.0.1":
    fail("the webhook's record is not a 200 from 127.0.0.1")
def at(r):
    return datetime.datetime.fromisoformat(r["time"].replace("Z", "+00:00"))
took = int((at(mine[2]) - at(mine[0])).total_seconds() * 1000)
if decided:
    decision, token, reason = decided
    d = mine[2]
    for field, value in (("decision", decision), ("decided_by", "token " + token), ("host", host)):
        if d.get(field) != value:
            fail("approval.decided's %s is %r, not %r" % (field, d.get(field), value))
    if d.get("reason") != reason or (d.get("by") or {}).get("token") != token:
        fail("approval.decided's reason is not %r, or its by.token not %s" % (reason, token))
    print("%s: %s by token %s (%r), %d ms after it was asked" % (id, decision, token, reason, took))
else:
    print("%s: %s %d ms after it was asked" % (id, actions[-1], took))
EOF

checks=0
passed() {
  checks=$((checks + 1))
  say "ok ($who): $*"
}

identities=(root)
if [ "$(id -u)" = 0 ]; then
  identities+=(user)
elif [ -n "${AIRLOCK_TEST_REQUIRE_ROOT:-}" ]; then
  fail "AIRLOCK_TEST_REQUIRE_ROOT is set and this is not root"
fi

for who in "${identities[@]}"; do
  say "== approvals answered by n8n, airlock serve as $who"
  home="$work/$who"
  mkdir -p "$home/state" "$home/ws" "$home/.config/airlock/profiles"
  chmod 700 "$home/state"
  profiles="$home/.config/airlock/profiles"
  # default: the operator token's profile, asking n8n. silent: asking the webhook that only answers.
  printf '[network]\nask = ["*.asked.test"]\nask_timeout = "60s"\nask_webhook = "%s"\n' "$webhook" >"$profiles/default.toml"
  printf '[network]\nask = ["*.asked.test"]\nask_timeout = "5s"\nask_webhook = "http://127.0.0.1:%s/webhook/airlock-approval"\n' \
    "$silent_port" >"$profiles/silent.toml"
  chmod 644 "$profiles"/*.toml
  # Connects to HOST:PORT (a plain connect), asks for / and prints REACHED <body> or blocked <why>.
  cat >"$home/ws/probe.py" <<'EOF'
import socket, sys
host, port = sys.argv[1], int(sys.argv[2])
try:
    s = socket.create_connection((host, port), timeout=120)
    s.sendall(b"GET / HTTP/1.1\r\nHost: " + host.encode() + b"\r\nConnection: close\r\n\r\n")
    got = b""
    while True:
        data = s.recv(4096)
        if not data: break
        got += data
    print("REACHED", got.split(b"\r\n\r\n")[-1].decode())
except Exception as e:
    print("blocked", type(e).__name__, e)
EOF
  wrapper="$home/airlock-as"
  if [ "$who" = root ]; then
    printf '#!/bin/sh\nHOME=%s exec %s --state-dir %s "$@"\n' "$home" "$work/airlock" "$home/state" >"$wrapper"
  else
    chown -R $uid:$uid "$home"
    printf '#!/bin/sh\nexec setpriv --reuid=%s --regid=%s --clear-groups env -i PATH=/usr/bin:/bin HOME=%s LANG=C.UTF-8 %s --state-dir %s "$@"\n' \
      $uid $uid "$home" "$work/airlock" "$home/state" >"$wrapper"
  fi
  chmod 755 "$wrapper"

  # The operator token n8n answers with, and the server.
  token=$("$wrapper" token create --role operator --profile default --name n8n-approvals 2>"$home/token.err" | tail -n 1)
  [[ $token =~ ^airlock_([^_]+)_ ]] || fail "token create printed '$token', not airlock_<id>_<secret>" "$home/token.err"
  token_id=${BASH_REMATCH[1]}
  started=$(clock)
  : >"$home/serve.err"
  "$wrapper" serve --listen 127.0.0.1:0 --grace 1s >"$home/serve.out" 2>"$home/serve.err" &
  pids+=($!)
  server_pid=$!
  url=
  for _ in $(seq 200); do
    url=$(sed -n 's|^airlock: serving on \(http://127\.0\.0\.1:[0-9]*\)$|\1|p' "$home/serve.err")
    [ -n "$url" ] && break
    kill -0 "$server_pid" 2>/dev/null || fail "airlock serve exited" "$home/serve.err"
    sleep 0.05
  done
  [ -n "$url" ] || fail "airlock serve did not say where it listens" "$home/serve.err"
  say "airlock serve on $url: $(since "$started") ms"

  # n8n: the credential with the operator token, the workflow pointing at this server, published;
  # then started. A fresh n8n for each identity: see the header about importing again.
  export N8N_USER_FOLDER="$work/n8n-$who"
  mkdir -p "$N8N_USER_FOLDER"
  fill docs/n8n/airlock-operator-credential.json "$work/credential.json" "AIRLOCK_OPERATOR_TOKEN=$token"
  fill docs/n8n/airlock-approval.json "$work/workflows/approval.json" "AIRLOCK_URL=$url" "ALLOWED_HOST=api.asked.test"
  n8n_step import-credential import:credentials --input="$work/credential.json"
  rm "$work/credential.json"
  n8n_step import-workflow import:workflow --separate --input="$work/workflows"
  n8n_step publish-workflow publish:workflow --id=airlockApprovalFlow
  started=$(clock)
  : >"$home/n8n.log"
  N8N_PORT=$n8n_port N8N_LISTEN_ADDRESS=127.0.0.1 "$n8n" start >"$home/n8n.log" 2>&1 &
  pids+=($!)
  n8n_pid=$!
  registered=
  for _ in $(seq 600); do
    kill -0 "$n8n_pid" 2>/dev/null || fail "n8n start exited" "$home/n8n.log"
    if curl -sS "$webhook" 2>/dev/null | grep -qF 'not registered for GET requests'; then
      registered=1
      break
    fi
    sleep 0.1
  done
  [ -n "$registered" ] || fail "n8n did not register the webhook $webhook within 60 s" "$home/n8n.log"
  say "n8n start, until the workflow's webhook was registered: $(since "$started") ms"

  # Runs the probe against HOST in the workspace: probe NAME HOST [airlock run options]; its
  # stdout and stderr in $home/NAME.out and .err, its exit status in $status. probe_start and
  # probe_wait do the same in two steps.
  probe_start() {
    local name=$1 host=$2
    shift 2
    probe_started=$(clock)
    (cd "$home/ws" && exec "$wrapper" run --resolve "$host=127.0.0.1" "$@" -- /usr/bin/python3 probe.py "$host" "$target_port") \
      >"$home/$name.out" 2>"$home/$name.err" &
    pids+=($!)
  }
  probe_wait() {
    status=0
    wait "${pids[-1]}" || status=$?
    unset 'pids[-1]'
    say "the probe of $2 ($1): $(since "$probe_started") ms, exit status $status"
  }
  probe() {
    probe_start "$@"
    probe_wait "$@"
  }
  approvals() {
    "$wrapper" log --json >"$home/audit.jsonl" 2>"$home/log.err" || fail "airlock log --json failed" "$home/log.err"
    python3 "$work/approvals.py" "$home/audit.jsonl" "$@"
  }

  # 1. The host on the workflow's list: n8n allows it once.
  probe allowed api.asked.test
  grep -qx 'REACHED hello from host' "$home/allowed.out" ||
    fail "the probe of api.asked.test did not reach the server" "$home/allowed.out" "$home/allowed.err" "$home/n8n.log"
  [ "$status" = 0 ] || fail "the allowed run exited $status" "$home/allowed.err"
  found=$(approvals api.asked.test asked,webhook,decided allow_once "$token_id" "n8n: api.asked.test is on the workflow's list") ||
    fail "the audit log does not have n8n's approval as it should" "$home/n8n.log"
  passed "api.asked.test: the held connection went through; $found; records asked, webhook (200), decided in that order"

  # 2. A host not on the list: n8n denies it, and the run says who did.
  probe denied deny.asked.test
  grep -q '^blocked ' "$home/denied.out" || fail "the probe of deny.asked.test was not refused" "$home/denied.out" "$home/denied.err"
  said="denied by token $token_id: n8n: deny.asked.test is not on the workflow's list"
  grep -qF "$said" "$home/denied.err" || fail "the run's refusal summary does not say '$said'" "$home/denied.err"
  found=$(approvals deny.asked.test asked,webhook,decided deny "$token_id" "n8n: deny.asked.test is not on the workflow's list") ||
    fail "the audit log does not have n8n's denial as it should" "$home/n8n.log"
  passed "deny.asked.test: refused; the run said '$(grep -F "$said" "$home/denied.err")'; $found"

  # 3. A webhook that answers 200 (with an "allow_once" body) and calls no API: silence refuses.
  rm -f "$work/silent.json"
  probe silent api.asked.test -p silent
  grep -q '^blocked ' "$home/silent.out" || fail "the probe under the silent webhook was not refused" "$home/silent.out" "$home/silent.err"
  why="nobody answered within 5 s (ask_timeout)"
  grep -qF "$why" "$home/silent.err" || fail "the run's refusal summary does not say '$why'" "$home/silent.err"
  found=$(approvals api.asked.test asked,webhook,expired) || fail "the audit log does not have the expiry as it should"
  offered=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["id"])' "$work/silent.json" 2>&1) ||
    fail "the silent webhook got no approval: $offered"
  [[ $found == "$offered: "* ]] || fail "the silent webhook got approval $offered, the log's is: $found"
  passed "a webhook answering 200 {\"decision\":\"allow_once\"} and calling no API: it got $offered, the run was refused ($why); $found"

  # 4. A forged offer: the run's webhook is the silent one (the profile stays default, the one
  # n8n's token is bound to), and someone else posts to n8n's webhook the real approval's id
  # claiming the host on the list. The workflow decides on what airlock says the approval is
  # (deny.asked.test), not on what the webhook was told.
  sed -i "s|$webhook|http://127.0.0.1:$silent_port/webhook/airlock-approval|" "$profiles/default.toml"
  grep -qF "$silent_port" "$profiles/default.toml" || fail "could not point the default profile at the silent webhook" "$profiles/default.toml"
  rm -f "$work/silent.json"
  probe_start forged deny.asked.test
  for _ in $(seq 300); do
    [ -e "$work/silent.json" ] && break
    sleep 0.1
  done
  [ -e "$work/silent.json" ] || fail "the silent webhook got no approval within 30 s" "$home/forged.err"
  python3 -c '
import json, sys
offer = json.load(open(sys.argv[1]))
assert offer["host"] == "deny.asked.test", offer
offer["host"] = "api.asked.test"
offer["text"] = offer["text"].replace("deny.asked.test", "api.asked.test")
json.dump(offer, open(sys.argv[2], "w"))
' "$work/silent.json" "$home/forged.json" || fail "the offer the silent webhook got is not as expected" "$work/silent.json"
  curl -fsS -o "$home/forged-answer.json" -H 'Content-Type: application/json' --data-binary @"$home/forged.json" "$webhook" ||
    fail "n8n's webhook refused the forged offer" "$home/n8n.log"
  probe_wait forged deny.asked.test
  grep -q '^blocked ' "$home/forged.out" || fail "the probe of deny.asked.test was let through on a forged offer" "$home/forged.out" "$home/forged.err"
  grep -qF "$said" "$home/forged.err" || fail "the run's refusal summary does not say '$said'" "$home/forged.err"
  found=$(approvals deny.asked.test asked,webhook,decided deny "$token_id" "n8n: deny.asked.test is not on the workflow's list") ||
    fail "the audit log does not have n8n's denial of the forged offer as it should" "$home/n8n.log"
  passed "an offer posted to n8n claiming api.asked.test for the approval of deny.asked.test: n8n answered $(cat "$home/forged-answer.json"), read the approval from airlock and denied it; $found"

  stop "$n8n_pid"
  stop "$server_pid"
  pids=("${pids[@]:0:2}")
done

say "$checks passed in $(since "$began") ms"
