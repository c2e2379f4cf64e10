#!/usr/bin/env bash
# Brings up a local control plane from the pinned upstream binaries, everything on loopback:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler and the kwok controller
# (fake nodes), plus three fake nodes with loopback pod CIDRs and a StorageClass whose
# volumes the harness (marekvs-sim) provisions.
#
#   hack/cluster-up.sh [NAME]      # NAME: demo (default) or test; prints the kubeconfig path
#
# Idempotent: a cluster that is already up is reused. State lives in .state/NAME (logs,
# pids, certificates, etcd data); hack/cluster-down.sh NAME stops it and removes it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
cluster_env "${1:-demo}"

bin=$("$here/build-control-plane.sh")
mkdir -p "$STATE/pids" "$STATE/logs" "$STATE/pki" "$STATE/volumes"

if cluster_healthy; then
  log "cluster $NAME already up"
  echo "$KUBECONFIG_PATH"
  exit 0
fi
# A half-started cluster (a crashed process, a stale pid file) is stopped first.
"$here/cluster-down.sh" "$NAME" --keep-state >/dev/null 2>&1 || true
mkdir -p "$STATE/pids" "$STATE/logs" "$STATE/pki" "$STATE/volumes"
t0=$(date +%s%N)

# --- certificates (a private CA, a serving cert for 127.0.0.1, an admin client cert) ---
pki="$STATE/pki"
if [ ! -f "$pki/admin.crt" ]; then
  (
    cd "$pki"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 -subj "/CN=marekvs-local-ca" 2>/dev/null
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    cat > serving.ext <<EXT
subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc
extendedKeyUsage=serverAuth
EXT
    openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver" 2>/dev/null
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out apiserver.crt -days 3650 -extfile serving.ext 2>/dev/null
    printf 'extendedKeyUsage=clientAuth\n' > client.ext
    openssl req -newkey rsa:2048 -nodes -keyout admin.key -out admin.csr -subj "/O=system:masters/CN=marekvs-admin" 2>/dev/null
    openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out admin.crt -days 3650 -extfile client.ext 2>/dev/null
  )
fi

cat > "$KUBECONFIG_PATH" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: marekvs-$NAME
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority: $pki/ca.crt
users:
- name: admin
  user:
    client-certificate: $pki/admin.crt
    client-key: $pki/admin.key
contexts:
- name: marekvs-$NAME
  context: {cluster: marekvs-$NAME, user: admin}
current-context: marekvs-$NAME
EOF

# --- etcd ---
start_bg etcd "$bin/etcd" \
  --name default --data-dir "$STATE/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "default=http://127.0.0.1:$ETCD_PEER_PORT" \
  --unsafe-no-fsync --log-level warn
wait_for "etcd" 60 curl -fsS "http://127.0.0.1:$ETCD_PORT/health"

# --- kube-apiserver ---
# APISERVER_AUDIT=1 logs every pod create and delete, and every request of the operator,
# with microsecond timestamps to $STATE/logs/audit.log (for hack/audit-replacements.py; off
# by default, it costs a write per request). APISERVER_AUDIT=mutations logs only the changes
# the operator's ServiceAccount asks for (hack/test-e2e.sh: a deposed leader's are counted).
audit_args=()
if [ "${APISERVER_AUDIT:-0}" = mutations ]; then
  cat > "$STATE/audit-policy.yaml" <<POLICY
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  users: [system:serviceaccount:marekvs-system:marekvs-operator]
  verbs: [create, update, patch, delete, deletecollection]
- level: None
POLICY
  audit_args=(--audit-policy-file "$STATE/audit-policy.yaml" --audit-log-path "$STATE/logs/audit.log")
elif [ "${APISERVER_AUDIT:-0}" = 1 ]; then
  cat > "$STATE/audit-policy.yaml" <<POLICY
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  resources: [{group: "", resources: [pods]}]
  verbs: [create, delete]
- level: Metadata
  users: [system:serviceaccount:marekvs-system:marekvs-operator]
- level: None
POLICY
  audit_args=(--audit-policy-file "$STATE/audit-policy.yaml" --audit-log-path "$STATE/logs/audit.log")
