#!/usr/bin/env bash
# Developer tools built from their Go modules into a cache outside the repository (like
# hack/build-control-plane.sh), once per pinned version. Prints the tool's path.
#
#   hack/tools.sh helm        # build helm $HELM_VERSION on first use, print its path
#   hack/tools.sh actionlint  # the same for actionlint $ACTIONLINT_VERSION (GitHub workflows)
#   hack/tools.sh promtool    # the same for promtool $PROMTOOL_VERSION (the chart's alerting rules)
#   hack/tools.sh --where helm  # where the tool is, or will be once built; builds nothing
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"
cache=${MAREKVS_CACHE:-$HOME/.cache/marekvs-operator}
log() { printf '[tools] %s\n' "$*" >&2; }
where=0
if [ "${1:-}" = --where ]; then where=1; shift; fi

# build <tool> <version> <module path of its main package> <ldflags> [build tags]: go install it
# once into the cache and print its path.
build() {
  local tool=$1 version=$2 package=$3 ldflags=$4 tags=${5:-}
  local dir="$cache/bin/$tool-$version"
  if [ "$where" = 1 ]; then echo "$dir/$tool"; return; fi
  # One build of a tool at a time (.ci/run starts them in the background while lint needs
  # them): a second caller waits on the lock, then finds the tool built.
  mkdir -p "$dir"
  exec 9>"$dir/.lock"
  flock 9
  if [ ! -x "$dir/$tool" ]; then
    command -v go >/dev/null || { log "go is needed to build $tool (or put $tool $version at $dir/$tool)"; exit 1; }
    log "building $tool $version from $package (first use only)"
    CGO_ENABLED=0 GOFLAGS="-buildvcs=false ${GOFLAGS:-}" GOBIN="$dir" go install -trimpath ${tags:+-tags "$tags"} \
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
  promtool)
    # Prometheus's module is v0.3MM.P for release 3.MM.P (v0.316.0 is 3.16.0); no discovery
    # plugins (promtool's rule checks need none): about 3 minutes on 2 cores, first use only.
    minor=${PROMTOOL_VERSION#v0.}
    release="$((${minor%%.*} / 100)).$((${minor%%.*} % 100)).${minor#*.}"
    build promtool "$PROMTOOL_VERSION" github.com/prometheus/prometheus/cmd/promtool \
      "-X github.com/prometheus/common/version.Version=$release" remove_all_sd
    ;;
  *)
    echo "usage: hack/tools.sh [--where] helm|actionlint|promtool" >&2
    exit 2
    ;;
esac
