# shellcheck shell=bash
# Sourced by the real-client tests (scripts/test-*.sh): what each of them did the same way.
#
#   pinned_venv DIR IMPORT PIN...   a venv at DIR holding exactly these pins (made again when they
#                                   change, or when `import IMPORT` fails there)
#   airlock_binary                  sets $airlock: $AIRLOCK_BIN, or the release build (scripts/build.sh)
#   stop_server                     ends the server started as $server (SIGTERM, waited for)

pinned_venv() {
  local dir=$1 import=$2
  shift 2
  local pins="$*"
  if [ "$(cat "$dir/.airlock-pins" 2>/dev/null)" != "$pins" ] || ! "$dir/bin/python" -c "import $import" 2>/dev/null; then
    rm -rf "$dir"
    mkdir -p "$(dirname "$dir")"
    "${PYTHON:-python3}" -m venv "$dir"
    "$dir/bin/pip" install --quiet --disable-pip-version-check "$@"
    echo "$pins" >"$dir/.airlock-pins"
  fi
}

# shellcheck disable=SC2034 # $airlock is the sourcing script's
airlock_binary() {
  if [ -n "${AIRLOCK_BIN:-}" ]; then
    airlock=$AIRLOCK_BIN
  else
    scripts/build.sh
    airlock="$PWD/target/release/airlock"
  fi
}

server=
stop_server() {
  if [ -n "$server" ] && kill -0 "$server" 2>/dev/null; then
    kill -TERM "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
  fi
  server=
}