fi
# No --advertise-address: 127.0.0.1 is refused there; the reconciler of the `kubernetes`
# Service endpoints is off, so the advertised address is never used.
start_bg kube-apiserver "$bin/kube-apiserver" \
  --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
  --bind-address 127.0.0.1 --secure-port "$API_PORT" \
  --endpoint-reconciler-type none \
  --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
  --client-ca-file "$pki/ca.crt" \
  --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
  --service-account-issuer https://kubernetes.default.svc \
  --service-cluster-ip-range "$SERVICE_CIDR" \
  --kubelet-preferred-address-types InternalIP \
  --authorization-mode Node,RBAC \
  --allow-privileged=true \
  --storage-backend etcd3 \
  --profiling=false "${audit_args[@]}"
wait_for "kube-apiserver" 120 kc get --raw /readyz

# --- kube-controller-manager (GC, PV binder, namespaces, service accounts, PDBs, node lifecycle) ---
# On the `bench` cluster a node is declared lost only after 5 min without a heartbeat (default
# 50 s): with 1,600 simulated pods on 2 cores, kwok's heartbeats run late, and evictions would
# make the benchmark measure node-failure churn instead of the operator.
kcm_extra=()
[ "$NAME" = bench ] && kcm_extra=(--node-monitor-grace-period 300s)
# Client rate limits raised (defaults 20 and 50 qps) so benchmarks with 1,600 pods measure the
# operator, not the PV binder or the scheduler queueing on their own client.
start_bg kube-controller-manager "$bin/kube-controller-manager" \
  --kubeconfig "$KUBECONFIG_PATH" \
  --authentication-kubeconfig "$KUBECONFIG_PATH" --authorization-kubeconfig "$KUBECONFIG_PATH" \
  --bind-address 127.0.0.1 --secure-port "$KCM_PORT" \
  --leader-elect=false \
  --kube-api-qps 200 --kube-api-burst 400 \
  --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
  --use-service-account-credentials=false \
  --controllers '*,-nodeipam,-service-lb-controller,-cloud-node-lifecycle,-route' \
  "${kcm_extra[@]}"

# --- kube-scheduler ---
# A pod found unschedulable waits in the scheduler's unschedulable queue until an event says it
# may fit, or 5 min by default. Twice in CI a member's new pod stayed Pending, on no node, for
# the 120 s its test waited (with Immediate binding the pod first waits for its PVC; a missed
# requeue after the PVC is bound looks like kubernetes/kubernetes#125762). Retried every 10 s,
# such a pod is late by seconds, not minutes.
start_bg kube-scheduler "$bin/kube-scheduler" \
  --kubeconfig "$KUBECONFIG_PATH" \
  --authentication-kubeconfig "$KUBECONFIG_PATH" --authorization-kubeconfig "$KUBECONFIG_PATH" \
  --bind-address 127.0.0.1 --secure-port "$SCHED_PORT" \
  --kube-api-qps 200 --kube-api-burst 400 \
  --pod-max-in-unschedulable-pods-duration 10s \
  --leader-elect=false

# --- kwok: keeps the fake nodes alive; pods on them are run by marekvs-sim ---
# kwok also serves the nodes' kubelet API on 127.0.0.1:$KWOK_PORT (the port the nodes
# advertise, --node-port): the API server reaches it for `kubectl logs` and `port-forward`,
# which kwok answers from the Logs and PortForward objects the podlet writes for each pod (the
# API server has no kubelet CA, so it does not verify kwok's self-signed certificate).
kc apply --server-side -f "$bin/kwok-crds/" >/dev/null
start_bg kwok "$bin/kwok" \
  --kubeconfig "$KUBECONFIG_PATH" \
  --config "$here/kwok/kwok.yaml" \
  --manage-all-nodes=false \
  --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
  --node-ip 127.0.0.1 --cidr 127.250.0.0/16 \
  --node-lease-duration-seconds 40 \
  --enable-crds Logs,PortForward \
  --node-port "$KWOK_PORT" \
  --server-address "127.0.0.1:$KWOK_PORT"

wait_for "default service account" 60 kc -n default get serviceaccount default
sed "s/POD_NET/$POD_NET/g" "$here/kwok/nodes.yaml" | kc apply -f - >/dev/null
kc apply -f "$here/kwok/storage.yaml" >/dev/null
wait_for "nodes Ready" 60 kc wait --for=condition=Ready node --all --timeout=2s

ms=$(( ($(date +%s%N) - t0) / 1000000 ))
log "cluster $NAME up in ${ms} ms (kubeconfig: $KUBECONFIG_PATH)"
echo "$KUBECONFIG_PATH"
