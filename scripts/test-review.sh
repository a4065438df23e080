#!/usr/bin/env bash
# The review page with a real browser: Debian's chromium (apt), driven by Playwright (PyPI,
# pointed at the system browser: nothing is downloaded at test time), against `airlock serve`
# on a loopback port, as root and as an ordinary user (uid 4242, setpriv). scripts/review_page.py
# logs in with the link `airlock review` prints, reviews a session's changes (hidden characters
# shown, a hazard left out until ticked), applies, kills a running command from the page, and
# tries the browser attacks (a same-site form post and a text/plain fetch from another origin,
# a DNS-rebinding name). Screenshots of each page go to
# ${AIRLOCK_ARTIFACTS:-target/artifacts}/review/IDENTITY/.
#
#   scripts/test-review.sh        # ~1 minute once chromium and Playwright are installed
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
uid=4242
version=1.65.3
cache=${AIRLOCK_CI_CACHE:-$HOME/.cache/airlock-ci}
venv="$cache/playwright-venv"
artifacts=${AIRLOCK_ARTIFACTS:-$repo/target/artifacts}/review

if ! command -v chromium >/dev/null; then
  [ "$(id -u)" = 0 ] || { echo "test-review: needs chromium (apt-get install chromium)" >&2; exit 1; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
# shellcheck source=scripts/lib/clients.sh
. scripts/lib/clients.sh
pinned_venv "$venv" playwright "playwright==$version"
airlock_binary

work=$(mktemp -d /tmp/airlock-review-XXXXXX)
chmod 755 "$work"
cp "$airlock" "$work/airlock"
chmod 755 "$work/airlock"
server=
stop() {
  if [ -n "$server" ] && kill -0 "$server" 2>/dev/null; then
    kill -TERM "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
  fi
  server=
}
trap 'stop; rm -rf "$work"' EXIT

identities=(root)
if [ "$(id -u)" = 0 ]; then
  identities+=(user)
elif [ -n "${AIRLOCK_TEST_REQUIRE_ROOT:-}" ]; then
  echo "test-review: AIRLOCK_TEST_REQUIRE_ROOT is set and this is not root" >&2
  exit 1
fi

for who in "${identities[@]}"; do
  echo "== the review page, airlock serve as $who"
  home="$work/$who"
  mkdir -p "$home/state" "$home/ws"
  chmod 700 "$home/state"
  # The default profile (the tokens' own) asks a person about *.asked.test, for 30 s: time for the
  # page to show the question and for the test to type a reason and answer, on a loaded machine.
  mkdir -p "$home/.config/airlock/profiles"
  printf '[network]\nask = ["*.asked.test"]\nask_timeout = "30s"\n' >"$home/.config/airlock/profiles/default.toml"
  chmod 644 "$home/.config/airlock/profiles/default.toml"
  # The workspace is a git repository that ignores .venv/: a tree the page shows as one row.
  git -C "$home/ws" init -q
  printf '.venv/\n' >"$home/ws/.gitignore"
  git -C "$home/ws" add -A
  git -C "$home/ws" -c user.name=test -c user.email=test@example.org commit -qm init
  wrapper="$home/airlock-as"
  if [ "$who" = root ] && [ "$(id -u)" = 0 ]; then
    printf '#!/bin/sh\nHOME=%s exec %s --state-dir %s "$@"\n' "$home" "$work/airlock" "$home/state" >"$wrapper"
  else
    chown -R $uid:$uid "$home"
    printf '#!/bin/sh\nexec setpriv --reuid=%s --regid=%s --clear-groups env -i PATH=/usr/bin:/bin HOME=%s LANG=C.UTF-8 %s --state-dir %s "$@"\n' \
      $uid $uid "$home" "$work/airlock" "$home/state" >"$wrapper"
  fi
  chmod 755 "$wrapper"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$wrapper" serve --listen "127.0.0.1:$port" 2>"$home/serve.log" &
  server=$!
  for _ in $(seq 100); do
    grep -q "serving on" "$home/serve.log" 2>/dev/null && break
    sleep 0.1
  done
  grep -q "serving on" "$home/serve.log" || { cat "$home/serve.log" >&2; echo "FAILED: airlock serve did not start" >&2; exit 1; }
  rm -rf "${artifacts:?}/$who"
  if ! "$venv/bin/python" scripts/review_page.py "http://127.0.0.1:$port" "$wrapper" "$home/ws" "$artifacts/$who"; then
    echo "--- the server said:" >&2
    cat "$home/serve.log" >&2
    exit 1
  fi
  stop
done
echo "test-review: passed (screenshots in $artifacts)"
