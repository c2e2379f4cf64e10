#!/usr/bin/env bash
# Coverage-guided fuzzing of the metrics parser (fuzz/fuzz_targets/metrics_parser.rs) with
# cargo-fuzz (libFuzzer). Installs a nightly toolchain and the pinned cargo-fuzz when missing.
# A crash or a failed assertion fails the run and leaves the input under fuzz/artifacts/;
# replay it with: cd fuzz && cargo +nightly fuzz run metrics_parser artifacts/metrics_parser/<file>
#
#   hack/fuzz.sh [SECONDS]      # default 60
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
secs=${1:-60}
version=0.13.2
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
if ! cargo fuzz --version 2>/dev/null | grep -q " $version\$"; then
  log "installing cargo-fuzz $version"
  # An unoptimised build (a fraction of the release build's time); it only drives cargo.
  cargo install cargo-fuzz --version "$version" --locked --quiet --debug
fi
# A target directory of its own: the nightly build with sanitizer flags would otherwise replace
# the stable build's artifacts in a shared one (.ci/run shares one across clones).
[ -z "${CARGO_TARGET_DIR:-}" ] || export CARGO_TARGET_DIR=$CARGO_TARGET_DIR-fuzz
cd "$REPO/fuzz"
mkdir -p corpus/metrics_parser
out=$(mktemp)
trap 'rm -f "$out"' EXIT
rc=0
# The first corpus directory collects what the fuzzer finds; seeds/ is the committed start.
cargo +nightly fuzz run metrics_parser corpus/metrics_parser seeds/metrics_parser -- \
  -max_total_time="$secs" -max_len=8192 -print_final_stats=1 > "$out" 2>&1 || rc=$?
if [ $rc -ne 0 ]; then
  tail -n 40 "$out" >&2
  log "the fuzzer found a failing input (see above and fuzz/artifacts/metrics_parser/)"
  exit $rc
fi
runs=$(awk '/^stat::number_of_executed_units/ { print $2 }' "$out")
cov=$(grep -oE 'cov: [0-9]+' "$out" | tail -1)
log "metrics_parser: $runs inputs in ${secs}s, $cov edges, no failure"
