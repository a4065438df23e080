#!/usr/bin/env bash
# airlock under the real Codex: @openai/codex 0.171.0 from npm (installed once by
# scripts/codex-install.sh), driven headless (`codex exec -p airlock`) with the config layer and
# rule `airlock codex settings` and `airlock codex rules` print, against scripts/fake_openai.py
# (a scripted fake of the streaming Responses API on 127.0.0.1, a custom model provider) and the
# real airlock (AIRLOCK_BIN, else the release binary target/release/airlock, built by
# scripts/build.sh if it is missing). It checks:
#   1. Confined: a shell command ran inside airlock as the sandbox user (its `id -u` is what
#      `airlock run -- id -u` prints, not 0), in the Codex session's airlock session
#      (codex-<thread id>): the file it wrote is in `airlock diff` and not in the host workspace,
#      the audit log has the run's intent, a second command sees the first one's file, and the
#      SessionStart hook told the agent. apply_patch, given to the hook as Codex gives it, is
#      denied.
#   2. Disabled (`airlock disable`): the command does not run (its marker appears nowhere) and
#      its result gives the switch's reason; `airlock codex shell` refuses on its own too.
#   3. Binary missing (settings made by an airlock that is then deleted): the hook's `|| exit 2`
#      blocks, and the command does not run.
#   4. Hooks not trusted (no --dangerously-bypass-hook-trust): Codex skips the hook and runs the
#      command as it was, but in its own read-only sandbox: it cannot write the workspace.
#   5. Codex's sandbox modes without the rule: airlock cannot work under read-only (its state
#      directory is read-only) nor workspace-write (no user namespaces), and works under
#      danger-full-access; with the rule it works under read-only (step 1).
# As root (CI) it then runs all of it again as an unprivileged uid (4242, or TEST_CODEX_UID; 0
# skips), through setpriv, with the airlock binary and Codex's native binary (hard-linked) where
# that uid can reach them (CODEX_BIN names the binary and skips the install). Exits non-zero on
# the first failure, showing what was received; TEST_CODEX_KEEP=1 keeps the scratch directory.
# A && B || fail: fail when either check does not hold, as meant.
# shellcheck disable=SC2015
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
say() { echo "test-codex: $*" >&2; }
fail() {
  say "FAILED: $*"
  exit 1
}

if [ -z "${AIRLOCK_BIN:-}" ] && [ ! -x target/release/airlock ]; then
  say "target/release/airlock is missing: building it (scripts/build.sh)"
  scripts/build.sh
fi
airlock=${AIRLOCK_BIN:-$repo/target/release/airlock}
codex=${CODEX_BIN:-$(scripts/codex-install.sh | tail -n 1)}

