#!/usr/bin/env bash
# A real Kubernetes control plane for tests: etcd, kube-apiserver and kube-controller-manager
# as local processes on loopback, built from the upstream Go modules pinned in
# tests/control-plane/go.mod (the only place the versions are written). No kubelet, no
# container runtime: pods are stored and controllers act on them, but nothing runs them.
#
#   tests/scripts/control-plane.sh up DIR     build what is missing, start, wait until ready;
#                                             the LAST line printed is the admin kubeconfig
#   tests/scripts/control-plane.sh down DIR   stop what `up DIR` started (idempotent)
#   tests/scripts/control-plane.sh build      build the binary if missing, print its path
#
# DIR holds everything of one control plane: pki/ (CA, serving and client certificates, the
# service-account signing key), etcd/ (data), the kubeconfigs, audit-policy.yaml, audit.log,
# one log and one pid file per process. Progress goes to stderr.
#
# The binary (one multi-call `control-plane` holding all three components) is cached in
# ${BATON_TOOLS:-~/.cache/baton-tools}/control-plane/<k8s version>-<hash of the Go module>/.
# A cold build compiles Kubernetes: it needs Go (go.mod's `go` line or newer) and the Go module
# proxy, and runs under `nice -n 19`. openssl and curl are apt-installed if missing (as root).
#
# Environment: CONTROL_PLANE_TIMEOUT (seconds to wait for readiness, default 180).
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd -P)
module=$repo/tests/control-plane
tools=${BATON_TOOLS:-$HOME/.cache/baton-tools}
timeout=${CONTROL_PLANE_TIMEOUT:-180}

# Cluster-internal ranges: only ever written into objects; nothing here routes or sends to them.
service_cidr=10.0.0.0/24
service_ip=10.0.0.1
issuer=https://kubernetes.default.svc.cluster.local
# The controllers a test cluster needs: the five the tests rely on (service-account tokens,
# garbage collection, StatefulSets, Deployments, ReplicaSets) plus those without which objects
# would not behave as on a real cluster (default ServiceAccounts, namespace deletion, the
# kube-root-ca.crt ConfigMap projected tokens mount, Endpoints and EndpointSlices of Services,
# PodDisruptionBudget status, aggregated ClusterRoles, ValidatingAdmissionPolicy type checks,
# claims released by their finalizer).
controllers=serviceaccount-token-controller,garbage-collector-controller,statefulset-controller
controllers+=,deployment-controller,replicaset-controller,serviceaccount-controller
controllers+=,namespace-controller,root-ca-certificate-publisher-controller,endpoints-controller
controllers+=,endpointslice-controller,pod-garbage-collector-controller,disruption-controller
controllers+=,clusterrole-aggregation-controller,validatingadmissionpolicy-status-controller
# The protection controllers remove the kubernetes.io/pvc-protection (pv-protection) finalizer
# the API server puts on every claim once no pod uses it: without them a StatefulSet's claims
# keep their namespace Terminating for good.
controllers+=,persistentvolumeclaim-protection-controller,persistentvolume-protection-controller
components=(etcd kube-apiserver kube-controller-manager)

log() { echo "control-plane: $*" >&2; }
die() {
  log "error: $*"
  exit 1
}

usage() {
  echo "usage: $0 up DIR | down DIR | build" >&2
  exit 2
}

# The version of a module as go.mod requires it (require lines only: the replace block
# names k8s.io/* staging modules, never these two).
module_version() {
  awk -v m="$1" '($1 == m || ($1 == "require" && $2 == m)) && $NF ~ /^v/ {print $NF; exit}' \
    "$module/go.mod"
}

