#!/usr/bin/env bash
# Property-based test of `airlock serve` against its OpenAPI document
# (crates/airlock-serve/openapi.json, served at GET /openapi.json), with schemathesis: it makes
# requests from the document's schemas — valid ones, and invalid ones that must be refused — and
# checks every answer against the document (status codes, content types, headers, bodies; NDJSON
# streams line by line, see scripts/schemathesis_hooks.py), that no answer is a 5xx, that the
# endpoints that need a token refuse a request without one, and that a path refuses methods it
# does not document.
#
#   scripts/test-schemathesis.sh                             # ~2 minutes on 2 cores
#   SCHEMATHESIS_EXAMPLES=200 scripts/test-schemathesis.sh   # cases per operation (default 100)
#
# Against the release binary (scripts/build.sh; AIRLOCK_BIN=path to test another), serving on a
# loopback port with a state directory, a home and a workspace of its own, removed at the end.
# Three passes: an agent token on every endpoint; an operator token on every endpoint but
# /v1/disable (which would refuse the profile's runs for the rest of the pass); then the operator
# on /v1/disable and /v1/enable alone. Then scripts/schemathesis_flow.py walks through the API
# with real work (files changed, applied, reverted; a run paused and killed; the kill switch),
# each answer checked against the document too, and the followed audit log is read. The server
# is stopped at exit, whatever happened.
#
# schemathesis (and openapi-spec-validator, which checks the document against the OpenAPI 3.1
# specification first) are installed from PyPI into a virtualenv cached outside the repository:
# ${AIRLOCK_CI_CACHE:-~/.cache/airlock-ci}/schemathesis-venv. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
version=4.32.5
examples=${SCHEMATHESIS_EXAMPLES:-100}
cache=${AIRLOCK_CI_CACHE:-$HOME/.cache/airlock-ci}
venv="$cache/schemathesis-venv"
python=${PYTHON:-python3}

# The venv is made again when the pins change (or it no longer runs: a Python gone).
pins="schemathesis==$version openapi-spec-validator==0.9.0"
if [ "$(cat "$venv/.airlock-pins" 2>/dev/null)" != "$pins" ] || ! "$venv/bin/st" --version >/dev/null 2>&1; then
  rm -rf "$venv"
  mkdir -p "$cache"
  "$python" -m venv "$venv"
  # shellcheck disable=SC2086 # the pins are words
  "$venv/bin/pip" install --quiet --disable-pip-version-check $pins
  echo "$pins" >"$venv/.airlock-pins"
fi
# The document itself, against the OpenAPI 3.1 specification's schema.
"$venv/bin/openapi-spec-validator" crates/airlock-serve/openapi.json

if [ -n "${AIRLOCK_BIN:-}" ]; then
  airlock=$AIRLOCK_BIN
else
  scripts/build.sh
  airlock="$repo/target/release/airlock"
fi