work=$(mktemp -d "${TMPDIR:-/tmp}/airlock-test-codex.XXXXXX")
chmod 755 "$work"
fake_pid=
cleanup() {
  if [ -n "$fake_pid" ]; then kill "$fake_pid" 2>/dev/null || true; fi
  if [ "${TEST_CODEX_KEEP:-}" = 1 ]; then say "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

export AIRLOCK_STATE_DIR=$work/state
ws=$work/ws
mkdir -p "$AIRLOCK_STATE_DIR" "$ws" "$work/home"

# Codex's own sandbox (steps 4 and 5) runs `codex-linux-sandbox` through bubblewrap: its bundled
# bwrap is given the path of Codex's binary, but a bwrap on PATH (Debian's, installed by the
# start-up benchmarks) is preferred and runs the helper by name, which it then cannot find
# ("bwrap: execvp codex-linux-sandbox"). Codex's binary is that helper when called by that name,
# so a link of that name on PATH makes both ways work: the test passes with or without a
# bubblewrap installed.
native=$codex
if [ -z "${CODEX_BIN:-}" ]; then
  found=$(find "$(dirname "$codex")/../node_modules/@openai/" -path '*/bin/codex' -type f 2>/dev/null | head -n 1)
  native=${found:-$codex}
fi
mkdir -p "$work/codex-path"
ln -s "$(realpath "$native")" "$work/codex-path/codex-linux-sandbox"
export PATH="$work/codex-path:$PATH"
echo "from the host" >"$ws/README"

# A Codex home (CODEX_HOME) whose model provider is the fake at port $2, with the config layer
# airlock.config.toml made by airlock binary $3 and, unless $4 is "norule", its rule.
codex_home() {
  local home=$1 port=$2 bin=$3
  rm -rf "$home"
  mkdir -p "$home/rules"
  cat >"$home/config.toml" <<EOF
model = "gpt-fake"
model_provider = "fake"
[model_providers.fake]
name = "fake"
base_url = "http://127.0.0.1:$port/v1"
wire_api = "responses"
env_key = "FAKE_OPENAI_KEY"
EOF
  "$bin" codex settings --workspace "$ws" >"$home/airlock.config.toml"
  if [ "${4:-}" != norule ]; then "$bin" codex rules --workspace "$ws" >"$home/rules/airlock.rules"; fi
}

# Runs `codex exec` once, with the codex options in $CODEX_OPTS (default: the airlock layer, its
# hooks trusted) and airlock binary $AIRLOCK_FOR (default: $airlock), against a fake that answers
# with the calls given (as fake_openai.py takes them); leaves the tool results, a JSON array of
# texts, in $work/results.json and Codex's thread id in $thread.
converse() {
  local record=$work/record.jsonl port=$work/port
  rm -f "$record" "$port"
  python3 scripts/fake_openai.py --port-file "$port" --record "$record" "$@" 2>"$work/fake.log" &
  fake_pid=$!
  for _ in $(seq 100); do [ -s "$port" ] && break; sleep 0.05; done
  [ -s "$port" ] || fail "the fake Responses API did not start: $(cat "$work/fake.log")"
  codex_home "$work/codex-home" "$(cat "$port")" "${AIRLOCK_FOR:-$airlock}" ${NORULE:+norule}
  [ -z "${GONE:-}" ] || rm -f "$GONE"
  # shellcheck disable=SC2086
  (cd "$ws" && HOME=$work/home CODEX_HOME=$work/codex-home FAKE_OPENAI_KEY=sk-fake \
    timeout 120 "$codex" exec --skip-git-repo-check --json ${CODEX_OPTS:---dangerously-bypass-hook-trust -p airlock} \
    "do as scripted" </dev/null >"$work/codex.out" 2>"$work/codex.err") ||
    fail "codex exited $?: $(cat "$work/codex.err" "$work/codex.out")"
  kill "$fake_pid"
  wait "$fake_pid" 2>/dev/null || true
  fake_pid=
  python3 -c 'import json, sys; print(json.dumps(json.loads(open(sys.argv[1]).readlines()[-1])["tool_results"]))' \
    "$record" >"$work/results.json"
  thread=$(python3 -c 'import json, sys; print([e for e in map(json.loads, open(sys.argv[1])) if e.get("type") == "thread.started"][0]["thread_id"])' "$work/codex.out")
}

# result N: the Nth tool result's text (Codex's header, then "Output:" and the output).
result() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[int(sys.argv[2])])' "$work/results.json" "$1"; }
# output N: only what the command printed.
output() { result "$1" | sed -n '/^Output:$/,$p' | tail -n +2; }
# says N PATTERN: result N matches PATTERN. Not a pipe into grep -q: grep stops reading at the
# first match, and the writer's broken pipe would fail the test under pipefail.
says() { local text; text=$(result "$1") && grep -q -- "$2" <<<"$text"; }
output_says() { local text; text=$(output "$1") && grep -q -- "$2" <<<"$text"; }

no_marker_anywhere() {
  [ ! -e "$ws/$1" ] || fail "$1 reached the host workspace"
  for id in $("$airlock" sessions --json | python3 -c 'import json, sys; print(" ".join(x["id"] for x in json.load(sys.stdin)))'); do
    ! "$airlock" diff "$id" --name-status | grep -q "$1" || fail "$1 is in session $id"
  done
}

sandbox_uid=$(cd "$ws" && "$airlock" run -- id -u)

say "1. a shell command runs in the session, as the sandbox user; apply_patch is denied"
converse --command 'id -u; echo made-by-the-agent > made.txt' --command 'cat made.txt'
[ "$(output 0)" = "$sandbox_uid" ] && [ "$sandbox_uid" != 0 ] ||
  fail "the first command's id -u is '$(output 0)', not the sandbox user's $sandbox_uid: $(cat "$work/results.json")"
[ "$(output 1)" = made-by-the-agent ] || fail "the second command did not see made.txt: $(result 1)"
grep -q "in airlock session codex-$thread" "$work/record.jsonl" ||
  fail "the SessionStart hook's word to the agent is in no request to the API"
[ ! -e "$ws/made.txt" ] || fail "made.txt reached the host workspace"
session=$("$airlock" sessions --json | python3 -c 'import json, sys; s = [x for x in json.load(sys.stdin) if x["name"] == sys.argv[1]]; assert len(s) == 1, s; print(s[0]["id"])' "codex-$thread")
"$airlock" diff "$session" --name-status >"$work/diff"
grep -q 'made.txt' "$work/diff" || fail "made.txt is not in 'airlock diff $session': $(cat "$work/diff")"
"$airlock" log --session "$session" --json >"$work/log"
python3 - "$work/log" <<'PY' || fail "the audit log lacks the run's intent: $(cat "$work/log")"
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
intents = [r for r in records if r["action"] == "run.intent" and "made.txt" in " ".join(r["argv"])]
assert intents and intents[0]["sandbox_uid"] != 0, intents
PY
# apply_patch as Codex gives it to the hook (the fake's model metadata does not offer the tool).
printf '%s' "{\"session_id\":\"$thread\",\"hook_event_name\":\"PreToolUse\",\"cwd\":\"$ws\",\"tool_name\":\"apply_patch\",\"tool_input\":{\"command\":\"*** Begin Patch\"},\"tool_use_id\":\"call_x\"}" |
  "$airlock" codex hook pre-tool-use --workspace "$ws" >"$work/hook.out"
