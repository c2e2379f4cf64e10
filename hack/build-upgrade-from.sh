#!/usr/bin/env bash
# Builds the operator as it stood at the commit e2e/upgrade-from.env pins, for the upgrade test
# (e2e/tests/upgrade.rs): its binary (cached outside the repository, keyed by commit) and its
# deploy/ tree (extracted under .state/, where kustomize may read it). Prints the directory
# holding COMMIT, bin/marekvs-operator and deploy/.
#
# Needs the commit in this clone's history (a shallow CI checkout needs fetch-depth: 0).
#
#   hack/build-upgrade-from.sh           # build what is missing, print the directory
#   hack/build-upgrade-from.sh --where   # print the directory it is, or will be, in; build nothing
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
# shellcheck source=../e2e/upgrade-from.env
. "$REPO/e2e/upgrade-from.env"
commit=$UPGRADE_FROM_COMMIT
git -C "$REPO" cat-file -e "$commit^{commit}" 2>/dev/null || {
  log "commit $commit (e2e/upgrade-from.env) is not in this clone's history; fetch it (a shallow checkout needs fetch-depth: 0)"
  exit 1
}
cache=${MAREKVS_CACHE:-$HOME/.cache/marekvs-operator}/upgrade-from/$commit
out=$REPO/.state/upgrade-from/$commit
if [ "${1:-}" = --where ]; then echo "$out"; exit 0; fi
# One build at a time (hack/test-e2e.sh starts it in the background).
mkdir -p "$(dirname "$cache")"
exec 9>"$(dirname "$cache")/.lock"
flock 9
if [ ! -x "$cache/marekvs-operator" ]; then
  log "building the operator at $commit (once; cached in $cache)"
  src=$(mktemp -d)
  git -C "$REPO" archive "$commit" | tar -x -C "$src"
  # A target (or build) directory of its own, never this checkout's: cargo names a workspace
  # crate's artifacts by its path under the workspace root, the same in both trees, so the
  # pinned commit's marekvs-core would replace this checkout's (seen: a shared build directory
  # had the unit stage compile marekvs-api against the old core).
  (cd "$src" && CARGO_TARGET_DIR="$cache/target" cargo build -q --locked -p marekvs-operator --bin marekvs-operator)
  mkdir -p "$cache"
  cp "$cache/target/debug/marekvs-operator" "$cache/marekvs-operator.tmp"
  mv "$cache/marekvs-operator.tmp" "$cache/marekvs-operator"
  rm -rf "$src" "$cache/target"
fi
rm -rf "$out"
mkdir -p "$out/bin"
git -C "$REPO" archive "$commit" deploy | tar -x -C "$out"
ln -s "$cache/marekvs-operator" "$out/bin/marekvs-operator"
echo "$commit" > "$out/COMMIT"
echo "$out"
