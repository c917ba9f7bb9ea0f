#!/usr/bin/env bash
# Checks that the node started by `tests/scripts/control-plane.sh up DIR --node` runs pods as a
# real cluster's node does: the Node Ready and untainted, a pod of the local sandbox image
# Running under containerd and runc, a pod resolving kubernetes.default.svc.cluster.local through
# CoreDNS and calling the API server through the `kubernetes` Service, a Service in front of a
# pod reached by its DNS name, `kubectl logs` (the API server calling the kubelet), a
# NetworkPolicy refusing one client and admitting another, a claim of the default StorageClass
# provisioned and written by a non-root pod, and, when the project's image was imported, a
# container of it running `baton-ensemble --version`.
# Usage: tests/control-plane/node-smoke.sh DIR     Exits non-zero at the first check that fails.
#
# Needs kubectl. The pods run the images `up --node` imported (the sandbox image, busybox, the
# project's): nothing is pulled.
set -euo pipefail
[ $# -eq 1 ] || {
  echo "usage: $0 DIR" >&2
  exit 2
}
dir=$(cd "$1" && pwd -P)
export KUBECONFIG=$dir/admin.kubeconfig
sock=$dir/node/containerd/containerd.sock
node=baton-test-node
ns=node-smoke-$$
image=localhost/baton-test/busybox:1
project_image=ghcr.io/baton-dev/baton:$(awk '$1 == "appVersion:" {gsub(/"/, "", $2); print $2}' \
  "$(dirname "$0")/../../charts/baton/Chart.yaml")
passed=0

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
ok() {
  passed=$((passed + 1))
  echo "ok: $*"
}
command -v kubectl >/dev/null || fail "kubectl not found"
[ -S "$sock" ] || fail "no node in $dir (start it with tests/scripts/control-plane.sh up DIR --node)"

# The test image, busybox: `up --node` imports it (the local-path provisioner's helper pods run it).
grep -qx "$image" <<<"$(ctr --address "$sock" -n k8s.io images ls -q)" ||
  fail "no $image in the node's containerd (started by an older control-plane.sh?)"

trap 'kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1 || true' EXIT

[ "$(kubectl get node "$node" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ] ||
  fail "node $node not Ready"
[ -z "$(kubectl get node "$node" -o jsonpath='{.spec.taints}')" ] ||
  fail "node $node still tainted: $(kubectl get node "$node" -o jsonpath='{.spec.taints}')"
ok "node $node Ready, no taints"

kubectl create namespace "$ns" >/dev/null
# Waits until POD's phase is PHASE (Running or Succeeded); prints its events when it is not.
wait_phase() { # POD PHASE
  local phase
  for _ in $(seq 1 180); do
    phase=$(kubectl -n "$ns" get pod "$1" -o jsonpath='{.status.phase}')
    [ "$phase" = "$2" ] && return 0
    [ "$phase" = Failed ] && break
    sleep 0.5
  done
  kubectl -n "$ns" describe pod "$1" | sed -n '/^Events/,$p' >&2
  fail "pod $1 is $phase, not $2"
}

kubectl -n "$ns" run pause --image=localhost/baton-test/pause:3.10 --image-pull-policy=Never >/dev/null
wait_phase pause Running
ok "a pod of the local sandbox image Running under containerd and runc"

kubectl -n "$ns" run web --image="$image" --image-pull-policy=Never --labels=app=web --port=8080 \
  --command -- sh -c 'mkdir -p /www && echo hello from web >/www/index.html && exec httpd -f -p 8080 -h /www' >/dev/null
kubectl -n "$ns" expose pod web --port=80 --target-port=8080 >/dev/null
wait_phase web Running

kubectl -n "$ns" run client --image="$image" --image-pull-policy=Never --restart=Never --command -- sh -c "
  nslookup kubernetes.default.svc.cluster.local || exit 1
  wget -q -O- --no-check-certificate https://kubernetes.default.svc/version || exit 2
  for i in 1 2 3 4 5 6 7 8 9 10; do
    wget -q -O- http://web.$ns.svc.cluster.local/ && exit 0
    sleep 1
  done
  exit 3" >/dev/null
wait_phase client Succeeded
logs=$(kubectl -n "$ns" logs client)
grep -q 'Address: 10.96.0.1' <<<"$logs" || fail "kubernetes.default.svc.cluster.local did not resolve to 10.96.0.1: $logs"
ok "a pod resolves kubernetes.default.svc.cluster.local to 10.96.0.1 through CoreDNS (and kubectl logs works)"
grep -q '"gitVersion"' <<<"$logs" || fail "no /version from the API server through its Service: $logs"
ok "a pod calls the API server through the kubernetes Service"
grep -q 'hello from web' <<<"$logs" || fail "no answer from the web Service: $logs"
ok "a pod reaches another pod through its Service's DNS name"

# NetworkPolicy: web admits only pods labelled access=web. Policies take effect within a few
# seconds of their creation (kube-router reacts to the watch event): each client retries.
kubectl -n "$ns" apply -f - >/dev/null <<EOF
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web-from-access}
spec:
  podSelector: {matchLabels: {app: web}}
  policyTypes: [Ingress]
  ingress:
  - from: [{podSelector: {matchLabels: {access: web}}}]
