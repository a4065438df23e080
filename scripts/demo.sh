#!/usr/bin/env bash
# Build airlock and show it at work: a command that does normal work in its workspace, tries to
# read the host's secrets and write outside the workspace, and is stopped, while the host
# workspace is left untouched.
set -euo pipefail
cd "$(dirname "$0")/.."
# The demo's own build: a third of release's time, for a binary that starts slower (see
# [profile.demo] in Cargo.toml); scripts/test.sh builds and tests the release binary.
AIRLOCK_BUILD_PROFILE=demo scripts/build.sh
airlock="$PWD/target/demo/airlock"

demo=$(mktemp -d /tmp/airlock-demo.XXXXXX)
trap 'rm -rf "$demo"' EXIT
mkdir -p "$demo/project/src" "$demo/secrets"
printf 'fn main() { println!("hello"); }\n' > "$demo/project/src/main.rs"
printf 'aws_secret_access_key = CANARY-not-a-real-key\n' > "$demo/secrets/credentials"
export DEMO_API_TOKEN=CANARY-token

echo "\$ airlock check"
"$airlock" check || true
echo
echo "\$ airlock run --workspace $demo/project -- sh -c '…'"
set +e
"$airlock" run --workspace "$demo/project" -- sh -c "
  echo '--- normal work in the workspace'
  ls src && wc -l src/main.rs && echo 'build ok' > build.log && cat build.log
  echo '--- try to read host secrets'
  cat $demo/secrets/credentials 2>&1 | sed 's/^/    /'
  cat /etc/shadow 2>&1 | sed 's/^/    /'
  ls /root 2>&1 | sed 's/^/    /'
  echo \"    DEMO_API_TOKEN='\${DEMO_API_TOKEN:-}'\"
  echo '--- try to write outside the workspace'
  echo pwned > $demo/pwned.txt 2>&1 || true
  echo pwned > /usr/pwned.txt 2>&1 || true
  echo '--- try to reach the network'
  python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 22), timeout=2)' 2>&1 | tail -1 | sed 's/^/    /'
  echo '--- try to get privileges'
  unshare -U true 2>&1 | sed 's/^/    /'
  exit 0
"
status=$?
set -e
echo
echo "airlock exited with $status."
echo "--- on the host afterwards"
test -e "$demo/pwned.txt" && echo "    $demo/pwned.txt EXISTS (bad)" || echo "    nothing was written outside the workspace"
test -e "$demo/project/build.log" && echo "    build.log reached the host workspace (bad)" || echo "    the host workspace is unchanged: the run's changes stayed in its copy-on-write layer"
