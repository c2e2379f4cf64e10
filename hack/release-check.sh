#!/usr/bin/env bash
# `make release-check`: the dry run of a release (.github/workflows/release.yaml), on every
# commit. It renders every shipped manifest (deploy/ and its overlays with kubectl kustomize, the
# chart with helm template in both scopes, deploy/examples, the YAML in README.md and docs/),
# builds kubectl-mkv here, and has hack/release.py check that:
#   - the crates, the chart (version, appVersion) and deploy/'s image tags carry one version,
#     and CHANGELOG.md has its section (dated, when RELEASE_TAG=vX.Y.Z is given, as the
#     workflow does for the tag it releases);
#   - every image named is one the release builds (hack/release.env's RELEASE_IMAGE at that
#     version) or the pinned member image;
#   - the krew manifest is the one generated from the plugin archives as packed (the local
#     build stands in for each target's binary).
# First it plants each of those mistakes in a copy and checks that each is caught.
#
#   hack/release-check.sh                    self-test, then check this repository
#   hack/release-check.sh --one ROOT BINARY  check the repository copy at ROOT (the self-test's step)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

if [ "${1:-}" = "--one" ]; then
  root=$2 binary=$3
  bin=$("$here/build-control-plane.sh")
  helm=$("$here/tools.sh" helm)
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
  "$bin/kubectl" kustomize "$root/deploy" > "$out/deploy.yaml"
  for dir in "$root"/deploy/overlays/*/; do
    "$bin/kubectl" kustomize "$dir" > "$out/overlay-$(basename "$dir").yaml"
  done
  "$helm" template marekvs-operator "$root/deploy/helm/marekvs-operator" -n marekvs-system > "$out/chart.yaml"
  "$helm" template marekvs-operator "$root/deploy/helm/marekvs-operator" -n apps --set scope=namespace > "$out/chart-namespaced.yaml"
  for f in "$root"/deploy/examples/*.yaml; do cp "$f" "$out/example-$(basename "$f")"; done
  # The YAML blocks of the README and docs/: what a user copies.
  for f in "$root"/README.md "$root"/docs/*.md; do
    awk '/^```yaml/ { y = 1; next } /^```/ { y = 0 } y' "$f" > "$out/doc-$(basename "$f" .md).yaml"
    grep -q 'image:' "$out/doc-$(basename "$f" .md).yaml" || rm "$out/doc-$(basename "$f" .md).yaml"
  done
  exec python3 "$here/release.py" --root "$root" check ${RELEASE_TAG:+--tag "$RELEASE_TAG"} \
    --rendered "$out"/*.yaml --plugin-binary "$binary"
fi

build_all
binary=${CARGO_TARGET_DIR:-$REPO/target}/debug/kubectl-mkv
python3 "$here/release.py" --root "$REPO" --self-test --rendered-cmd "$here/release-check.sh" --plugin-binary "$binary"
"$here/release-check.sh" --one "$REPO" "$binary"
