#!/usr/bin/env bash
# airlock under the real Claude Code: @anthropic-ai/claude-code 2.1.328 from npm (installed once
# by scripts/claude-install.sh), driven headless (`claude -p … --allowedTools Bash`) with the
# settings `airlock claude-code settings` prints, against scripts/fake_anthropic.py (a scripted
# fake of the streaming Messages API on 127.0.0.1) and the real airlock (AIRLOCK_BIN, else the
# release binary target/release/airlock, built by scripts/build.sh if it is missing). It checks:
#   1. Confined: a Bash call ran inside airlock as the sandbox user (its `id -u` is what
#      `airlock run -- id -u` prints, not 0), in the Claude Code session's airlock session
#      (claude-<id>): the file it wrote is in `airlock diff` and not in the host workspace, the
#      audit log has the run's intent with the command, and cwd tracking works across calls (cd
#      sub in the first, pwd in the second gives the workspace's sub). Read is refused, and so is
#      a background Bash call (it would hold the session); a cd into a directory made in the
#      session only says where the next call starts instead; the SessionStart hook told the agent.
#   2. Disabled (`airlock disable`): the command does not run (its marker file appears nowhere)
#      and its tool_result gives the switch's reason.
#   3. Binary missing (settings made by an airlock that is then deleted): the command does not run
#      and its tool_result says the prefix was not found.
# As root (CI) it then runs all of it again as an unprivileged uid (4242, or TEST_CLAUDE_UID; 0
# skips), through setpriv, with the airlock binary and Claude Code's native binary (hard-linked,
# since ~/.cache under /root is not the uid's to read) where that uid can reach them
# (CLAUDE_BIN names the binary and skips the install). Exits non-zero on the first failure,
# showing what was received; TEST_CLAUDE_KEEP=1 keeps the scratch directory. ~8 s a pass.
# A && B || fail: fail when either check does not hold, as meant.
# shellcheck disable=SC2015
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
say() { echo "test-claude-code: $*" >&2; }
fail() {
  say "FAILED: $*"
  exit 1
}

if [ -z "${AIRLOCK_BIN:-}" ] && [ ! -x target/release/airlock ]; then
  say "target/release/airlock is missing: building it (scripts/build.sh)"
  scripts/build.sh
fi
airlock=${AIRLOCK_BIN:-$repo/target/release/airlock}
claude=${CLAUDE_BIN:-$(scripts/claude-install.sh | tail -n 1)}

work=$(mktemp -d "${TMPDIR:-/tmp}/airlock-test-claude.XXXXXX")
chmod 755 "$work"
fake_pid=
cleanup() {
  if [ -n "$fake_pid" ]; then kill "$fake_pid" 2>/dev/null || true; fi
  if [ "${TEST_CLAUDE_KEEP:-}" = 1 ]; then say "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

export AIRLOCK_STATE_DIR=$work/state
ws=$work/ws
mkdir -p "$AIRLOCK_STATE_DIR" "$ws/sub" "$work/home"
echo "from the host" >"$ws/README"

# Runs Claude Code once with settings $1 against a fake that answers with the calls that follow
# (as fake_anthropic.py takes them); leaves the tool results, a JSON array, in $work/results.json.
converse() {
  local settings=$1 record=$work/record.jsonl port=$work/port
  shift
  rm -f "$record" "$port"
  python3 scripts/fake_anthropic.py --port-file "$port" --record "$record" "$@" 2>"$work/fake.log" &
  fake_pid=$!
  for _ in $(seq 100); do [ -s "$port" ] && break; sleep 0.05; done
  [ -s "$port" ] || fail "the fake Messages API did not start: $(cat "$work/fake.log")"
  (cd "$ws" && HOME=$work/home ANTHROPIC_BASE_URL="http://127.0.0.1:$(cat "$port")" \
    ANTHROPIC_API_KEY=sk-fake CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \
    timeout 120 "$claude" -p "do as scripted" --allowedTools Bash --settings "$settings" \
    --output-format json >"$work/claude.out" 2>"$work/claude.err") ||
    fail "claude exited $?: $(cat "$work/claude.err" "$work/claude.out")"
  kill "$fake_pid"
  wait "$fake_pid" 2>/dev/null || true
  fake_pid=
  python3 -c 'import json, sys; print(json.dumps(json.loads(open(sys.argv[1]).readlines()[-1])["tool_results"]))' \
    "$record" >"$work/results.json"
}

# result N: the text of the Nth tool result; result_is_error N: "True"/"False".
result() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[int(sys.argv[2])]["text"])' "$work/results.json" "$1"; }
# says N PATTERN: result N matches PATTERN. Not a pipe into grep -q: grep stops reading at the
# first match, and the writer's broken pipe would fail the test under pipefail.
says() { local text; text=$(result "$1") && grep -q -- "$2" <<<"$text"; }
result_is_error() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[int(sys.argv[2])]["is_error"])' "$work/results.json" "$1"; }

"$airlock" claude-code settings --workspace "$ws" >"$work/settings.json"
sandbox_uid=$(cd "$ws" && "$airlock" run -- id -u)

say "1. a Bash call runs in the session, as the sandbox user; cwd is tracked; Read is refused"
converse "$work/settings.json" \
  --command 'id -u; echo made-by-the-agent > made.txt; cd sub' \
  --command 'pwd' \
  --call "Read {\"file_path\": \"$ws/README\"}" \
  --call 'Bash {"command": "touch bg-marker", "run_in_background": true}' \
  --command 'mkdir only-in-session && cd only-in-session'
