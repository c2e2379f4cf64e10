#!/usr/bin/env bash
# Part of `make lint`: render deploy/ and every overlay in deploy/overlays/ with `kubectl
# kustomize` (the pinned kubectl of hack/build-control-plane.sh, built on first use as every
# hack script does; nothing is sent to any cluster) and check what the RBAC promises. A broken
# overlay, or a role that grew a permission this script forbids, fails CI. Then the Helm chart
# (helm of hack/tools.sh): `helm lint`, rendered in both scopes with exactly deploy/'s rules,
# and values it must refuse refused; its CRD template (deploy/crd's spec, the keep policy,
# crds.create), its `helm test` pod, and its optional monitoring, each rendered on and off, the
# alerts checked and unit-tested with promtool (hack/tools.sh, hack/chart-alerts-test.yaml) and
# every metric the alerts and the dashboard name one that is exported. Every image named is the
# released version.
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
# Secrets: get, create and patch, in a rule of its own (the password of spec.auth, read by
# name, and the cluster's own recorded password); never list or watch.
secrets_get_only() {
  local want="- apiGroups:
  - \"\"
  resources:
  - secrets
  verbs:
  - get
  - create
  - patch"
  local got
  got=$(secrets_rules <<<"$2")
  [ -z "$got" ] && return 0
  while IFS= read -r -d '' one; do
    [ "$one" = "$want" ] || fail "$1: secrets granted beyond a rule of get, create and patch: $one"
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

# Nodes: read, and only by the ClusterRole marekvs-operator-nodes, bound to the operator.
nodes_rules='rules:
- apiGroups:
  - ""
  resources:
  - nodes
  verbs:
  - get
  - list
  - watch'
# without_nodes_role: the rendered documents but the ClusterRole marekvs-operator-nodes.
without_nodes_role() {
  awk 'function flush() { if (!(kind == "ClusterRole" && name ~ /^marekvs-operator-nodes$/)) printf "%s", buf; buf = ""; kind = ""; name = ""; inmeta = 0 }
       /^---$/ { flush(); print; next }
       { buf = buf $0 "\n" }
       /^kind: / { kind = $2 }
       /^metadata:/ { inmeta = 1; next }
       /^[^ ]/ { inmeta = 0 }
       inmeta && /^  name: / && name == "" { name = $2 }
       END { flush() }'
}
nodes_role_only() {
  [ "$(rules <<<"$(doc ClusterRole marekvs-operator-nodes <<<"$2")")" = "$nodes_rules" ] ||
    fail "$1: no ClusterRole marekvs-operator-nodes of exactly get, list and watch on nodes"
  has '^  name: marekvs-operator-nodes$' <<<"$(doc ClusterRoleBinding marekvs-operator-nodes <<<"$2")" ||
    fail "$1: no ClusterRoleBinding marekvs-operator-nodes"
  has '^  - (nodes|pods/exec|\*)$' <<<"$(without_nodes_role <<<"$2")" &&
    fail "$1: a role other than marekvs-operator-nodes grants nodes, or exec or *"
  return 0
}
for dir in "$REPO"/deploy/overlays/*/; do
  name=deploy/overlays/$(basename "$dir")
  out=$(render "$name")
  if has '^kind: (Role|ClusterRole)$' <<<"$out"; then
    nodes_role_only "$name" "$out"
    secrets_get_only "$name" "$out"
  fi
done
nodes_role_only deploy/ "$base"
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
[ -n "$(doc ClusterRole marekvs-operator <<<"$out")$(doc ClusterRoleBinding marekvs-operator <<<"$out")" ] &&
  fail "$ns: still a ClusterRole or ClusterRoleBinding marekvs-operator"
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
cmp -s "$chart/files/marekvs.io_marekvsclusters.yaml" "$REPO/deploy/crd/marekvs.io_marekvsclusters.yaml" ||
  fail "the chart's CRD (files/) differs from deploy/crd's: run make crd"
# The CRD is a template (so helm upgrade upgrades it), never in crds/ (installed once, never
# upgraded, and a second copy beside the template).
[ -e "$chart/crds" ] && fail "the chart has a crds/ directory: the CRD is rendered by templates/crd.yaml from files/"
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
nodes_role_only "chart (scope cluster)" "$out"
[ "$(rules <<<"$(doc Role marekvs-operator-leader-election <<<"$out")")" = "$(rules <<<"$election")" ] ||
  fail "chart (scope cluster): the leader-election Role differs from deploy/rbac's"
has '^kind: Role$' <<<"$(doc Role marekvs-operator <<<"$out")" && fail "chart (scope cluster): a Role marekvs-operator besides the ClusterRole"
[ "$(image_of marekvs-operator <<<"$out")" = "$want_image" ] || fail "chart: the default image is not $want_image"
has '^  - --namespace' <<<"$out" && fail "chart (scope cluster): the operator runs with --namespace"
out=$(helm_render --set scope=namespace --set watchNamespace=apps)
[ -n "$(doc ClusterRole marekvs-operator <<<"$out")$(doc ClusterRoleBinding marekvs-operator <<<"$out")" ] &&
  fail "chart (scope namespace): still a ClusterRole or ClusterRoleBinding marekvs-operator"
nodes_role_only "chart (scope namespace)" "$out"
role=$(doc Role marekvs-operator <<<"$out")
has '^  namespace: apps$' <<<"$role" || fail "chart (scope namespace): no Role marekvs-operator in the watched namespace"
[ "$(rules <<<"$role")" = "$(rules <<<"$cluster_role")" ] || fail "chart (scope namespace): the Role's rules differ from deploy/rbac's ClusterRole"
has '^  namespace: apps$' <<<"$(doc RoleBinding marekvs-operator <<<"$out")" || fail "chart (scope namespace): no RoleBinding in the watched namespace"
has '^        - --namespace=apps$' <<<"$(doc Deployment marekvs-operator <<<"$out")" || fail "chart (scope namespace): the operator does not run with --namespace=apps"
[ "$(rules <<<"$(doc Role marekvs-operator-leader-election <<<"$out")")" = "$(rules <<<"$election")" ] ||
  fail "chart (scope namespace): the leader-election Role differs from deploy/rbac's"
secrets_get_only chart "$out"
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
refused "crds" --set crds.create=yes
refused "gateStuckFor" --set monitoring.prometheusRule.gateStuckFor=soon
refused "additional properties" --set monitoring.podMonitor.port=9121

# Labels: the recommended ones and commonLabels on every object the chart makes (all optional
# parts on; the test pod apart, below), and on the operator's pod template.
out=$("$helm" template marekvs-operator "$chart" --namespace marekvs-system --set-json 'commonLabels={"team":"db"}' \
  --set networkPolicy.enabled=true --set 'networkPolicy.namespaces={apps}' --set metrics.serviceMonitor.enabled=true \
  --set monitoring.podMonitor.enabled=true --set monitoring.prometheusRule.enabled=true --set monitoring.dashboard.enabled=true \
  --skip-tests) || fail "helm template with every part on failed"
for kind in CustomResourceDefinition PodMonitor PrometheusRule ConfigMap; do
  has "^kind: $kind\$" <<<"$out" || fail "chart: no $kind among the objects whose labels are checked"
done
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

# The CRD: rendered by default, exactly deploy/crd's spec, kept on uninstall; none with
# crds.create=false.
out=$(helm_render)
crd=$(doc CustomResourceDefinition marekvsclusters.marekvs.io <<<"$out")
[ -n "$crd" ] || fail "chart: no CustomResourceDefinition marekvsclusters.marekvs.io by default (crds.create=true)"
[ "$(grep -c '^kind: CustomResourceDefinition$' <<<"$out")" = 1 ] || fail "chart: not exactly one CRD rendered"
has '^    helm.sh/resource-policy: keep$' <<<"$crd" || fail "chart: the CRD lacks helm.sh/resource-policy: keep (helm uninstall would delete every MarekvsCluster)"
[ "$(spec_of <<<"$crd")" = "$(spec_of <<<"$(doc CustomResourceDefinition marekvsclusters.marekvs.io <<<"$(render deploy/crd)")")" ] ||
  fail "chart: the rendered CRD's spec differs from deploy/crd's"
has '^kind: CustomResourceDefinition$' <<<"$(helm_render --set crds.create=false)" && fail "chart: crds.create=false still renders the CRD"

# The helm test hook: marekvs-operator check, as the operator's ServiceAccount, with its scope
# and Lease; its labels outside the operator's selectors; none with tests.enabled=false.
test_pod=$(doc Pod marekvs-operator-test <<<"$out")
[ -n "$test_pod" ] || fail "chart: no test Pod marekvs-operator-test (helm test)"
has '^    helm.sh/hook: test$' <<<"$test_pod" || fail "chart: the test Pod is not a helm.sh/hook: test"
has '^    helm.sh/hook-delete-policy: [a-z,-]*before-hook-creation' <<<"$test_pod" || fail "chart: the test Pod has no hook-delete-policy with before-hook-creation"
has '^  restartPolicy: Never$' <<<"$test_pod" || fail "chart: the test Pod restarts (restartPolicy is not Never)"
has '^  serviceAccountName: marekvs-operator$' <<<"$test_pod" || fail "chart: the test Pod does not run as the operator's ServiceAccount"
[ "$(sed -n 's/^ *image: "\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' <<<"$test_pod")" = "$want_image" ] || fail "chart: the test Pod does not run $want_image"
[ "$(sed -n '/^  - args:$/,/^    [a-z]/p' <<<"$test_pod" | sed -n 's/^    - //p' | tr '\n' ' ')" = "check --leader-elect=true --lease-name=marekvs-operator --lease-duration-seconds=15 " ] ||
  fail "chart: the test Pod does not run check with the operator's Lease: $test_pod"
has '^    app.kubernetes.io/name: marekvs-operator$' <<<"$test_pod" && fail "chart: the test Pod carries the operator's app.kubernetes.io/name (its Service and PDB would select it)"
has '^    app.kubernetes.io/instance: marekvs-operator$' <<<"$test_pod" || fail "chart: the test Pod lacks the recommended labels"
test_pod=$(doc Pod marekvs-operator-test <<<"$(helm_render --set scope=namespace --set watchNamespace=apps --set replicas=1 --set leaderElection.enabled=false)")
[ "$(sed -n '/^  - args:$/,/^    [a-z]/p' <<<"$test_pod" | sed -n 's/^    - //p' | tr '\n' ' ')" = "check --leader-elect=false --namespace=apps " ] ||
  fail "chart: the test Pod does not check the watched namespace without a Lease: $test_pod"
has '^kind: Pod$' <<<"$(helm_render --set tests.enabled=false)" && fail "chart: tests.enabled=false still renders the test Pod"

# Monitoring: nothing by default; each part alone when enabled.
for kind in PodMonitor PrometheusRule ConfigMap; do
  has "^kind: $kind\$" <<<"$out" && fail "chart: a $kind although monitoring is off by default"
done
# The PodMonitor selects the operator's member pods (the labels and the named port the operator
# gives them, crates/controller/src/build) in the watched namespaces.
if ! { grep -q 'container_port("metrics", PORT_METRICS, "TCP")' "$REPO/crates/controller/src/build/builders.rs" &&
        grep -q 'pub const PORT_METRICS: i32 = 9121;' "$REPO/crates/controller/src/build/names.rs"; }; then
  fail "the operator no longer names the members' port 9121 'metrics' (build/): the PodMonitor scrapes that name"
fi
out=$(helm_render --set scope=namespace --set watchNamespace=apps --set monitoring.podMonitor.enabled=true)
[ "$(grep -c '^kind: ' <<<"$out")" = "$(grep -c '^kind: ' <<<"$(helm_render --set scope=namespace --set watchNamespace=apps)")" ] &&
  fail "chart: monitoring.podMonitor.enabled renders nothing more"
monitor=$(doc PodMonitor marekvs-operator-members <<<"$out")
[ "$(spec_of <<<"$monitor")" = "spec:
  namespaceSelector:
    matchNames:
    - apps
  podMetricsEndpoints:
  - interval: 30s
    path: /metrics
    port: metrics
    relabelings:
    - sourceLabels:
      - __meta_kubernetes_pod_label_app_kubernetes_io_instance
      targetLabel: marekvscluster
    - sourceLabels:
      - __meta_kubernetes_pod_label_marekvs_io_ordinal
      targetLabel: ordinal
  selector:
    matchLabels:
      app.kubernetes.io/managed-by: marekvs-operator
      app.kubernetes.io/name: marekvs" ] || fail "chart (podMonitor): the members' PodMonitor is not as documented: $monitor"
has '^kind: (PrometheusRule|ConfigMap)$' <<<"$out" && fail "chart: the PodMonitor alone renders rules or a dashboard"
has '^    any: true$' <<<"$(doc PodMonitor marekvs-operator-members <<<"$(helm_render --set monitoring.podMonitor.enabled=true)")" ||
  fail "chart (podMonitor, scope cluster): not every namespace"
# The alerts: promtool accepts them, its unit tests (hack/chart-alerts-test.yaml) pass on the
# rendered rules, each says what to do, and every metric they name is exported.
promtool=$("$here/tools.sh" promtool)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rendered_rules=$("$helm" template marekvs-operator "$chart" --set monitoring.prometheusRule.enabled=true --show-only templates/prometheusrule.yaml) ||
  fail "helm template of the PrometheusRule failed"
has '^kind: (PodMonitor|ConfigMap)$' <<<"$(helm_render --set monitoring.prometheusRule.enabled=true)" && fail "chart: the rules alone render a PodMonitor or a dashboard"
sed -n '/^spec:$/,$p' <<<"$rendered_rules" | sed '1d; s/^  //' > "$work/full.yaml"
"$promtool" check rules "$work/full.yaml" >/dev/null || { "$promtool" check rules "$work/full.yaml" >&2; fail "promtool check rules refuses the chart's alerts"; }
alerts=$(sed -n 's/^ *- alert: //p' "$work/full.yaml" | tr '\n' ' ')
[ "$alerts" = "MarekvsHandoffGateStuck MarekvsMemberDown MarekvsMemberScrapeFailing MarekvsSuspectedPartition " ] ||
  fail "chart: the alerts are '$alerts', not the four documented"
[ "$(grep -c 'What to do:' "$work/full.yaml")" = 4 ] || fail "chart: not every alert's description says what to do"
awk '/^ +annotations:$/ { n = match($0, /[^ ]/); skip = 1; next }
     skip && /^ *$/ { next }
     skip { if (match($0, /[^ ]/) > n) next; skip = 0 }
     { print }' "$work/full.yaml" > "$work/rules.yaml"
cp "$here/chart-alerts-test.yaml" "$work/test.yaml"
(cd "$work" && "$promtool" test rules test.yaml >/dev/null) ||
  { (cd "$work" && "$promtool" test rules test.yaml >&2); fail "the chart's alerts fail their unit tests (hack/chart-alerts-test.yaml)"; }
# exported_names: every metric the operator (telemetry.rs) and the members (the node contract,
# docs/marekvs-node.md) export; unexported FILE: the marekvs_ names FILE uses that are neither
# (a histogram's _bucket, _sum and _count are its own).
exported=$( (grep -o 'marekvs_operator_[a-z_]*' "$REPO/crates/controller/src/telemetry.rs"
             grep -o '`marekvs_[a-z_]*' "$REPO/docs/marekvs-node.md" | tr -d '`') | sort -u)
unexported() {
  grep -o 'marekvs_[a-z_]*' "$1" | sort -u | while read -r name; do
    grep -qx -- "$name" <<<"$exported" || grep -qx -- "$(sed -E 's/_(bucket|sum|count)$//' <<<"$name")" <<<"$exported" || echo "$name"
  done
}
missing=$(unexported "$work/full.yaml")
[ -z "$missing" ] || fail "chart: the alerts name metrics nobody exports: $missing"
# The dashboard: the file, verbatim, in a ConfigMap the Grafana sidecar loads; every query
# parses (promtool, as recording rules, Grafana's variables replaced) and names only exported
# metrics.
out=$(helm_render --set monitoring.dashboard.enabled=true)
has '^kind: (PodMonitor|PrometheusRule)$' <<<"$out" && fail "chart: the dashboard alone renders a PodMonitor or rules"
has '^    grafana_dashboard: "1"$' <<<"$(doc ConfigMap marekvs-operator-dashboard <<<"$out")" ||
  fail "chart: the dashboard ConfigMap lacks the label grafana_dashboard: \"1\""
"$helm" template marekvs-operator "$chart" --set monitoring.dashboard.enabled=true --show-only templates/dashboard.yaml |
  sed -n '/^  marekvs.json: |-$/,$p' | sed '1d; s/^    //' > "$work/dashboard.json"
cmp -s "$work/dashboard.json" "$chart/files/marekvs-dashboard.json" ||
  fail "chart: the dashboard ConfigMap does not carry files/marekvs-dashboard.json as it is"
python3 - "$work/dashboard.json" "$work/queries.yaml" <<'PY' || fail "the dashboard is not as a Grafana dashboard must be"
import json, sys
dash = json.load(open(sys.argv[1]))
exprs = [t["expr"] for p in dash["panels"] if p["type"] != "row" for t in p["targets"]]
assert all(p["targets"] for p in dash["panels"] if p["type"] != "row"), "a panel without a query"
subst = {"$__rate_interval": "5m", "$namespace": ".*", "$marekvscluster": ".*"}
with open(sys.argv[2], "w") as out:
    out.write("groups:\n  - name: dashboard\n    rules:\n")
    for i, e in enumerate(exprs):
        for k, v in subst.items():
            e = e.replace(k, v)
        assert "$" not in e, f"a Grafana variable left in {e}"
        out.write(f"      - record: dashboard:query_{i}\n        expr: {json.dumps(e)}\n")
PY
"$promtool" check rules "$work/queries.yaml" >/dev/null || { "$promtool" check rules "$work/queries.yaml" >&2; fail "promtool cannot parse a dashboard query"; }
queries=$(grep -c 'record:' "$work/queries.yaml")
missing=$(unexported "$work/dashboard.json")
[ -z "$missing" ] || fail "chart: the dashboard names metrics nobody exports: $missing"

echo "check-deploy: deploy/ and $(ls -d "$REPO"/deploy/overlays/*/ | wc -l) overlay(s) render; RBAC as promised (namespaced overlay watches $watched); image $want_image; the Helm chart lints, renders both scopes with deploy/'s rules and the optional NetworkPolicy, refuses 16 bad values, labels all $objects objects, passes the operator's flags and env, and leaves the ServiceAccount and RBAC to the user on request; its CRD is deploy/crd's, kept on uninstall, and off with crds.create=false; its helm test runs check as the operator; the PodMonitor, the 4 alerts (promtool check and unit tests) and the dashboard's $queries queries render only when enabled and name only exported metrics" >&2
