#!/usr/bin/env bash
# Refusals and `airlock learn` with the real package managers against their real registries
# (PyPI, npm, crates.io: the hosts this CI can reach): `pip download`, `npm install` and
# `cargo fetch`, as root and as an ordinary user (uid 4242, setpriv). For each:
#   1. under the default profile (no network) it fails at once: airlock's last lines name the
#      registry, and the tool tried it at most twice (no retries for seconds; the time is
#      printed, never asserted);
#   2. `airlock learn --out FILE` writes a profile that `airlock policy check` accepts;
#   3. under that profile the same command succeeds, and `curl https://example.org` is refused.
#
#   scripts/test-learn.sh        # ~2 minutes; needs python3-pip, npm, curl and a cargo
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
uid=4242

if [ "$(id -u)" = 0 ] && ! python3 -m pip --version >/dev/null 2>&1 && command -v apt-get >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pip >/dev/null
fi
/usr/bin/python3 -m pip --version >/dev/null || { echo "test-learn: /usr/bin/python3 has no pip (apt-get install python3-pip)" >&2; exit 1; }
command -v npm >/dev/null || { echo "test-learn: no npm" >&2; exit 1; }

if [ -n "${AIRLOCK_BIN:-}" ]; then
  airlock=$AIRLOCK_BIN
else
  scripts/build.sh
  airlock="$repo/target/release/airlock"
fi

work=$(mktemp -d /tmp/airlock-learn-XXXXXX)
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT
# cargo where every user can run it (rustup's toolchain under /root is root's alone): the
# toolchain's cargo and rustc (which cargo fetch asks for the target) with their libraries,
# linked (or copied) under $work and bound into the sandbox by the base profile.
toolchain=$(dirname "$(dirname "$(rustup which rustc)")")
mkdir -p "$work/tools/bin" "$work/tools/lib"
for file in bin/cargo bin/rustc $(cd "$toolchain" && echo lib/*.so*); do
  ln "$toolchain/$file" "$work/tools/$file" 2>/dev/null || cp -a "$toolchain/$file" "$work/tools/$file"
done
cat >"$work/base.toml" <<EOF
[filesystem]
read_only = ["$work/tools"]
[env]
set = { PATH = "$work/tools/bin:/usr/local/bin:/usr/bin:/bin" }
EOF
chmod 644 "$work/base.toml"

fail() {
  echo "FAILED: $*" >&2
  exit 1
}

# `as_identity ID COMMAND...`: as root, or as uid 4242 with a home of its own.
as_identity() {
  local who=$1
  shift
  if [ "$who" = root ]; then
    HOME=$work/home-root "$@"
  else
    setpriv --reuid=$uid --regid=$uid --clear-groups env -i PATH=/usr/bin:/bin HOME="$work/home-user" LANG=C.UTF-8 "$@"
  fi
}

# `workspace ID TOOL`: a fresh workspace for TOOL, owned by ID.
workspace() {
  local dir="$work/$1/$2"
  mkdir -p "$dir"
  case ${2%-again} in
    cargo)
      mkdir -p "$dir/src"
      printf '[package]\nname = "fetched"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\nitoa = "1"\n' >"$dir/Cargo.toml"
      echo 'fn main() {}' >"$dir/src/main.rs"
      ;;
    npm) echo '{"name": "fetched", "version": "1.0.0"}' >"$dir/package.json" ;;
  esac
  [ "$1" = root ] || chown -R $uid:$uid "$dir"
  echo "$dir"
}

# The command each tool's test runs (in its workspace), and the registry it must name.
command_of() {
  case $1 in
    pip) echo "python3 -m pip download --no-deps --no-cache-dir -d /tmp/downloaded six" ;;
    npm) echo "npm install --no-audit --no-fund is-number" ;;
    cargo) echo "cargo fetch" ;;
  esac
}
registry_of() {
  case $1 in
    pip) echo pypi.org ;;
    npm) echo registry.npmjs.org ;;
    cargo) echo index.crates.io ;;
  esac
}

for who in root user; do
  mkdir -p "$work/home-$who" "$work/profiles-$who"
  [ "$who" = root ] || chown $uid:$uid "$work/home-$who" "$work/profiles-$who"
  for tool in pip npm cargo; do
    echo "== $tool as $who"
    ws=$(workspace "$who" "$tool")
    read -r -a cmd <<<"$(command_of "$tool")"
    registry=$(registry_of "$tool")

    # 1. Refused at once, and said.
    start=$(date +%s.%N)
    if as_identity "$who" "$airlock" run -w "$ws" --profile-file "$work/base.toml" -- "${cmd[@]}" >"$work/out" 2>"$work/err"; then
      fail "$tool as $who reached the network under a profile with none: $(cat "$work/err")"
    fi
    took=$(echo "$(date +%s.%N) - $start" | bc)
    line=$(grep "^airlock: refused $registry " "$work/err") ||
      fail "$tool as $who: no 'refused $registry' line: $(tail -5 "$work/err")"
    attempts=$(sed -E 's/.*\(([0-9]+)×\).*/\1/' <<<"$line")
    [ "$attempts" -le 2 ] || fail "$tool as $who tried $registry $attempts times (retries): $line"
    echo "   refused in ${took}s: $line"

    # 2. Learned.
    learned="$work/profiles-$who/$tool.toml"
    as_identity "$who" "$airlock" learn -w "$ws" --profile-file "$work/base.toml" --out "$learned" -- "${cmd[@]}" >"$work/out" 2>"$work/err" ||
      fail "$tool as $who: the learning run failed: $(tail -20 "$work/err")"
    grep -q "\"$registry:443\"" "$learned" || fail "$tool as $who: $registry not in the learned profile: $(cat "$learned")"
    as_identity "$who" "$airlock" policy check "$learned" >/dev/null || fail "$tool as $who: the learned profile does not check: $(cat "$learned")"
    grep '^    "' "$learned" | sed 's/^/   learned: /'

    # 3. The same command runs under it, in a fresh workspace; another host is refused.
    ws=$(workspace "$who" "$tool-again")
    as_identity "$who" "$airlock" run -w "$ws" --profile-file "$learned" -- "${cmd[@]}" >"$work/out" 2>"$work/err" ||
      fail "$tool as $who failed under its learned profile: $(tail -20 "$work/err")"
    if as_identity "$who" "$airlock" run -w "$ws" --profile-file "$learned" -- curl -sS -m 10 https://example.org >"$work/out" 2>"$work/err"; then
      fail "$tool as $who: example.org reached under the learned profile"
    fi
    grep -q "^airlock: refused example.org" "$work/err" || fail "$tool as $who: example.org not said refused: $(cat "$work/err")"
  done
done
echo "test-learn: ok"