work=$(mktemp -d /tmp/airlock-schemathesis-XXXXXX)
chmod 755 "$work"
server=
stop_server() {
  if [ -n "$server" ] && kill -0 "$server" 2>/dev/null; then
    kill -TERM "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
  fi
  server=
}
cleanup() {
  local status=$?
  stop_server
  if [ "$status" -ne 0 ] && [ -s "$work/serve.log" ]; then
    echo "== the server's log (last 30 lines):" >&2
    tail -n 30 "$work/serve.log" >&2
  fi
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# sub/project: the directory the document's examples name.
mkdir -p "$work/state" "$work/home" "$work/workspace/src" "$work/workspace/sub/project"
printf 'A workspace for schemathesis.\n' >"$work/workspace/README"
printf '#!/bin/sh\necho built\n' >"$work/workspace/src/build.sh"
chmod 755 "$work/workspace/src/build.sh"
# airlock as a person at the machine would run it, in the test's home and state directory.
run_airlock() {
  env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME="$work/home" \
    LANG=C.UTF-8 "$airlock" --state-dir "$work/state" "$@"
}
agent=$(run_airlock token create --role agent --workspace "$work/workspace" --name schemathesis-agent | tail -n 1)
operator=$(run_airlock token create --role operator --workspace "$work/workspace" --name schemathesis-operator | tail -n 1)

# Port 0: the kernel picks a free one, which the server's first line names. No rate limit to
# speak of: 429 is documented, but a pass that hits it tests nothing else.
# Started without run_airlock, so that $! is the server itself (env execs it), not a subshell.
env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME="$work/home" \
  LANG=C.UTF-8 "$airlock" --state-dir "$work/state" serve --listen 127.0.0.1:0 \
  --requests-per-second 100000 --runs-per-token 64 2>"$work/serve.log" &
server=$!
url=
for _ in $(seq 100); do
  url=$(grep -oE 'http://127\.0\.0\.1:[0-9]+' "$work/serve.log" | head -n 1 || true)
  [ -n "$url" ] && break
  kill -0 "$server" 2>/dev/null || { echo "airlock serve did not start" >&2; exit 1; }
  sleep 0.1
done
[ -n "$url" ] || { echo "airlock serve named no address in 10 s" >&2; exit 1; }
echo "== airlock serve on $url; schemathesis $version, $examples cases per operation"

checks=not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance
checks+=,response_schema_conformance,negative_data_rejection,ignored_auth,unsupported_method
checks+=,ensure_resource_availability,ndjson_conformance
# One worker: with two, Python 3.11 fails now and then inside hypothesis ("SystemError: AST
# constructor recursion depth mismatch": Python 3.11's ast.parse, called by both threads at once).
# Run from $work, where schemathesis leaves its cache (.schemathesis/).
schemathesis() {
  (cd "$work" && SCHEMATHESIS_HOOKS="$repo/scripts/schemathesis_hooks.py" "$venv/bin/st" \
    --config-file "$repo/scripts/schemathesis.toml" run "$url/openapi.json" \
    --checks "$checks" --max-examples "$examples" --workers 1 --seed "${SCHEMATHESIS_SEED:-1}" \
    --request-timeout 60 --no-color --output-truncate false --suppress-health-check too_slow \
    --generation-database none "$@")
}

failed=()
echo "== pass 1: an agent token, every endpoint"
schemathesis -H "Authorization: Bearer $agent" || failed+=(agent)
echo "== pass 2: an operator token, every endpoint but /v1/disable"
schemathesis -H "Authorization: Bearer $operator" --exclude-operation-id disable || failed+=(operator)
echo "== pass 3: an operator token, /v1/disable and /v1/enable"
# (No stateful phase: no link leads to or from them.)
schemathesis -H "Authorization: Bearer $operator" --include-operation-id disable \
  --include-operation-id enable --phases examples,coverage,fuzzing || failed+=(kill-switch)

echo "== a walk with real work: scripts/schemathesis_flow.py"
"$venv/bin/python" "$repo/scripts/schemathesis_flow.py" "$url" "$agent" "$operator" || failed+=(flow)

# The followed audit log, which schemathesis cannot read to its end: NDJSON records as they are
# written (a session made while it is followed), until the client goes away. From now on only,
# so that a slow machine is not still reading the passes' records when curl gives up.
echo "== GET /v1/audit?follow=true"
since=$(date -u +%Y-%m-%dT%H:%M:%SZ)
curl -sS --max-time 60 -o "$work/follow.ndjson" -D "$work/follow.headers" \
  -H "Authorization: Bearer $agent" "$url/v1/audit?follow=true&action=session&since=$since" &
follower=$!
sleep 1
made=$(curl -sS -X POST -H "Authorization: Bearer $agent" -H 'Content-Type: application/json' -d '{}' "$url/v1/sessions")
made_id=$(printf '%s' "$made" | "$venv/bin/python" -c 'import json, sys; print(json.load(sys.stdin)["id"])')
# Followed until the new session's record has come whole (up to 60 s on a loaded machine), then
# the client goes away.
for _ in $(seq 600); do
  if grep -qF "$made_id" "$work/follow.ndjson" 2>/dev/null && [ "$(tail -c 1 "$work/follow.ndjson")" = "" ]; then
    break
  fi
  sleep 0.1
done
kill "$follower" 2>/dev/null || true
wait "$follower" || true
grep -qi '^content-type: application/x-ndjson' "$work/follow.headers" \
  || { echo "the followed audit log is not NDJSON:" >&2; cat "$work/follow.headers" >&2; exit 1; }
"$venv/bin/python" - "$work/follow.ndjson" "$made" <<'EOF'
import json, sys
made = json.loads(sys.argv[2])["id"]
text = open(sys.argv[1], encoding="utf-8").read()
assert text.endswith("\n"), f"a record cut short: {text[-200:]!r}"
records = [json.loads(line) for line in text.split("\n")[:-1]]
for record in records:
    missing = {"seq", "time", "prev", "action", "hash"} - record.keys()
    assert not missing, f"a record without {missing}: {record}"
    assert record["action"].startswith("session"), f"not a session record: {record}"
assert any(r.get("session") == made for r in records), f"session {made}, made while following, is not in the stream"
print(f"{len(records)} session record(s) followed, of session {made}, made meanwhile")
EOF

stop_server
grep -q 'airlock: stopped' "$work/serve.log" || { echo "airlock serve did not stop cleanly" >&2; exit 1; }
if [ ${#failed[@]} -gt 0 ]; then
  echo "== schemathesis found failures in pass(es): ${failed[*]}" >&2
  exit 1
fi
echo "== schemathesis: no failure"