grep -q '"permissionDecision":"deny"' "$work/hook.out" || fail "apply_patch was not denied: $(cat "$work/hook.out")"
say "   ok: uid $sandbox_uid in session $session (codex-$thread), made.txt only in its diff, apply_patch denied"

say "2. with airlock disabled, the command does not run"
"$airlock" disable --reason "test: stop the agent" >/dev/null 2>&1
converse --command 'touch marker-disabled'
status=0
(cd "$ws" && "$airlock" codex shell "$ws" default "$thread" 'touch marker-disabled' >"$work/shell.out" 2>&1) || status=$?
"$airlock" enable >/dev/null 2>&1
[ "$status" = 125 ] && grep -q 'test: stop the agent' "$work/shell.out" ||
  fail "airlock codex shell, disabled, exited $status: $(cat "$work/shell.out")"
says 0 'test: stop the agent' || fail "the refusal does not give the switch's reason: $(result 0)"
no_marker_anywhere marker-disabled
say "   ok: refused ($(result 0 | head -n 1 | cut -c1-120)...)"

say "3. with the airlock binary gone, the command does not run"
mkdir -p "$work/bin"
cp "$airlock" "$work/bin/airlock"
AIRLOCK_FOR=$work/bin/airlock GONE=$work/bin/airlock converse --command 'touch marker-missing'
says 0 "airlock's hook failed" || fail "the result does not say the hook failed: $(result 0)"
no_marker_anywhere marker-missing
say "   ok: refused ($(result 0 | tr '\n' ' ' | cut -c1-120))"

say "4. with the hooks not trusted, the command runs only in Codex's read-only sandbox"
CODEX_OPTS="-p airlock" converse --command 'echo x > marker-untrusted; echo status $?'
says 0 'Read-only file system' || fail "the untrusted command was not read-only: $(result 0)"
no_marker_anywhere marker-untrusted
say "   ok: $(output 0 | tr '\n' ' ' | cut -c1-120)"

say "5. Codex's sandbox modes, without the rule"
for mode in read-only workspace-write danger-full-access; do
  NORULE=1 CODEX_OPTS="--dangerously-bypass-hook-trust -p airlock -s $mode" converse --command 'id -u'
  case $mode in
  danger-full-access) [ "$(output 0)" = "$sandbox_uid" ] || fail "$mode: not in airlock: $(result 0)" ;;
  *) output_says 0 '^airlock: error: ' || fail "$mode: airlock did not refuse: $(result 0)" ;;
  esac
  say "   $mode: $(output 0 | tr '\n' ' ' | cut -c1-140)"
done
say "passed as uid $(id -u)"

uid=${TEST_CODEX_UID:-4242}
if [ "$(id -u)" = 0 ] && [ "$uid" != 0 ]; then
  # The install's wrapper runs the platform package's native binary; that binary itself, with
  # the bubblewrap Codex's sandbox needs beside it (codex-resources/bwrap, found from bin/).
  native=$(find "$(dirname "$codex")/../node_modules/@openai/" -path '*/bin/codex' -type f 2>/dev/null | head -n 1)
  mkdir -p "$work/for-uid/bin" "$work/for-uid/codex-resources"
  if [ -n "$native" ]; then
    ln "$native" "$work/for-uid/bin/codex" 2>/dev/null || cp "$native" "$work/for-uid/bin/codex"
    cp "$(dirname "$native")/../codex-resources/bwrap" "$work/for-uid/codex-resources/bwrap"
  else
    cp "$codex" "$work/for-uid/bin/codex"
  fi
  cp "$airlock" "$work/for-uid/airlock"
  chmod -R a+rX "$work/for-uid"
  say "again as uid $uid"
  setpriv --reuid="$uid" --regid="$uid" --clear-groups -- env -i PATH=/usr/local/bin:/usr/bin:/bin \
    HOME=/nonexistent TMPDIR=/tmp AIRLOCK_BIN="$work/for-uid/airlock" CODEX_BIN="$work/for-uid/bin/codex" \
    TEST_CODEX_KEEP="${TEST_CODEX_KEEP:-}" "$repo/scripts/test-codex.sh"
fi