[ "$(result 0)" = "$sandbox_uid" ] && [ "$sandbox_uid" != 0 ] ||
  fail "the first command's id -u is '$(result 0)', not the sandbox user's $sandbox_uid: $(cat "$work/results.json")"
[ "$(result 1)" = "$ws/sub" ] ||
  fail "after 'cd sub', the next call ran in '$(result 1)', not $ws/sub: $(cat "$work/results.json")"
[ "$(result_is_error 2)" = True ] && says 2 Read ||
  fail "Read was not refused: $(result 2)"
[ "$(result_is_error 3)" = True ] && says 3 'background' ||
  fail "a background command was not refused: $(result 3)"
says 4 "the next command starts in $ws/sub\$" ||
  fail "a cd into a directory the host lacks is not explained: $(result 4)"
grep -q 'in airlock session claude-' "$work/record.jsonl" ||
  fail "the SessionStart hook's word to the agent is in no request to the API"
[ ! -e "$ws/made.txt" ] || fail "made.txt reached the host workspace"
session=$("$airlock" sessions --json | python3 -c 'import json, sys; s = [x for x in json.load(sys.stdin) if (x["name"] or "").startswith("claude-")]; assert len(s) == 1, s; print(s[0]["id"])')
"$airlock" diff "$session" --name-status >"$work/diff"
grep -q 'made.txt' "$work/diff" || fail "made.txt is not in 'airlock diff $session': $(cat "$work/diff")"
! grep -q 'bg-marker' "$work/diff" || fail "the refused background command ran"
"$airlock" log --session "$session" --json >"$work/log"
python3 - "$work/log" <<'PY' || fail "the audit log lacks the run's intent: $(cat "$work/log")"
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
intents = [r for r in records if r["action"] == "run.intent" and "made.txt" in " ".join(r["argv"])]
assert intents and intents[0]["sandbox_uid"] != 0, intents
PY
say "   ok: uid $sandbox_uid in session $session, made.txt only in its diff, cwd $ws/sub, Read and a background command refused"

say "2. with airlock disabled, the command does not run"
"$airlock" disable --reason "test: stop the agent" >/dev/null 2>&1
converse "$work/settings.json" --command 'touch marker-disabled'
# The shell prefix refuses too, on its own (a switch thrown between the hook and the run).
claude_session=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["session_id"])' "$work/claude.out")
status=0
(cd "$ws" && CLAUDE_CODE_SESSION_ID=$claude_session "$airlock" claude-code shell "$ws" default \
  "eval 'touch marker-disabled' < /dev/null" >"$work/prefix.out" 2>&1) || status=$?
"$airlock" enable >/dev/null 2>&1
[ "$status" = 125 ] && grep -q 'test: stop the agent' "$work/prefix.out" ||
  fail "the shell prefix, disabled, exited $status: $(cat "$work/prefix.out")"
[ "$(result_is_error 0)" = True ] && says 0 'test: stop the agent' ||
  fail "the refusal does not give the switch's reason: $(result 0)"
[ ! -e "$ws/marker-disabled" ] || fail "marker-disabled reached the host workspace"
for id in $("$airlock" sessions --json | python3 -c 'import json, sys; print(" ".join(x["id"] for x in json.load(sys.stdin)))'); do
  ! "$airlock" diff "$id" --name-status | grep -q marker-disabled || fail "marker-disabled is in session $id"
done
say "   ok: refused ($(result 0 | head -n 1 | cut -c1-120)...)"

say "3. with the airlock binary gone, the command does not run"
mkdir "$work/bin"
cp "$airlock" "$work/bin/airlock"
"$work/bin/airlock" claude-code settings --workspace "$ws" >"$work/settings-gone.json"
rm "$work/bin/airlock"
converse "$work/settings-gone.json" --command 'touch marker-missing'
[ "$(result_is_error 0)" = True ] && says 0 '[Nn]o such file' ||
  fail "the tool result does not say the prefix is missing: $(result 0)"
[ ! -e "$ws/marker-missing" ] || fail "marker-missing was made on the host"
say "   ok: refused ($(result 0 | tr '\n' ' ' | cut -c1-120))"
say "passed as uid $(id -u)"

uid=${TEST_CLAUDE_UID:-4242}
if [ "$(id -u)" = 0 ] && [ "$uid" != 0 ]; then
  # The install's wrapper runs the platform package's native binary; that binary itself.
  native=$(find "$(dirname "$claude")/../node_modules/@anthropic-ai/" -mindepth 2 -maxdepth 2 \
    -type f -name claude 2>/dev/null | head -n 1)
  mkdir -p "$work/for-uid"
  if [ -n "$native" ]; then
    ln "$native" "$work/for-uid/claude" 2>/dev/null || cp "$native" "$work/for-uid/claude"
  else
    cp "$claude" "$work/for-uid/claude"
  fi
  cp "$airlock" "$work/for-uid/airlock"
  chmod 755 "$work/for-uid" "$work/for-uid/claude" "$work/for-uid/airlock"
  say "again as uid $uid"
  setpriv --reuid="$uid" --regid="$uid" --clear-groups -- env -i PATH=/usr/local/bin:/usr/bin:/bin \
    HOME=/nonexistent TMPDIR=/tmp AIRLOCK_BIN="$work/for-uid/airlock" CLAUDE_BIN="$work/for-uid/claude" \
    TEST_CLAUDE_KEEP="${TEST_CLAUDE_KEEP:-}" "$repo/scripts/test-claude-code.sh"
fi
