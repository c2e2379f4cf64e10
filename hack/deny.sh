#!/usr/bin/env bash
# Supply-chain checks with cargo-deny (config: deny.toml). Installs the pinned cargo-deny when
# it is missing.
#
#   licenses, bans, sources   always checked; any finding fails.
#   advisories                checked against the RustSec database, fetched from github.com or
#                             from MAREKVS_ADVISORY_DB_URL (an https git mirror). Where the
#                             database cannot be fetched, this prints "advisories NOT CHECKED"
#                             and carries on, unless MAREKVS_REQUIRE_ADVISORIES=1.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
cd "$REPO"
version=0.20.2
if ! cargo deny --version 2>/dev/null | grep -q " $version\$"; then
  log "installing cargo-deny $version"
  # An unoptimised build: about a minute on 2 cores instead of three and a half, and it
  # runs its checks in seconds either way.
  cargo install cargo-deny --version "$version" --locked --quiet --debug
fi
cargo deny --log-level error check licenses bans sources

config=deny.toml
if [ -n "${MAREKVS_ADVISORY_DB_URL:-}" ]; then
  config=$(mktemp --suffix .toml)
  trap 'rm -f "$config"' EXIT
  sed "s|^\[advisories\]|[advisories]\ndb-urls = [\"$MAREKVS_ADVISORY_DB_URL\"]|" deny.toml > "$config"
fi
out=$(mktemp)
if cargo deny --log-level error --config "$config" check advisories 2> "$out"; then
  log "advisories ok"
elif grep -q "failed to fetch advisory database" "$out"; then
  grep -m1 -E "fatal|Could not" "$out" >&2 || true
  if [ "${MAREKVS_REQUIRE_ADVISORIES:-0}" = 1 ]; then
    log "advisories: the RustSec database could not be fetched"; exit 1
  fi
  log "advisories NOT CHECKED: the RustSec database could not be fetched (set MAREKVS_ADVISORY_DB_URL to a mirror, or MAREKVS_REQUIRE_ADVISORIES=1 to fail here)"
else
  cat "$out" >&2; rm -f "$out"; exit 1
fi
rm -f "$out"