EOF
url=http://web.$ns.svc.cluster.local/
kubectl -n "$ns" run refused --image="$image" --image-pull-policy=Never --restart=Never --command -- \
  sh -c "for i in \$(seq 1 20); do timeout 3 wget -q -O- $url || exit 0; sleep 1; done; exit 1" \
  >/dev/null
kubectl -n "$ns" run admitted --image="$image" --image-pull-policy=Never --restart=Never \
  --labels=access=web --command -- \
  sh -c "sleep 3; for i in \$(seq 1 20); do timeout 3 wget -q -O- $url && exit 0; sleep 1; done; exit 1" \
  >/dev/null
wait_phase refused Succeeded
ok "a NetworkPolicy refuses a pod it does not admit"
wait_phase admitted Succeeded
ok "the NetworkPolicy admits the pod it selects"

# Storage: a claim of the default StorageClass, provisioned once a pod uses it (a root-owned
# directory), written by a non-root user through its pod's fsGroup.
kubectl -n "$ns" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 16Mi}}
---
apiVersion: v1
kind: Pod
metadata: {name: writer}
spec:
  restartPolicy: Never
  securityContext: {runAsUser: 1000, runAsGroup: 1000, runAsNonRoot: true, fsGroup: 1000}
  containers:
  - name: writer
    image: $image
    imagePullPolicy: Never
    command: [sh, -c, 'echo written >/data/file && cat /data/file']
    volumeMounts: [{name: data, mountPath: /data}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
EOF
wait_phase writer Succeeded
[ "$(kubectl -n "$ns" get pvc data -o jsonpath='{.status.phase}')" = Bound ] || fail "claim data not Bound"
[ "$(kubectl -n "$ns" logs writer)" = written ] || fail "the writer did not read back what it wrote"
ok "a claim of the default StorageClass bound, provisioned on the node and written by a non-root pod (its fsGroup)"

if grep -qx "$project_image" <<<"$(ctr --address "$sock" -n k8s.io images ls -q)"; then
  kubectl -n "$ns" run baton --image="$project_image" --image-pull-policy=Never --command -- \
    /bin/sh -c 'baton-ensemble --version && exec sleep infinity' >/dev/null
  wait_phase baton Running
  for _ in $(seq 1 20); do
    out=$(kubectl -n "$ns" logs baton 2>/dev/null) && [ -n "$out" ] && break
    sleep 0.5
  done
  [ -n "$out" ] || fail "no output from baton-ensemble --version"
  ok "the project's image $project_image runs: $out"
else
  echo "skipped: $project_image not imported (tests/scripts/image.sh build target/image, then up --node)"
fi
echo "node-smoke: $passed checks passed"
