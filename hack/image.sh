#!/usr/bin/env bash
# `make image` / `make image-push`: build (or push) the operator image IMAGE:TAG from the
# Dockerfile with the first container engine found (docker, podman, nerdctl, buildah), or
# CONTAINER_ENGINE if set. Without one it says so, and where the docs are.
#
#   hack/image.sh build IMAGE TAG
#   hack/image.sh push IMAGE TAG
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
action=${1:?usage: hack/image.sh build|push IMAGE TAG}
image=${2:?image name missing}
tag=${3:?image tag missing}

# An engine counts only if it answers: a docker CLI without a daemon is not one.
works() {
  case "$(basename "$1")" in
    buildah) "$1" version >/dev/null 2>&1 ;;
    *) "$1" info >/dev/null 2>&1 ;;
  esac
}
engine= tried=()
for candidate in ${CONTAINER_ENGINE:-docker podman nerdctl buildah}; do
  command -v "$candidate" >/dev/null 2>&1 || continue
  if works "$candidate"; then engine=$candidate; break; fi
  tried+=("$candidate (installed, but \`$(basename "$candidate") info\` fails: is its daemon or socket up?)")
done
if [ -z "$engine" ]; then
  {
    echo "make image: no working container engine (looked for ${CONTAINER_ENGINE:-docker, podman, nerdctl and buildah})."
    for t in "${tried[@]}"; do echo "  found $t"; done
    echo "Install and start one of them, or set CONTAINER_ENGINE=/path/to/engine, to build $image:$tag."
    echo "See docs/install.md#building-and-pushing-the-image. The local harness (make demo, make test)"
    echo "needs no image: it runs the operator binary it builds."
  } >&2
  exit 1
fi

case "$action" in
  build)
    # The same flags for all four (buildah's `build` is its `bud`).
    "$engine" build --file "$repo/Dockerfile" --tag "$image:$tag" "$repo"
    echo "built $image:$tag with $(basename "$engine")" >&2
    ;;
  push)
    "$engine" push "$image:$tag"
    ;;
  *) echo "unknown action '$action' (build or push)" >&2; exit 2 ;;
esac
