#!/usr/bin/env bash
# airlock inside a real container engine (issue 18; what docs/containers.md says): podman from
# Debian's packages, images made from the pristine debootstrap'd bookworm root of
# scripts/lib/bookworm-root.sh (no image registry is reachable here), the release binary
# target/release/airlock bound in read-only. Run as root. Each check prints PASS or FAIL; the
# script exits 1 if any failed. Scenarios:
#   a) default options, as the container's root and as uid 1000: `airlock check` exits 3 and names
#      the container and what it blocks (the masked /proc, the overlay root under the state
#      directory); `airlock run -- true` is refused with the same reason.
#   b) the nesting options of docs/containers.md, as uid 1000 (podman's default seccomp, and
#      seccomp=unconfined) and as root in a user namespace: `airlock check` says protection full or partial,
#      and scripts/container/attacks.sh shows each attack working without airlock in the
#      container and failing in a run (a file outside the workspace, the container's processes,
#      its loopback, the workspace before apply).
#   c) the serve route: `airlock serve` on the host on a unix socket, the socket's directory
#      mounted into a default-options container, curl there runs a command in a host sandbox
#      (its hostname is the sandbox's, it reads the host workspace) and the host's audit log has it;
#      and the airlock CLI as the client there (AIRLOCK_URL=unix:...), as uid 1000 given the
#      socket's group.
# Containers, images and the server are removed on exit (TEST_CONTAINER_KEEP=1 keeps the scratch
# directory). TEST_CONTAINER_AIRLOCK=PATH tests that binary instead (it must be static: the image
# has bookworm's glibc). Timings on stderr.
#
# Facts it rests on (podman 4.3.1, Debian 12, these machines): podman needs `--runtime runc
# --cgroup-manager cgroupfs` (hybrid cgroups) and `--ulimit nofile=1024:1024 --ulimit
# nproc=4096:4096` (root here cannot raise its rlimits to podman's defaults); `podman import` of
# the root takes ~2-4 s, `podman build` of the curl image ~10 s (apt from deb.debian.org, with
# --network host). A tmpfs over a directory the image has (/home/u) comes up root-owned 0755
# whatever mode= says, so the state directory's tmpfs is /home/u/.local/state, which the image
# lacks. --userns=auto needs a "containers" range in /etc/subuid; without one the root-in-a-user-
# namespace case uses an explicit --uidmap, which is the same thing spelt out.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
[ "$(id -u)" = 0 ] || { echo "scripts/test-container.sh: run as root (podman, rootful)" >&2; exit 1; }
clock() { date +%s%N; }
since() { echo $((($(clock) - $1) / 1000000)); }
say() { echo "test-container: $*" >&2; }
began=$(clock)
failures=0
pass() { echo "PASS: $*"; }
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

if ! command -v podman >/dev/null; then
  say "installing podman (apt)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends podman runc uidmap >/dev/null
fi
airlock_bin=${TEST_CONTAINER_AIRLOCK:-$repo/target/release/airlock}
if [ ! -x "$airlock_bin" ] && [ -z "${TEST_CONTAINER_AIRLOCK:-}" ]; then
  say "target/release/airlock is missing: building it (scripts/build.sh)"
  scripts/build.sh
fi
# shellcheck source=scripts/lib/bookworm-root.sh
. scripts/lib/bookworm-root.sh
base=$(bookworm_root)

work=$(mktemp -d "${TMPDIR:-/tmp}/airlock-test-container.XXXXXX")
name=airlock-test-container-$$
base_image=localhost/$name-base:latest
tools_image=localhost/$name-tools:latest
podman=(podman --runtime runc --cgroup-manager cgroupfs)
run=("${podman[@]}" run --rm --label "$name" --ulimit nofile=1024:1024 --ulimit nproc=4096:4096
  -v "$airlock_bin:/usr/local/bin/airlock:ro")
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then kill -TERM "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null; fi
  "${podman[@]}" ps -aq --filter "label=$name" | xargs -r "${podman[@]}" rm -f >/dev/null 2>&1 || true
  "${podman[@]}" rmi -f "$tools_image" "$base_image" >/dev/null 2>&1 || true
  if [ -n "${TEST_CONTAINER_KEEP:-}" ]; then say "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'say interrupted; exit 130' INT
trap 'say terminated; exit 143' TERM

# The images: the root as it is, then a user u (uid 1000), the workspace /srv/project and curl.
started=$(clock)
tar -C "$base" -c . | "${podman[@]}" import - "$base_image" >"$work/import.log" 2>&1 ||
  { cat "$work/import.log" >&2; exit 1; }
