#!/usr/bin/env bash
# Part of `make lint`: render deploy/ and every overlay in deploy/overlays/ with `kubectl
# kustomize` (the pinned kubectl of hack/build-control-plane.sh, built on first use as every
# hack script does; nothing is sent to any cluster) and check what the RBAC promises. A broken
# overlay, or a role that grew a permission this script forbids, fails CI.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
bin=$("$here/build-control-plane.sh")

fail() { echo "check-deploy: $*" >&2; exit 1; }
render() { "$bin/kubectl" kustomize "$REPO/$1" || fail "kubectl kustomize $1 failed"; }
# doc KIND NAME: the rendered document of that kind and metadata.name (empty if none).
doc() {
  awk -v want_kind="$1" -v want_name="$2" '
    function flush() { if (kind == want_kind && name == want_name) printf "%s", buf; buf = ""; kind = ""; name = ""; inmeta = 0 }
    /^---$/ { flush(); next }
    { buf = buf $0 "\n" }
    /^kind: / { kind = $2 }
    /^metadata:/ { inmeta = 1; next }
    /^[^ ]/ { inmeta = 0 }
    inmeta && /^  name: / && name == "" { name = $2 }
    END { flush() }'
}
rules() { sed -n '/^rules:/,$p'; }
has() { grep -qE -- "$1"; }
# secrets_rules: each rule (of the rendered roles) that names secrets, one per paragraph.
secrets_rules() {
  awk '/^(---|rules:)$/ { if (r ~ /\n  - secrets\n/) printf "%s\n", r; r = ""; inrules = ($0 == "rules:"); next }
       inrules && /^- / { if (r ~ /\n  - secrets\n/) printf "%s\n", r; r = "" }
       inrules && /^[- ]/ { r = r $0 "\n"; next }
       { if (r ~ /\n  - secrets\n/) printf "%s\n", r; r = ""; inrules = 0 }
       END { if (r ~ /\n  - secrets\n/) printf "%s\n", r }'
}
# Secrets: only `get`, in a rule of its own (the password of spec.auth, read by name).
secrets_get_only() {
  local want="- apiGroups:
  - \"\"
  resources:
  - secrets
  verbs:
  - get"
  local got
  got=$(secrets_rules <<<"$2")
  [ -z "$got" ] && return 0
  while IFS= read -r -d '' one; do
    [ "$one" = "$want" ] || fail "$1: secrets granted beyond a rule of get alone: $one"
  done < <(awk 'BEGIN { RS = "" } { printf "%s%c", $0, 0 }' <<<"$got")
}

base=$(render deploy)
cluster_role=$(doc ClusterRole marekvs-operator <<<"$base")
[ -n "$cluster_role" ] || fail "deploy/: no ClusterRole marekvs-operator"
has 'leases' <<<"$cluster_role" && fail "deploy/: the ClusterRole grants leases (they belong in the Role in marekvs-system)"
election=$(doc Role marekvs-operator-leader-election <<<"$base")
has '^  namespace: marekvs-system$' <<<"$election" || fail "deploy/: no leader-election Role in marekvs-system"
# get/update only on the Lease named marekvs-operator; create (not limitable by name) alone.
[ "$(rules <<<"$election")" = "rules:
- apiGroups:
  - coordination.k8s.io
  resourceNames:
  - marekvs-operator
  resources:
  - leases
  verbs:
  - get
  - update
- apiGroups:
  - coordination.k8s.io
  resources:
  - leases
  verbs:
  - create" ] || fail "deploy/: the leader-election Role is not exactly get/update on marekvs-operator and create"
pdb=$(doc PodDisruptionBudget marekvs-operator <<<"$base")
has '^  minAvailable: 1$' <<<"$pdb" || fail "deploy/: the operator has no PDB with minAvailable: 1"
has 'topologyKey: kubernetes.io/hostname' <<<"$(doc Deployment marekvs-operator <<<"$base")" ||
  fail "deploy/: the operator Deployment does not spread over nodes"

for dir in "$REPO"/deploy/overlays/*/; do
  name=deploy/overlays/$(basename "$dir")
  out=$(render "$name")
  if has '^kind: (Role|ClusterRole)$' <<<"$out"; then
    has '^  - (nodes|pods/exec|\*)$' <<<"$out" && fail "$name: a role grants nodes, exec or *"
    secrets_get_only "$name" "$out"
  fi
done
has '^  - (nodes|pods/exec|\*)$' <<<"$base" && fail "deploy/: a role grants nodes, exec or *"
secrets_get_only deploy/ "$base"
has '^  - secrets$' <<<"$cluster_role" || fail "deploy/: the ClusterRole cannot get the Secret of spec.auth"

ns=deploy/overlays/namespaced
out=$(render $ns)
has '^kind: ClusterRole(Binding)?$' <<<"$out" && fail "$ns: still a ClusterRole or ClusterRoleBinding"
role=$(doc Role marekvs-operator <<<"$out")
[ -n "$role" ] || fail "$ns: no Role marekvs-operator"
watched=$(sed -n 's/^  namespace: //p' <<<"$role")
[ "$(rules <<<"$role")" = "$(rules <<<"$cluster_role")" ] || fail "$ns: the Role's rules differ from the ClusterRole's"
binding=$(doc RoleBinding marekvs-operator <<<"$out")
has "^  namespace: $watched\$" <<<"$binding" || fail "$ns: no RoleBinding marekvs-operator in $watched"
[ "$(sed -n '/^roleRef:/,/^[^ r]/p' <<<"$binding")" = "roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: marekvs-operator
subjects:" ] || fail "$ns: the RoleBinding does not bind the Role marekvs-operator"
has "^        - --namespace=$watched\$" <<<"$(doc Deployment marekvs-operator <<<"$out")" ||
  fail "$ns: the operator does not run with --namespace=$watched"
[ "$(rules <<<"$(doc Role marekvs-operator-leader-election <<<"$out")")" = "$(rules <<<"$election")" ] ||
  fail "$ns: the leader-election Role differs from deploy/'s"
echo "check-deploy: deploy/ and $(ls -d "$REPO"/deploy/overlays/*/ | wc -l) overlay(s) render; RBAC as promised (namespaced overlay watches $watched)" >&2
