#!/bin/bash
# Run inside a container started with the nesting options (scripts/test-container.sh, scenario b),
# as the container's user, in the workspace /srv/project. Each attack is shown to work without
# airlock in this same container, then to fail in airlock's sandbox. One line per check, "PASS: ..."
# or "FAIL: ...": the caller counts them.
set -u
cd /srv/project || { echo "FAIL: no /srv/project in the image"; exit 0; }
# The workspace is the image's user's: the container's root works on a copy of its own (the
# sandbox maps only the uid that runs airlock, so another uid's files are not its to write).
if [ "$(stat -c %u .)" != "$(id -u)" ]; then
  cp -r /srv/project "/srv/project-$(id -u)" && cd "/srv/project-$(id -u)" || exit 0
fi
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; }

# Every layer there (full, exit 0), or every one with a stand-in where a container keeps the
# cgroups from airlock (partial, exit 4: rlimits instead); never missing or degraded (3).
status=0
out=$(airlock check 2>&1) || status=$?
if { [ $status = 0 ] && [[ $out == *"protection: full"* ]]; } ||
  { [ $status = 4 ] && [[ $out == *"protection: partial"* ]]; }; then
  pass "airlock check: $(grep -o 'protection: [a-z]*' <<<"$out") (exit $status)"
else
  fail "airlock check did not say protection full or partial (exit $status):"
  while IFS= read -r line; do echo "    $line"; done <<<"$out"
  exit 0
fi

# Every attack below must fail for the sandbox's sake, not because a run fails outright.
if ! ran=$(airlock run -- echo a-run-works 2>&1) || [ "$ran" != a-run-works ]; then
  fail "a plain 'airlock run -- echo' fails here, so no attack proves anything:"
  while IFS= read -r line; do echo "    $line"; done <<<"$ran"
  exit 0
fi
pass "a plain run works: 'airlock run -- echo a-run-works' printed it"

# 1. A file outside the workspace: the container's home (and /etc, which only root may write).
targets=("$HOME/planted-by-attack")
[ "$(id -u)" = 0 ] && targets+=(/etc/planted-by-attack)
for target in "${targets[@]}"; do
  rm -f "$target"
  if ! (echo plain >"$target") 2>/dev/null; then
    fail "without airlock, $target could not be written: the check would prove nothing"
    continue
  fi
  rm -f "$target"
  airlock run -- sh -c "echo attack > '$target'" >/dev/null 2>&1
  if [ -e "$target" ]; then fail "a run wrote $target in the container"; else
    pass "write outside the workspace: $target written without airlock, not by a run"; fi
done

# 2. The container's other processes: a sleep started here, visible and signalable without airlock.
sleep 7777 &
sleeper=$!
cmdlines() { for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' <"$f" 2>/dev/null; echo; done; }
if cmdlines | grep -qx 'sleep 7777 ' && kill -0 "$sleeper"; then
  seen=$(airlock run -- bash -c "$(declare -f cmdlines); cmdlines" 2>&1)
  if ! grep -q bash <<<"$seen"; then fail "a run's /proc showed not even its own bash: $seen"
  elif grep -qx 'sleep 7777 ' <<<"$seen"; then fail "a run sees the container's sleep in its /proc"; else
    pass "processes: the container's 'sleep 7777' (pid $sleeper) is in /proc without airlock, not in a run's"; fi
  if airlock run -- kill -0 "$sleeper" >/dev/null 2>&1; then fail "a run could signal pid $sleeper"; else
    pass "processes: kill -0 $sleeper works without airlock, fails in a run"; fi
else
  fail "without airlock the sleep is not in /proc: the check would prove nothing"
fi
kill "$sleeper" 2>/dev/null

# 3. A TCP server on the container's loopback (perl is in the image's perl-base; python is not).
perl -MIO::Socket::INET -e '
  my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1:7788", Listen => 5, ReuseAddr => 1) or die "listen: $!";
  while (my $c = $s->accept) { print $c "loopback-secret\n"; close $c }' &
listener=$!
connect() { timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/7788 && head -n 1 <&3' 2>/dev/null; }
for _ in $(seq 50); do [ "$(connect)" = loopback-secret ] && break; sleep 0.1; done
if [ "$(connect)" = loopback-secret ]; then
  got=$(airlock run -- bash -c "$(declare -f connect); connect" 2>/dev/null)
  if [ "$got" = loopback-secret ]; then fail "a run reached 127.0.0.1:7788 of the container"; else
    pass "network: 127.0.0.1:7788 answers without airlock, not in a run"; fi
else
  fail "without airlock the listener on 127.0.0.1:7788 did not answer: the check would prove nothing"
fi
kill "$listener" 2>/dev/null

# 4. The workspace: a session's change is not in it until apply.
before=$(cat file.txt)
if airlock session new --name nested >/dev/null 2>&1 &&
  session_run=$(airlock run --session nested -- sh -c 'echo changed-in-session > file.txt' 2>&1); then
  if [ "$(cat file.txt)" = "$before" ]; then
    pass "workspace: unchanged in the container after a session's run"
  else
    fail "the session's run changed the container's workspace before apply"
  fi
  if airlock apply nested >/dev/null 2>&1 && [ "$(cat file.txt)" = changed-in-session ]; then
    pass "workspace: 'airlock apply' then wrote the change"
  else
    fail "'airlock apply nested' did not write the change"
  fi
else
  fail "a session run failed: ${session_run:-'airlock session new' failed}"
fi

# A run's host name: the sandbox's own, or the container's where the container's seccomp refuses
# sethostname (podman's default profile does, without CAP_SYS_ADMIN); then check must say so, and
# not promise an own host name on its uts line.
run_host=$(airlock run -- hostname 2>&1)
uts_line=$(grep -i 'uts' <<<"$out")
if [ "$run_host" = "$(hostname)" ]; then
  if grep -qi 'own hostname' <<<"$uts_line"; then
    fail "a run keeps the container's host name $run_host, and check's uts line promises its own: $uts_line"
  else
    pass "host name: a run keeps the container's ($run_host), and check says: $uts_line"
  fi
elif [ -n "$run_host" ] && [[ $run_host != *error* ]]; then
  pass "host name: a run has its own ($run_host; the container's is $(hostname))"
else
  fail "'airlock run -- hostname' printed: $run_host"
fi
