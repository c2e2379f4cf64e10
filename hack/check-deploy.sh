#!/usr/bin/env bash
# Part of `make lint`: render deploy/ and every overlay in deploy/overlays/ with `kubectl
# kustomize` (the pinned kubectl of hack/build-control-plane.sh, built on first use as every
# hack script does; nothing is sent to any cluster) and check what the RBAC promises. A broken
# overlay, or a role that grew a permission this script forbids, fails CI. Then the Helm chart
# (helm of hack/tools.sh): `helm lint`, rendered in both scopes with exactly deploy/'s rules,
# and values it must refuse refused. Every image named is the released version.
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
# Status is written only by patches (server-side apply carrying the resourceVersion read; a
# merge patch to clear a foreign status: record.rs): no
# update. (The overlay's Role and the chart's roles are checked equal to this one below.)
status_verbs=$(awk '/^- / { s = 0 } /^  - marekvsclusters\/status$/ { s = 1 } s && /^  verbs:$/ { v = 1; next }
                    v && s && /^  - / { printf "%s ", $2; next } { v = 0 }' <<<"$(rules <<<"$cluster_role")")
[ "$status_verbs" = "get patch " ] || fail "deploy/: marekvsclusters/status is granted '$status_verbs', not exactly get and patch"

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

# The image: versioned, the operator crate's version, never :dev or :latest.
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$REPO/crates/controller/Cargo.toml" | head -n 1)
. "$here/release.env"
want_image=$RELEASE_IMAGE:$version
image_of() { sed -n 's/^ *image: "\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' <<<"$(doc Deployment "$1")"; }
for name in deploy $(cd "$REPO" && ls -d deploy/overlays/*/ | sed 's#/$##'); do
  got=$(image_of marekvs-operator <<<"$(render "$name")")
  [ "$got" = "$want_image" ] || fail "$name: the operator image is '$got', not $want_image (the version of crates/controller/Cargo.toml)"
done

# The Helm chart.
helm=$("$here/tools.sh" helm)
chart=$REPO/deploy/helm/marekvs-operator
for field in version appVersion; do
  got=$(sed -n "s/^$field: \"\{0,1\}\([^\"]*\)\"\{0,1\}$/\1/p" "$chart/Chart.yaml")
  [ "$got" = "$version" ] || fail "Chart.yaml: $field is '$got', not $version (crates/controller/Cargo.toml)"
done
cmp -s "$chart/crds/marekvs.io_marekvsclusters.yaml" "$REPO/deploy/crd/marekvs.io_marekvsclusters.yaml" ||
  fail "the chart's CRD differs from deploy/crd's: run make crd"
"$helm" lint --strict "$chart" >/dev/null || { "$helm" lint --strict "$chart" >&2; fail "helm lint failed"; }
# helm template, normalised by kustomize so that rules compare with deploy/'s as rendered.
helm_render() {
  local dir out
  dir=$(mktemp -d)
  out=$("$helm" template marekvs-operator "$chart" --namespace marekvs-system "$@") || { rm -rf "$dir"; fail "helm template $* failed"; }
  printf '%s\n' "$out" > "$dir/all.yaml"
  printf 'resources: [all.yaml]\n' > "$dir/kustomization.yaml"
  "$bin/kubectl" kustomize "$dir" || { rm -rf "$dir"; fail "the rendered chart ($*) is not valid YAML"; }
  rm -rf "$dir"
}
out=$(helm_render)
[ "$(rules <<<"$(doc ClusterRole marekvs-operator <<<"$out")")" = "$(rules <<<"$cluster_role")" ] ||
  fail "chart (scope cluster): the ClusterRole's rules differ from deploy/rbac's"
[ "$(rules <<<"$(doc Role marekvs-operator-leader-election <<<"$out")")" = "$(rules <<<"$election")" ] ||
  fail "chart (scope cluster): the leader-election Role differs from deploy/rbac's"
has '^kind: Role$' <<<"$(doc Role marekvs-operator <<<"$out")" && fail "chart (scope cluster): a Role marekvs-operator besides the ClusterRole"
[ "$(image_of marekvs-operator <<<"$out")" = "$want_image" ] || fail "chart: the default image is not $want_image"
has '^  - --namespace' <<<"$out" && fail "chart (scope cluster): the operator runs with --namespace"
out=$(helm_render --set scope=namespace --set watchNamespace=apps)
has '^kind: ClusterRole(Binding)?$' <<<"$out" && fail "chart (scope namespace): still a ClusterRole or ClusterRoleBinding"
role=$(doc Role marekvs-operator <<<"$out")
has '^  namespace: apps$' <<<"$role" || fail "chart (scope namespace): no Role marekvs-operator in the watched namespace"
[ "$(rules <<<"$role")" = "$(rules <<<"$cluster_role")" ] || fail "chart (scope namespace): the Role's rules differ from deploy/rbac's ClusterRole"
has '^  namespace: apps$' <<<"$(doc RoleBinding marekvs-operator <<<"$out")" || fail "chart (scope namespace): no RoleBinding in the watched namespace"
has '^        - --namespace=apps$' <<<"$(doc Deployment marekvs-operator <<<"$out")" || fail "chart (scope namespace): the operator does not run with --namespace=apps"
[ "$(rules <<<"$(doc Role marekvs-operator-leader-election <<<"$out")")" = "$(rules <<<"$election")" ] ||
  fail "chart (scope namespace): the leader-election Role differs from deploy/rbac's"
secrets_get_only chart "$out"
has '^  - (nodes|pods/exec|\*)$' <<<"$out" && fail "chart: a role grants nodes, exec or *"
has '^kind: NetworkPolicy$' <<<"$out" && fail "chart: a NetworkPolicy although networkPolicy.enabled is false"
# The optional NetworkPolicy: in the watched namespace, selecting the members, with exactly
# its four sources (members: any port; the operator and monitoring: 6379 and 9121; clients: 6379).
out=$(helm_render --set scope=namespace --set watchNamespace=apps --set networkPolicy.enabled=true \
  --set-json 'networkPolicy.clients=[{"podSelector":{"matchLabels":{"app":"web"}}}]')
policy=$(doc NetworkPolicy marekvs-operator-members <<<"$out")
has '^  namespace: apps$' <<<"$policy" || fail "chart (networkPolicy): no NetworkPolicy marekvs-operator-members in the watched namespace"
spec_of() { sed -n '/^spec:/,$p'; }
[ "$(spec_of <<<"$policy")" = "spec:
  ingress:
  - from:
    - podSelector:
        matchLabels:
          app.kubernetes.io/managed-by: marekvs-operator
          app.kubernetes.io/name: marekvs
  - from:
    - namespaceSelector:
        matchLabels:
          kubernetes.io/metadata.name: marekvs-system
      podSelector:
        matchLabels:
          app.kubernetes.io/instance: marekvs-operator
          app.kubernetes.io/name: marekvs-operator
    ports:
    - port: 6379
      protocol: TCP
    - port: 9121
      protocol: TCP
  - from:
    - namespaceSelector:
        matchLabels:
          kubernetes.io/metadata.name: monitoring
    ports:
    - port: 6379
      protocol: TCP
    - port: 9121
      protocol: TCP
  - from:
    - podSelector:
        matchLabels:
          app: web
    ports:
    - port: 6379
      protocol: TCP
  podSelector:
    matchLabels:
      app.kubernetes.io/managed-by: marekvs-operator
      app.kubernetes.io/name: marekvs
  policyTypes:
  - Ingress" ] || fail "chart (networkPolicy): the members' NetworkPolicy is not as documented: $policy"
out=$(helm_render --set networkPolicy.enabled=true --set 'networkPolicy.namespaces={a,b}' --set networkPolicy.monitoringNamespace=)
[ "$(grep -c '^kind: NetworkPolicy$' <<<"$out")" = 2 ] || fail "chart (networkPolicy, scope cluster): not one NetworkPolicy in each of networkPolicy.namespaces"
has 'kubernetes.io/metadata.name: monitoring' <<<"$out" && fail "chart (networkPolicy): monitoring allowed although monitoringNamespace is empty"
# Values the chart must refuse, each with the words of its error.
refused() {
  local words=$1; shift
  local err
  if err=$("$helm" template marekvs-operator "$chart" "$@" 2>&1 >/dev/null); then
    fail "chart: helm template $* was accepted"
  fi
  grep -q -- "$words" <<<"$err" || fail "chart: helm template $* failed without saying '$words': $err"
}
refused "leaderElection.enabled is false" --set replicas=2 --set leaderElection.enabled=false
refused "scope is cluster" --set watchNamespace=apps
refused "logFormat" --set logFormat=xml
refused "scope" --set scope=everywhere
refused "replicas" --set replicas=0
refused "digest" --set image.digest=latest
refused "additional properties" --set imagePullPolicy=Always
refused "metrics.service.enabled" --set metrics.serviceMonitor.enabled=true --set metrics.service.enabled=false
refused "networkPolicy.namespaces" --set networkPolicy.enabled=true
refused "serviceAccount.name is empty" --set serviceAccount.create=false
refused "clusterDomain" --set clusterDomain=Not_A_Domain
refused "extraArgs" --set-json 'extraArgs=["member-timeout-ms=5"]'
refused "memberReadBudgetBytes" --set memberReadBudgetBytes=1024

# Labels: the recommended ones and commonLabels on every object the chart makes (all optional
# parts on), and on the operator's pod template.
out=$("$helm" template marekvs-operator "$chart" --namespace marekvs-system --set-json 'commonLabels={"team":"db"}' \
  --set networkPolicy.enabled=true --set 'networkPolicy.namespaces={apps}' --set metrics.serviceMonitor.enabled=true) ||
  fail "helm template with every part on failed"
objects=$(grep -c '^kind: ' <<<"$out")
# meta_labels LABEL: how many documents carry LABEL among their metadata.labels.
meta_labels() {
  awk -v want="    $1" '
    /^---$/ { inmeta = 0; inlabels = 0; next }
    /^metadata:$/ { inmeta = 1; next }
    /^[^ ]/ { inmeta = 0; inlabels = 0 }
    inmeta && /^  labels:$/ { inlabels = 1; next }
    inlabels && /^  [^ ]/ { inlabels = 0 }
    inlabels && $0 == want { n++ }
    END { print n + 0 }' <<<"$out"
}
for label in 'app.kubernetes.io/name: marekvs-operator' 'app.kubernetes.io/instance: marekvs-operator' \
  "app.kubernetes.io/version: \"$version\"" 'app.kubernetes.io/component: operator' 'app.kubernetes.io/part-of: marekvs' \
  'app.kubernetes.io/managed-by: Helm' 'team: db'; do
  got=$(meta_labels "$label")
  [ "$got" = "$objects" ] || fail "chart: '$label' on $got of the $objects objects' metadata"
  has "^        $label\$" <<<"$(doc Deployment marekvs-operator <<<"$out")" || fail "chart: '$label' not on the pod template"
done
# The operator's flags from values; extraArgs after them (a flag given twice takes the last), extraEnv.
out=$(helm_render --set clusterDomain=corp.example --set memberTimeoutMs=2500 --set maxConcurrentScrapes=16 \
  --set memberReadBudgetBytes=16777216 --set-json 'extraArgs=["--log-format=json"]' --set-json 'extraEnv=[{"name":"EXTRA","value":"1"}]')
deployment=$(doc Deployment marekvs-operator <<<"$out")
for arg in --cluster-domain=corp.example --member-timeout-ms=2500 --max-concurrent-scrapes=16 --member-read-budget-bytes=16777216; do
  has "^        - $arg\$" <<<"$deployment" || fail "chart: the operator does not run with $arg"
done
text_at=$(grep -n -- '^        - --log-format=text$' <<<"$deployment" | cut -d: -f1 || true)
json_at=$(grep -n -- '^        - --log-format=json$' <<<"$deployment" | cut -d: -f1 || true)
[ -n "$json_at" ] && [ "$json_at" -gt "${text_at:-0}" ] || fail "chart: extraArgs not passed after the chart's own flags"
has '^        - name: EXTRA$' <<<"$deployment" || fail "chart: extraEnv not set"
# No ServiceAccount or RBAC when the user brings them; names from the overrides.
out=$(helm_render --set serviceAccount.create=false --set serviceAccount.name=ops-sa --set rbac.create=false)
has '^kind: (ServiceAccount|Role|ClusterRole|RoleBinding|ClusterRoleBinding)$' <<<"$out" &&
  fail "chart: serviceAccount.create=false and rbac.create=false still render a ServiceAccount or RBAC"
has '^      serviceAccountName: ops-sa$' <<<"$(doc Deployment marekvs-operator <<<"$out")" || fail "chart: the operator does not run as serviceAccount.name"
out=$(helm_render --set fullnameOverride=kv-operator --set nameOverride=kvop)
[ -n "$(doc Deployment kv-operator <<<"$out")" ] || fail "chart: fullnameOverride does not name the Deployment"
has '^      app.kubernetes.io/name: kvop$' <<<"$(doc Deployment kv-operator <<<"$out")" || fail "chart: nameOverride is not app.kubernetes.io/name"
echo "check-deploy: deploy/ and $(ls -d "$REPO"/deploy/overlays/*/ | wc -l) overlay(s) render; RBAC as promised (namespaced overlay watches $watched); image $want_image; the Helm chart lints, renders both scopes with deploy/'s rules and the optional NetworkPolicy, refuses 13 bad values, labels all $objects objects, passes the operator's flags and env, and leaves the ServiceAccount and RBAC to the user on request" >&2
