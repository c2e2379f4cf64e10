#!/usr/bin/env bash
# Developer tools built from their Go modules into a cache outside the repository (like
# hack/build-control-plane.sh), once per pinned version. Prints the tool's path.
#
#   hack/tools.sh helm        # build helm $HELM_VERSION on first use, print its path
#   hack/tools.sh actionlint  # the same for actionlint $ACTIONLINT_VERSION (GitHub workflows)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"
cache=${MAREKVS_CACHE:-$HOME/.cache/marekvs-operator}
log() { printf '[tools] %s\n' "$*" >&2; }

# build <tool> <version> <module path of its main package> <ldflags>: go install it once into
# the cache and print its path.
build() {
  local tool=$1 version=$2 package=$3 ldflags=$4
  local dir="$cache/bin/$tool-$version"
  if [ ! -x "$dir/$tool" ]; then
    command -v go >/dev/null || { log "go is needed to build $tool (or put $tool $version at $dir/$tool)"; exit 1; }
    log "building $tool $version from $package (first use only)"
    mkdir -p "$dir"
    CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOBIN="$dir" go install -trimpath \
      -ldflags "-s -w $ldflags" "$package@$version"
  fi
  echo "$dir/$tool"
}

case "${1:-}" in
  helm)
    build helm "$HELM_VERSION" helm.sh/helm/v3/cmd/helm \
      "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
    ;;
  actionlint)
    build actionlint "$ACTIONLINT_VERSION" github.com/rhysd/actionlint/cmd/actionlint \
      "-X github.com/rhysd/actionlint.version=$ACTIONLINT_VERSION"
    ;;
  *)
    echo "usage: hack/tools.sh helm|actionlint" >&2
    exit 2
    ;;
esac