say "podman import of $base: $(since "$started") ms"
mkdir -p "$work/image"
cat >"$work/image/Containerfile" <<EOF
FROM $base_image
RUN useradd -m -u 1000 -s /bin/bash u && mkdir -p /srv/project \\
 && echo "hello from the container workspace" >/srv/project/file.txt && chown -R u:u /srv/project
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends curl >/dev/null \\
 && rm -rf /var/lib/apt/lists/*
EOF
started=$(clock)
if ! "${podman[@]}" build -q --network host --ulimit nofile=1024:1024 --ulimit nproc=4096:4096 \
  -t "$tools_image" "$work/image" >"$work/build.log" 2>&1; then
  tail -n 20 "$work/build.log" >&2
  fail "podman build of the image with curl (apt-get from deb.debian.org, --network host) failed"
  exit 1
fi
say "podman build (user u, curl from deb.debian.org): $(since "$started") ms"

# Runs a command in a container of the tools image: in_container OUT PODMAN-OPTION... -- CMD...
# Its stdout and stderr go to OUT; its exit status is the command's.
in_container() {
  local out=$1 options=()
  shift
  while [ "$1" != -- ]; do options+=("$1") && shift; done
  shift
  "${run[@]}" "${options[@]}" "$tools_image" "$@" >"$out" 2>&1
}
indent() { sed 's/^/    /' "$1"; }

# a) Default options: check explains the refusal, run refuses with the same reason.
default_refusal() {
  local who=$1 status=0 started
  shift
  started=$(clock)
  in_container "$work/a-$who-check.out" "$@" -- sh -c 'cd /srv/project && airlock check' || status=$?
  local out=$work/a-$who-check.out missing=()
  grep -qi container "$out" || missing+=("the container")
  grep -q /proc "$out" || missing+=("/proc")
  grep -qi overlay "$out" || missing+=("overlay")
  if [ "$status" = 3 ] && [ ${#missing[@]} = 0 ]; then
    pass "a) $who, default options: 'airlock check' exits 3 and names the container, /proc and the overlay"
  else
    fail "a) $who, default options: 'airlock check' exited $status (want 3)${missing:+, its output does not name: $(printf '%s, ' "${missing[@]}" | sed 's/, $//')}"
    indent "$out"
  fi
  status=0
  in_container "$work/a-$who-run.out" "$@" -- sh -c 'cd /srv/project && airlock run -- true' || status=$?
  out=$work/a-$who-run.out
  # The root of a rootful container is the host's root: refused before anything else.
  if [ "$status" != 0 ] && grep -Eqi "/proc|overlay|the host's root" "$out"; then
    pass "a) $who, default options: 'airlock run -- true' refused (exit $status): $(tail -n 1 "$out")"
  else
    fail "a) $who, default options: 'airlock run -- true' exited $status, and its message names neither /proc nor the overlay:"
    indent "$out"
  fi
  say "a) $who: $(since "$started") ms"
}
default_refusal root
default_refusal uid-1000 --user u

# b) The nesting options of docs/containers.md: the attacks of scripts/container/attacks.sh.
nested() {
  local who=$1 started status=0
  shift
  started=$(clock)
  in_container "$work/b-$who.out" -v "$repo/scripts/container/attacks.sh:/usr/local/bin/attacks.sh:ro" \
    --security-opt 'unmask=/proc/*' "$@" -- attacks.sh || status=$?
  local out=$work/b-$who.out passed failed
  passed=$(grep -c '^PASS: ' "$out" || true)
  failed=$(grep -c '^FAIL: ' "$out" || true)
  sed -e "s/^\(PASS\|FAIL\): /\1: b) $who: /" -e "s/^info: /    b) $who: /" "$out"
  failures=$((failures + failed))
  if [ "$status" != 0 ] || { [ "$failed" = 0 ] && [ "$passed" -lt 2 ]; }; then
    fail "b) $who: attacks.sh exited $status after $passed checks passed:"
    indent "$out"
  fi
  say "b) $who: $(since "$started") ms"
}
# no-new-privileges: no setuid program of the image gives the user back the container's root.
nested uid-1000 --user u --security-opt no-new-privileges --tmpfs /home/u/.local/state:mode=1777
nested uid-1000-seccomp-unconfined --user u --security-opt no-new-privileges \
  --tmpfs /home/u/.local/state:mode=1777 --security-opt seccomp=unconfined
if grep -q '^containers:' /etc/subuid 2>/dev/null && grep -q '^containers:' /etc/subgid 2>/dev/null; then
  userns=(--userns=auto)
else
  say "b) root: /etc/subuid has no 'containers' range, which --userns=auto takes its uids from: an explicit --uidmap instead"
  userns=(--uidmap 0:400000:65536 --gidmap 0:400000:65536)
fi
nested root-in-userns "${userns[@]}" --tmpfs /var/lib/airlock:mode=0700

# c) The serve route: a host sandbox, asked through the socket's directory mounted in.
started=$(clock)
state=$work/state
workspace=$work/workspace
sockets=$work/run-airlock
mkdir -p "$state" "$workspace" "$sockets"
echo "hello from the host workspace" >"$workspace/file.txt"
unset AIRLOCK_URL AIRLOCK_TOKEN AIRLOCK_SANDBOX_UID AIRLOCK_STATE_DIR
host_airlock() { "$airlock_bin" --state-dir "$state" "$@"; }
token=$(host_airlock token create --role agent --workspace "$workspace" --name container-test 2>"$work/token.err" | tail -n 1)
[[ $token =~ ^airlock_([^_]+)_ ]] || { fail "c) token create printed '$token'"; indent "$work/token.err"; exit 1; }
token_id=${BASH_REMATCH[1]}
: >"$work/serve.err"
"$airlock_bin" --state-dir "$state" serve --listen "unix:$sockets/airlock.sock" --grace 1s \
  >"$work/serve.out" 2>"$work/serve.err" &
server_pid=$!
for _ in $(seq 200); do
  [ -S "$sockets/airlock.sock" ] && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.05
done
if [ ! -S "$sockets/airlock.sock" ]; then
  fail "c) airlock serve made no socket at $sockets/airlock.sock:"
  indent "$work/serve.err"
  exit 1
fi
command='hostname; cat file.txt'
status=0
in_container "$work/c-curl.out" --hostname client-container -v "$sockets:/run/airlock" -- \
  curl -sS --fail-with-body --unix-socket /run/airlock/airlock.sock -H "Authorization: Bearer $token" \
  -H 'Content-Type: application/json' http://airlock/v1/runs -d "{\"command\": \"$command\"}" || status=$?
if [ "$status" != 0 ]; then
  fail "c) curl in the container exited $status:"
  indent "$work/c-curl.out"
else
  if python3 - "$work/c-curl.out" "$(hostname)" <<'PY'; then
import json, sys
answer = json.load(open(sys.argv[1]))
lines = answer.get("stdout", "").splitlines()
ok = (answer.get("exit_code") == 0 and len(lines) == 2 and lines[0] not in ("client-container", sys.argv[2])
      and lines[1] == "hello from the host workspace")
open(sys.argv[1].replace("c-curl.out", "c-answer"), "w").write("hostname %r, file.txt %r" % tuple((lines + ["", ""])[:2]))
if not ok:
    sys.exit("the answer: %s" % json.dumps(answer))
PY
    pass "c) a default-options container ran '$command' in a host sandbox through the mounted socket: $(cat "$work/c-answer")"
  else
    fail "c) the answer is not what a host sandbox gives"
  fi
fi
if host_airlock log --json --action run.intent | python3 -c '
import json, sys
token, command = sys.argv[1:]
records = [json.loads(line) for line in sys.stdin if line.strip()]
sys.exit(not any((r.get("by") or {}).get("token") == token and command in (r.get("argv") or []) for r in records))
' "$token_id" "$command"; then
  pass "c) the host's audit log has the run (run.intent by token $token_id, the command in its argv)"
else
  fail "c) the host's audit log has no run.intent by token $token_id with '$command'"
  host_airlock log --json | tail -n 5 | sed 's/^/    /'
fi
# The airlock CLI as the client, as uid 1000: the socket opened to a group (as airlock.socket's
# SocketGroup= and SocketMode=0660 do), which the container's user is given with --group-add.
chgrp 4242 "$sockets/airlock.sock" && chmod 0660 "$sockets/airlock.sock"
status=0
in_container "$work/c-cli.out" --user u --group-add 4242 -v "$sockets:/run/airlock" \
  -e AIRLOCK_URL=unix:/run/airlock/airlock.sock -e AIRLOCK_TOKEN="$token" -- \
  airlock run -- sh -c 'id -un; cat file.txt' || status=$?
if [ "$status" = 0 ] && [ "$(cat "$work/c-cli.out")" = "$(printf 'agent\nhello from the host workspace')" ]; then
  pass "c) uid 1000 in a default-options container, in the socket's group: AIRLOCK_URL=unix:... airlock run ran in a host sandbox (as 'agent', the host workspace)"
else
  fail "c) the airlock CLI as a client in the container exited $status:"
  indent "$work/c-cli.out"
fi
say "c) serve route: $(since "$started") ms"

say "all: $(since "$began") ms"
if [ "$failures" != 0 ]; then
  echo "container test: $failures FAILED"
  exit 1
fi
echo "container test: passed"