ensure_packages() {
  local missing=()
  command -v openssl >/dev/null || missing+=(openssl)
  command -v curl >/dev/null || missing+=(curl ca-certificates)
  if ((${#missing[@]})); then
    log "installing ${missing[*]} (apt)"
    apt-get update >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2
  fi
}

find_go() {
  if command -v go >/dev/null; then
    command -v go
  elif [ -x /usr/local/go/bin/go ]; then
    echo /usr/local/go/bin/go
  else
    die "go not found: building the control plane needs Go (see tests/control-plane/go.mod)"
  fi
}

# Prints the path of the cached binary, building it first if it is not there.
build() {
  local k8s etcd hash dir bin go ldflags v
  k8s=$(module_version k8s.io/kubernetes)
  etcd=$(module_version go.etcd.io/etcd/server/v3)
  if [ -z "$k8s" ] || [ -z "$etcd" ]; then
    die "no k8s.io/kubernetes or etcd version in $module/go.mod"
  fi
  # The version stamped into the binaries: /version answers it and clients (helm's kubeVersion
  # checks, kubectl's skew warning) read it; without it an unstamped build says v0.0.0-master.
  v=${k8s#v}
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$k8s -X $pkg.gitMajor=${v%%.*}"
    ldflags+=" -X $pkg.gitMinor=$(echo "$v" | cut -d. -f2) -X $pkg.gitTreeState=clean"
  done
  hash=$(cd "$module" && cat go.mod go.sum ./*.go | sha256sum | cut -c1-12)
  hash=$(printf '%s %s' "$hash" "$ldflags" | sha256sum | cut -c1-12)
  dir=$tools/control-plane/$k8s-$hash
  bin=$dir/control-plane
  if [ ! -x "$bin" ]; then
    mkdir -p "$dir"
    go=$(find_go)
    # Two callers building at once would each spend the whole build: the second waits.
    exec 9>"$dir/.lock"
    flock 9
    if [ ! -x "$bin" ]; then
      log "building kube-apiserver, kube-controller-manager $k8s and etcd $etcd into $dir" \
        "(a cold build compiles Kubernetes: many minutes)"
      local start=$SECONDS
      (cd "$module" && GOFLAGS="-mod=readonly -buildvcs=false" nice -n 19 "$go" build \
        -trimpath -ldflags "$ldflags" -o "$bin.tmp" .) >&2 || die "go build failed"
      mv "$bin.tmp" "$bin"
      log "built in $((SECONDS - start))s"
    fi
    exec 9>&-
  fi
  echo "$bin"
}

pid_of() { # DIR COMPONENT: the pid if that component of DIR's control plane is running
  local pid
  pid=$(cat "$1/$2.pid" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  # Every process is started with DIR in its arguments: a recycled pid is not ours.
  tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "$1/" || return 1
  echo "$pid"
}

down() {
  local dir=$1 c pid i
  for ((i = ${#components[@]} - 1; i >= 0; i--)); do
    c=${components[i]}
    if pid=$(pid_of "$dir" "$c"); then
      log "stopping $c ($pid)"
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 300); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
      done
      if kill -0 "$pid" 2>/dev/null; then
        log "$c did not stop within 30s of SIGTERM: SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
      fi
    fi
    rm -f "$dir/$c.pid"
  done
}

# A key and a certificate signed by DIR's CA (or pki/CA.crt). KIND is server, peer or client.
cert() { # PKI NAME KIND SUBJECT [SAN [CA]]
  local pki=$1 name=$2 kind=$3 subject=$4 san=${5:-} ca=${6:-ca}
  [ -s "$pki/$name.crt" ] && return 0
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$pki/$name.key" 2>/dev/null
  # openssl expands ${ENV::SAN} of openssl.cnf whichever section is used: always set it.
  SAN=${san:-DNS:unused} openssl req -new -key "$pki/$name.key" -subj "$subject" \
    -config "$pki/openssl.cnf" \
    -out "$pki/$name.csr"
  SAN=${san:-DNS:unused} openssl x509 -req -in "$pki/$name.csr" -CA "$pki/$ca.crt" \
    -CAkey "$pki/$ca.key" -set_serial "0x$(openssl rand -hex 16)" -days 3650 \
    -extfile "$pki/openssl.cnf" -extensions "${kind}_ext" -out "$pki/$name.crt" 2>/dev/null
  rm -f "$pki/$name.csr"
}

pki() {
  local pki=$1/pki
  mkdir -p "$pki"
  chmod 700 "$pki"
  cat >"$pki/openssl.cnf" <<'EOF'
[req]
distinguished_name = dn
prompt = no
[dn]
[ca_ext]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign, digitalSignature
subjectKeyIdentifier = hash
[server_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = ${ENV::SAN}
[peer_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = ${ENV::SAN}
[client_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
EOF
  if [ ! -s "$pki/ca.crt" ]; then
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$pki/ca.key" 2>/dev/null
    SAN=DNS:unused openssl req -x509 -new -key "$pki/ca.key" -subj "/CN=baton-test-ca" \
      -days 3650 -config "$pki/openssl.cnf" -extensions ca_ext -out "$pki/ca.crt"
  fi
  # etcd's own gRPC gateway dials etcd with this certificate as its client certificate, so it
  # needs clientAuth besides serverAuth (as kubeadm's etcd server certificate has).
  cert "$pki" etcd-server peer "/CN=etcd" "DNS:localhost,IP:127.0.0.1"
  cert "$pki" apiserver-etcd-client client "/CN=kube-apiserver-etcd-client"
  cert "$pki" apiserver server "/CN=kube-apiserver" \
    "DNS:localhost,IP:127.0.0.1,IP:$service_ip,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert "$pki" admin client "/O=system:masters/CN=baton-test-admin"
  # The aggregation layer's front proxy has a CA of its own: a certificate from it asserts any
  # user in headers, so none of the ordinary client certificates may be one.
  if [ ! -s "$pki/front-proxy-ca.crt" ]; then
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$pki/front-proxy-ca.key" \
      2>/dev/null
    SAN=DNS:unused openssl req -x509 -new -key "$pki/front-proxy-ca.key" \
      -subj "/CN=baton-test-front-proxy-ca" -days 3650 -config "$pki/openssl.cnf" \
      -extensions ca_ext -out "$pki/front-proxy-ca.crt"
  fi
  cert "$pki" front-proxy-client client "/CN=front-proxy-client" "" front-proxy-ca
  cert "$pki" kube-controller-manager client "/CN=system:kube-controller-manager"
  if [ ! -s "$pki/sa.key" ]; then
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$pki/sa.key" 2>/dev/null
    openssl pkey -in "$pki/sa.key" -pubout -out "$pki/sa.pub"
  fi
  chmod 600 "$pki"/*.key
}

kubeconfig() { # DIR NAME USER-CERT-NAME PORT
  local pki=$1/pki out=$1/$2.kubeconfig
  cat >"$out.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: baton-test
  cluster:
    server: https://127.0.0.1:$4
    certificate-authority-data: $(base64 -w0 <"$pki/ca.crt")
users:
- name: $3
  user:
    client-certificate-data: $(base64 -w0 <"$pki/$3.crt")
    client-key-data: $(base64 -w0 <"$pki/$3.key")
contexts:
- name: baton-test
  context:
    cluster: baton-test
    user: $3
current-context: baton-test
EOF
  chmod 600 "$out.tmp"
  mv "$out.tmp" "$out"
}

start() { # DIR COMPONENT ARGS...
  local dir=$1 c=$2
  shift 2
  # Its own session, so a signal to the caller's process group does not reach it: `down`
  # is what stops it. setsid execs in place here (we are no group leader), so $! is its pid.
  setsid "$bin" "$c" "$@" >>"$dir/$c.log" 2>&1 </dev/null &
  echo $! >"$dir/$c.pid"
  log "started $c ($!), log $dir/$c.log"
}

# Polls until CHECK succeeds; fails early when COMPONENT's process has exited.
wait_for() { # DIR COMPONENT WHAT CHECK...
  local dir=$1 c=$2 what=$3 deadline=$((SECONDS + timeout))
  shift 3
  until "$@" >/dev/null 2>&1; do
    if ! pid_of "$dir" "$c" >/dev/null; then
      tail -n 30 "$dir/$c.log" >&2 || true
      down "$dir"
      die "$c exited before $what (log: $dir/$c.log)"
    fi
    if ((SECONDS >= deadline)); then
      tail -n 30 "$dir/$c.log" >&2 || true
      down "$dir"
      die "$c: no $what within ${timeout}s (log: $dir/$c.log)"
    fi
    sleep 0.2
  done
}

admin_curl() { # PATH: fails unless the API server answers 2xx
  curl -fsS --max-time 5 --cacert "$dir/pki/ca.crt" --cert "$dir/pki/admin.crt" \
    --key "$dir/pki/admin.key" "https://127.0.0.1:$api_port$1"
}
etcd_healthy() {
  curl -fsS --max-time 5 --cacert "$dir/pki/ca.crt" --cert "$dir/pki/apiserver-etcd-client.crt" \
    --key "$dir/pki/apiserver-etcd-client.key" "https://127.0.0.1:$etcd_port/health" |
    grep -q '"health":"true"'
}
apiserver_ready() { [ "$(admin_curl /readyz)" = ok ]; }
kcm_healthy() { [ "$(curl -ksS --max-time 5 "https://127.0.0.1:$kcm_port/healthz")" = ok ]; }
# The default ServiceAccount of `default` exists once the controllers run: pods can be created.
controllers_acting() { admin_curl /api/v1/namespaces/default/serviceaccounts/default; }

up() {
  local running=0 c t0
  for c in "${components[@]}"; do
    if pid_of "$dir" "$c" >/dev/null; then running=$((running + 1)); fi
  done
  if ((running == ${#components[@]})); then
    log "already running in $dir"
    echo "$dir/admin.kubeconfig"
    return 0
  elif ((running)); then
    die "$dir has part of a control plane running: run '$0 down $dir' first"
  fi
  ensure_packages
  bin=$(build)
  log "binary $bin"
  t0=$SECONDS
  pki "$dir"
  local ports
  mapfile -t ports < <("$bin" free-ports 4)
  etcd_port=${ports[0]}
  local peer_port=${ports[1]}
  api_port=${ports[2]}
  kcm_port=${ports[3]}
  local pki=$dir/pki

  # Single member, loopback only. Its peer port is plain HTTP since there are no peers. No fsync:
  # a test cluster dies with its machine anyway, and fsync on a busy CI disk slows every write.
  start "$dir" etcd --name=default --data-dir="$dir/etcd" \
    --listen-client-urls="https://127.0.0.1:$etcd_port" \
    --advertise-client-urls="https://127.0.0.1:$etcd_port" \
    --listen-peer-urls="http://127.0.0.1:$peer_port" \
    --initial-advertise-peer-urls="http://127.0.0.1:$peer_port" \
    --initial-cluster="default=http://127.0.0.1:$peer_port" \
    --cert-file="$pki/etcd-server.crt" --key-file="$pki/etcd-server.key" \
    --trusted-ca-file="$pki/ca.crt" --client-cert-auth \
    --unsafe-no-fsync
  wait_for "$dir" etcd "health" etcd_healthy

  cat >"$dir/audit-policy.yaml" <<'EOF'
# Every request at Metadata: who, what, and the response code (so a 403 shows up).
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
EOF
  # --enable-aggregator-routing: webhook (and aggregated API) Services are called at an
  # endpoint's pod IP instead of their ClusterIP, which nothing routes without kube-proxy; the
  # node agent's pods (tests/node-agent) have IPs the host reaches.
  # --advertise-address is loopback, which Endpoints refuse: the `kubernetes` Service keeps no
  # endpoints (--endpoint-reconciler-type=none) instead of the reconciler failing every 10s.
  start "$dir" kube-apiserver \
    --bind-address=127.0.0.1 --secure-port="$api_port" --advertise-address=127.0.0.1 \
    --endpoint-reconciler-type=none \
    --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
    --client-ca-file="$pki/ca.crt" \
    --requestheader-client-ca-file="$pki/front-proxy-ca.crt" \
    --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
    --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --proxy-client-cert-file="$pki/front-proxy-client.crt" \
    --proxy-client-key-file="$pki/front-proxy-client.key" \
    --etcd-servers="https://127.0.0.1:$etcd_port" --etcd-cafile="$pki/ca.crt" \
    --etcd-certfile="$pki/apiserver-etcd-client.crt" \
    --etcd-keyfile="$pki/apiserver-etcd-client.key" \
    --authorization-mode=Node,RBAC \
    --enable-admission-plugins=NamespaceLifecycle,ServiceAccount,NodeRestriction,ResourceQuota,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,ValidatingAdmissionPolicy \
    --service-cluster-ip-range="$service_cidr" \
    --service-account-issuer="$issuer" \
    --service-account-key-file="$pki/sa.pub" \
    --service-account-signing-key-file="$pki/sa.key" \
    --audit-policy-file="$dir/audit-policy.yaml" --audit-log-path="$dir/audit.log" \
    --allow-privileged=true --profiling=false \
    --enable-aggregator-routing=true
  wait_for "$dir" kube-apiserver "/readyz ok" apiserver_ready

  kubeconfig "$dir" admin admin "$api_port"
  kubeconfig "$dir" kube-controller-manager kube-controller-manager "$api_port"
  local kc=$dir/kube-controller-manager.kubeconfig
  # One instance: no leader election, so a restart on the same DIR does not wait out the
  # previous holder's lease.
  start "$dir" kube-controller-manager \
    --kubeconfig="$kc" --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
    --bind-address=127.0.0.1 --secure-port="$kcm_port" --cert-dir="$dir/kcm-serving" \
    --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
    --use-service-account-credentials=true --leader-elect=false \
    --controllers="$controllers" --profiling=false
  wait_for "$dir" kube-controller-manager "/healthz ok" kcm_healthy
  wait_for "$dir" kube-controller-manager "default ServiceAccount" controllers_acting

  log "started and ready in $((SECONDS - t0))s (certificates included): API server https://127.0.0.1:$api_port"
  echo "$dir/admin.kubeconfig"
}

[ $# -ge 1 ] || usage
case $1 in
build)
  [ $# -eq 1 ] || usage
  build
  ;;
up | down)
  [ $# -eq 2 ] || usage
  # Nothing to stop in a DIR that does not exist; `up` makes it.
  [ "$1" = up ] || [ -d "$2" ] || exit 0
  mkdir -p "$2"
  dir=$(cd "$2" && pwd -P)
  if [ "$1" = up ]; then up; else down "$dir"; fi
  ;;
*) usage ;;
esac
