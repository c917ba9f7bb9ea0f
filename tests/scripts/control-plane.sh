#!/usr/bin/env bash
# A real Kubernetes control plane for tests: etcd, kube-apiserver and kube-controller-manager
# as local processes on loopback, built from the upstream Go modules pinned in
# tests/control-plane/go.mod (the only place the versions are written). No kubelet, no
# container runtime: pods are stored and controllers act on them, but nothing runs them.
#
#   tests/scripts/control-plane.sh up DIR     build what is missing, start, wait until ready;
#                                             the LAST line printed is the admin kubeconfig
#   tests/scripts/control-plane.sh up DIR --node
#                                             the same plus one real node (kubelet, containerd,
#                                             CNI, kube-proxy, kube-scheduler, CoreDNS): see
#                                             tests/control-plane/README.md, "A real node"
#   tests/scripts/control-plane.sh down DIR   stop what `up DIR` started (idempotent)
#   tests/scripts/control-plane.sh build [node]
#                                             build the binary if missing, print its path;
#                                             `node`: everything `up --node` runs (the node's
#                                             programs, the pause and busybox images)
#   tests/scripts/control-plane.sh packages [node]
#                                             apt-install what `up [--node]` needs, if missing
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

# Cluster-internal ranges. Without a node they are only ever written into objects: nothing routes
# or sends to them. A node's kube-proxy routes its range in the host's namespace, so a cluster
# with a node takes another one (kind's), and the node agent's clusters on the same machine
# (tests/kube runs both at once) never have a ClusterIP of theirs caught by this node's rules.
service_cidr=10.0.0.0/24
service_ip=10.0.0.1
node_service_cidr=10.96.0.0/16
node_service_ip=10.96.0.1
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
  echo "usage: $0 up DIR [--node] | down DIR | build [node] | packages [node]" >&2
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

# Prints the path of the cached binary, building it first if it is not there. With `node`, the
# node's binary (node/: kubelet, kube-proxy, kube-scheduler) from the same module instead.
build() {
  local what=${1:-control-plane} k8s etcd hash dir bin go ldflags v pkg main sources
  if [ "$what" = node ]; then main=./node sources='node/*.go'; else main=. sources='./*.go'; fi
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
  # shellcheck disable=SC2086 # $sources is a glob
  hash=$(cd "$module" && cat go.mod go.sum $sources | sha256sum | cut -c1-12)
  hash=$(printf '%s %s' "$hash" "$ldflags" | sha256sum | cut -c1-12)
  dir=$tools/$what/$k8s-$hash
  bin=$dir/$what
  if [ ! -x "$bin" ]; then
    mkdir -p "$dir"
    go=$(find_go)
    # Two callers building at once would each spend the whole build: the second waits.
    exec 9>"$dir/.lock"
    flock 9
    if [ ! -x "$bin" ]; then
      if [ "$what" = node ]; then
        log "building kubelet, kube-proxy and kube-scheduler $k8s into $dir" \
          "(a cold build compiles Kubernetes: many minutes)"
      else
        log "building kube-apiserver, kube-controller-manager $k8s and etcd $etcd into $dir" \
          "(a cold build compiles Kubernetes: many minutes)"
      fi
      local start=$SECONDS
      (cd "$module" && GOFLAGS="-mod=readonly -buildvcs=false" nice -n 19 "$go" build \
        -trimpath -ldflags "$ldflags" -o "$bin.tmp" "$main") >&2 || die "go build failed"
      mv "$bin.tmp" "$bin"
      log "built in $((SECONDS - start))s"
    fi
    exec 9>&-
  fi
  echo "$bin"
}

# The node's helper programs, each its own Go module under tests/control-plane/NAME (so their
# dependencies never move the control plane's): coredns (main.go) and netpol (kube-router's
# main package, a `tool` of its go.mod). Prints the cached binary's path, building it first if
# it is not there, cached like the control plane under
# $tools/NAME/<version of MODULE>-<hash of the module>/.
build_aux() { # NAME MODULE [PACKAGE]
  local name=$1 src=$module/$1 pkg=${3:-.} version hash dir bin go
  version=$(awk -v m="$2" '{for (i = 1; i < NF; i++) if ($i == m && $(i + 1) ~ /^v/) {print $(i + 1); exit}}' \
    "$src/go.mod")
  [ -n "$version" ] || die "no $2 version in $src/go.mod"
  # shellcheck disable=SC2046 # the module's Go files, none or several
  hash=$(cd "$src" && cat go.mod go.sum $(find . -maxdepth 1 -name '*.go' | sort) |
    sha256sum | cut -c1-12)
  dir=$tools/$name/$version-$hash
  bin=$dir/$name
  if [ ! -x "$bin" ]; then
    mkdir -p "$dir"
    go=$(find_go)
    exec 9>"$dir/.lock"
    flock 9
    if [ ! -x "$bin" ]; then
      log "building $name ($2 $version) into $dir"
      local start=$SECONDS
      (cd "$src" && GOFLAGS="-mod=readonly -buildvcs=false" nice -n 19 "$go" build \
        -trimpath -ldflags "-s -w" -o "$bin.tmp" "$pkg") >&2 || die "go build of $name failed"
      mv "$bin.tmp" "$bin"
      log "built $name in $((SECONDS - start))s"
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
  # A node started with `up DIR --node` goes first, while the API server still answers.
  if [ -d "$dir/node" ]; then node_down "$dir"; fi
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
    "DNS:localhost,IP:127.0.0.1,IP:$service_ip,IP:$node_service_ip,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
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

start() { # DIR COMPONENT ARGS...: COMPONENT of the control-plane binary
  local dir=$1 c=$2
  shift 2
  start_cmd "$dir" "$c" "$bin" "$c" "$@"
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
    if ((with_node)) && ! pid_of "$dir" kubelet >/dev/null; then
      die "$dir has a control plane running without a node: run '$0 down $dir' first"
    fi
    log "already running in $dir"
    echo "$dir/admin.kubeconfig"
    return 0
  elif ((running)); then
    die "$dir has part of a control plane running: run '$0 down $dir' first"
  fi
  ensure_packages
  if ((with_node)); then node_prepare; fi
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
  # With a node (--node), pods reach the API server through the `kubernetes` Service, which
  # kube-proxy sends to the advertised address: the node's IP, which the API server then listens
  # on too, and which Endpoints accept.
  # It also calls the kubelet (logs, exec, port-forward) at the node's InternalIP (the Hostname
  # does not resolve here) with a client certificate of its own.
  local bind=127.0.0.1 advertise=127.0.0.1 reconciler=none kubelet_flags=()
  if ((with_node)); then
    bind=0.0.0.0 advertise=$node_ip reconciler=lease
    cert "$pki" apiserver-kubelet-client client "/O=system:masters/CN=kube-apiserver-kubelet-client"
    chmod 600 "$pki"/*.key
    # shellcheck disable=SC2054 # the comma is within one flag's value
    kubelet_flags=(--kubelet-client-certificate="$pki/apiserver-kubelet-client.crt"
      --kubelet-client-key="$pki/apiserver-kubelet-client.key"
      --kubelet-preferred-address-types=InternalIP,Hostname)
  fi
  start "$dir" kube-apiserver \
    --bind-address="$bind" --secure-port="$api_port" --advertise-address="$advertise" \
    --endpoint-reconciler-type="$reconciler" \
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
    --enable-aggregator-routing=true "${kubelet_flags[@]}"
  wait_for "$dir" kube-apiserver "/readyz ok" apiserver_ready

  kubeconfig "$dir" admin admin "$api_port"
  kubeconfig "$dir" kube-controller-manager kube-controller-manager "$api_port"
  local kc=$dir/kube-controller-manager.kubeconfig
  # A real node registers with the node.kubernetes.io/not-ready taint, which the node lifecycle
  # controller lifts once it is Ready (and puts back, with taint-based eviction, if it stops
  # reporting): only with --node, as the node agent's Nodes post no heartbeats.
  # And the volume controllers: binding claims to volumes (and asking the node's provisioner for
  # them), attach/detach bookkeeping; and the Job and CronJob controllers (the ensembles' backup
  # runs), which without a node would make pods nothing runs.
  if ((with_node)); then
    controllers+=,node-lifecycle-controller,taint-eviction-controller
    controllers+=,persistentvolume-binder-controller,persistentvolume-attach-detach-controller
    controllers+=,job-controller,cronjob-controller
  fi
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
  if ((with_node)); then node_up; fi
  echo "$dir/admin.kubeconfig"
}

# --- A real node: `up DIR --node` ------------------------------------------------------------
# kubelet, kube-proxy and kube-scheduler (the node binary, built from the same module as the
# control plane), containerd and runc (Debian's) with their state under DIR/node, Debian's CNI
# plugins, CoreDNS (tests/control-plane/coredns) and kube-router's network policy controller
# (tests/control-plane/netpol) and Rancher's local-path-provisioner (tests/control-plane/storage)
# as host processes. Nothing is pulled: the sandbox image is built here from pause/pause.c, a
# busybox image (the provisioner's helper pods, tests) from Debian's busybox-static, and both are
# imported, as is the project's image.

pod_cidr=10.250.0.0/24
cni_bridge=baton-node0
dns_ip=10.96.0.10
node_name=baton-test-node
pause_image=localhost/baton-test/pause:3.10
busybox_image=localhost/baton-test/busybox:1
# Host-wide settings the kubelet (kernel tunables), CNI (forwarding) and kube-proxy change: `up`
# saves them once, `down` puts them back.
node_sysctls=(kernel.panic kernel.panic_on_oops vm.overcommit_memory vm.panic_on_oom
  net.ipv4.ip_forward net.ipv4.conf.all.route_localnet net.bridge.bridge-nf-call-iptables)

# The address the node has and pods reach the host at: the source of the default route.
default_ip() {
  ip -4 route get 1.1.1.1 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "src") {print $(i + 1); exit}}'
}

# Before the control plane starts: packages, the node's address, and the builds of the node
# binary and CoreDNS in the background while the control plane builds and starts.
node_prepare() {
  node_packages
  node_ip=$(default_ip)
  [ -n "$node_ip" ] || die "no IPv4 default route: the node needs an address pods reach the host at"
  # The kubelet's cgroups (kubepods) and /var/log/containers are the host's: one node a machine.
  local pid
  for pid in $(pgrep -f -- ' kubelet --config=.*/node/kubelet.yaml' || true); do
    die "a node already runs on this machine (kubelet $pid: $(tr '\0' ' ' <"/proc/$pid/cmdline" | cut -c1-200))"
  done
  mkdir -p "$dir/node"
  : >"$dir/node-build.log"
  node_programs "$dir/node" 2>>"$dir/node-build.log" &
  node_build_pid=$!
}

# The packages a node needs (apt-installed when missing).
node_packages() {
  local missing=() p
  for p in containerd runc containernetworking-plugins iptables ipset conntrack jq umoci skopeo \
    gcc libc6-dev busybox-static; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    log "installing ${missing[*]} (apt)"
    apt-get update >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2
  fi
}

# The node's Go programs, built (or found in the cache); each one's path goes into OUT/NAME.path.
node_programs() { # OUT
  build node >"$1/node.path" &&
    build_aux coredns github.com/coredns/coredns >"$1/coredns.path" &&
    build_aux netpol github.com/cloudnativelabs/kube-router/v2 \
      github.com/cloudnativelabs/kube-router/v2/cmd/kube-router >"$1/netpol.path" &&
    build_aux storage github.com/rancher/local-path-provisioner \
      github.com/rancher/local-path-provisioner >"$1/storage.path"
}

# The sandbox image: pause/pause.c built static, packed as a one-layer image with umoci and
# written as a docker-archive with skopeo, cached under $tools/pause/<hash>/pause.tar.
build_pause() {
  local src=$module/pause hash out tmp
  hash=$({ cat "$src/pause.c"; declare -f build_pause; echo "$pause_image"; } | sha256sum | cut -c1-12)
  out=$tools/pause/$hash
  if [ ! -s "$out/pause.tar" ]; then
    mkdir -p "$out"
    tmp=$(mktemp -d "$out/tmp.XXXXXX")
    if ! cc -static -Os -o "$tmp/pause" "$src/pause.c" || ! strip "$tmp/pause"; then
      die "building pause failed"
    fi
    umoci init --layout "$tmp/oci" >&2
    umoci new --image "$tmp/oci:${pause_image##*:}" >&2
    umoci unpack --image "$tmp/oci:${pause_image##*:}" "$tmp/bundle" >&2
    install -m 0755 "$tmp/pause" "$tmp/bundle/rootfs/pause"
    umoci repack --image "$tmp/oci:${pause_image##*:}" "$tmp/bundle" >&2
    umoci config --image "$tmp/oci:${pause_image##*:}" --config.entrypoint /pause \
      --config.user 65535:65535 --os linux --architecture amd64 >&2
    skopeo copy -q "oci:$tmp/oci:${pause_image##*:}" "docker-archive:$out/pause.tar.tmp:$pause_image" >&2
    mv "$out/pause.tar.tmp" "$out/pause.tar"
    rm -rf "$tmp"
  fi
  echo "$out/pause.tar"
}

# A busybox image (sh, mkdir, rm, nslookup, wget, httpd, nc, ...) from Debian's static busybox: the
# local-path provisioner's helper pods run it, and tests may. Cached like the pause image.
build_busybox() {
  local busybox tools_linked hash out tmp tool
  busybox=$(command -v busybox) || die "no busybox (Debian's busybox-static)"
  tools_linked="sh mkdir rm rmdir chmod ls cat echo sleep seq timeout nslookup wget httpd nc"
  hash=$({ sha256sum <"$busybox"; echo "$tools_linked $busybox_image"; } | sha256sum | cut -c1-12)
  out=$tools/busybox/$hash
  if [ ! -s "$out/busybox.tar" ]; then
    mkdir -p "$out"
    tmp=$(mktemp -d "$out/tmp.XXXXXX")
    umoci init --layout "$tmp/oci" >&2
    umoci new --image "$tmp/oci:1" >&2
    umoci unpack --image "$tmp/oci:1" "$tmp/bundle" >&2
    mkdir -p "$tmp/bundle/rootfs/bin" "$tmp/bundle/rootfs/tmp"
    chmod 1777 "$tmp/bundle/rootfs/tmp"
    install -m 0755 "$busybox" "$tmp/bundle/rootfs/bin/busybox"
    for tool in $tools_linked; do ln -s busybox "$tmp/bundle/rootfs/bin/$tool"; done
    umoci repack --image "$tmp/oci:1" "$tmp/bundle" >&2
    umoci config --image "$tmp/oci:1" --config.cmd /bin/sh --config.env PATH=/bin >&2
    skopeo copy -q "oci:$tmp/oci:1" "docker-archive:$out/busybox.tar.tmp:$busybox_image" >&2
    mv "$out/busybox.tar.tmp" "$out/busybox.tar"
    rm -rf "$tmp"
  fi
  echo "$out/busybox.tar"
}

# Starts CMD as NAME of DIR, logging to DIR/NAME.log, its pid in DIR/NAME.pid. Its own session,
# so a signal to the caller's process group does not reach it: `down` is what stops it. setsid
# execs in place here (we are no group leader), so $! is its pid.
start_cmd() { # DIR NAME CMD...
  local dir=$1 c=$2 pid i
  shift 2
  setsid "$@" >>"$dir/$c.log" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$dir/$c.pid"
  # pid_of knows our processes by DIR in their arguments, which the background shell has only
  # once it has exec'd: on a busy machine, checking before then took a live process for a dead one.
  for i in $(seq 1 200); do
    pid_of "$dir" "$c" >/dev/null && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  log "started $c ($pid), log $dir/$c.log"
}

stop_one() { # DIR COMPONENT
  local pid
  if pid=$(pid_of "$1" "$2"); then
    log "stopping $2 ($pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 300); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      log "$2 did not stop within 30s of SIGTERM: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$1/$2.pid"
}

admin_send() { # METHOD PATH [JSON]: fails unless the API server answers 2xx
  curl -fsS --max-time 10 --cacert "$dir/pki/ca.crt" --cert "$dir/pki/admin.crt" \
    --key "$dir/pki/admin.key" -X "$1" -H 'Content-Type: application/json' \
    ${3:+--data-binary "$3"} "https://127.0.0.1:$api_port$2"
}

node_ready() {
  [ "$(admin_curl "/api/v1/nodes/$node_name" |
    jq '.status.conditions[] | select(.type == "Ready") | .status == "True"')" = true ]
}
containerd_up() { ctr --address "$dir/node/containerd/containerd.sock" version; }
scheduler_healthy() { [ "$(curl -ksS --max-time 5 "https://127.0.0.1:$sched_port/healthz")" = ok ]; }
proxy_healthy() { curl -fsS --max-time 5 "http://127.0.0.1:$proxy_healthz/healthz"; }
netpol_healthy() { curl -fsS --max-time 5 "http://127.0.0.1:$netpol_health/healthz"; }
coredns_ready() { curl -fsS --max-time 5 "http://127.0.0.1:$dns_ready/ready"; }

node_up() {
  local nd=$dir/node pki=$dir/pki t1=$SECONDS ports s v node_bin coredns_bin netpol_bin pause_tar
  local storage_bin busybox_tar
  local sock=$dir/node/containerd/containerd.sock
  if ! wait "$node_build_pid"; then
    tail -n 30 "$dir/node-build.log" >&2 || true
    down "$dir"
    die "building the node's programs failed (log: $dir/node-build.log)"
  fi
  node_bin=$(cat "$nd/node.path")
  coredns_bin=$(cat "$nd/coredns.path")
  netpol_bin=$(cat "$nd/netpol.path")
  storage_bin=$(cat "$nd/storage.path")
  log "node binary $node_bin, CoreDNS $coredns_bin, kube-router $netpol_bin," \
    "local-path-provisioner $storage_bin"
  pause_tar=$(build_pause)
  busybox_tar=$(build_busybox)
  mapfile -t ports < <("$bin" free-ports 9)
  netpol_health=${ports[8]}
  local kubelet_port=${ports[0]} kubelet_healthz=${ports[1]} proxy_metrics=${ports[4]}
  local dns_port=${ports[5]} dns_health=${ports[6]}
  sched_port=${ports[2]} proxy_healthz=${ports[3]} dns_ready=${ports[7]}

  if [ ! -s "$nd/sysctls.saved" ]; then
    for s in "${node_sysctls[@]}"; do
      if v=$(sysctl -n "$s" 2>/dev/null); then echo "$s=$v"; fi
    done >"$nd/sysctls.saved"
  fi

  # Identities: the kubelet as system:node:NAME (the Node authorizer and NodeRestriction),
  # kube-proxy and kube-scheduler as the users the default RBAC bindings name.
  cert "$pki" kubelet-client client "/O=system:nodes/CN=system:node:$node_name"
  cert "$pki" kubelet server "/CN=$node_name" "DNS:$node_name,IP:$node_ip,IP:127.0.0.1"
  cert "$pki" kube-proxy client "/CN=system:kube-proxy"
  cert "$pki" kube-scheduler client "/CN=system:kube-scheduler"
  chmod 600 "$pki"/*.key
  kubeconfig "$dir" kubelet kubelet-client "$api_port"
  kubeconfig "$dir" kube-proxy kube-proxy "$api_port"
  kubeconfig "$dir" kube-scheduler kube-scheduler "$api_port"

  # containerd: its own root, state, socket and runc root under DIR/node/containerd; the CRI
  # plugin with cgroupfs (cgroup v1 here), the local sandbox image, CNI from DIR/node/cni.
  mkdir -p "$nd/containerd" "$nd/cni/net.d" "$nd/cni/ipam" "$nd/kubelet" "$nd/pod-logs"
  cat >"$nd/containerd.toml" <<EOF
version = 2
root = "$nd/containerd/root"
state = "$nd/containerd/state"
[grpc]
  address = "$sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$nd/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause_image"
  netns_mounts_under_state_dir = true
  # No container gets a lower oom_score_adj than containerd's own: lowering it needs
  # CAP_SYS_RESOURCE, which the test machines' root lacks (runc fails the sandbox otherwise).
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "$(command -v runc)"
        Root = "$nd/containerd/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$nd/cni/net.d"
EOF
  start_cmd "$dir" containerd containerd --config "$nd/containerd.toml"
  wait_for "$dir" containerd "its socket" containerd_up

  # The images: the sandbox's, and the project's (CONTROL_PLANE_IMAGES, or what
  # `tests/scripts/image.sh build target/image` wrote).
  local images=("$pause_tar" "$busybox_tar") extra a
  if [ -n "${CONTROL_PLANE_IMAGES:-}" ]; then
    read -ra extra <<<"$CONTROL_PLANE_IMAGES"
    images+=("${extra[@]}")
  elif [ -s "$repo/target/image/baton-image.tar" ]; then
    images+=("$repo/target/image/baton-image.tar")
  else
    log "no image of the project to import: build one with 'tests/scripts/image.sh build" \
      "target/image' (or name archives in CONTROL_PLANE_IMAGES) and run up --node again"
  fi
  for a in "${images[@]}"; do
    [ -s "$a" ] || { down "$dir"; die "no image archive $a"; }
    log "importing $a"
    ctr --address "$sock" -n k8s.io images import "$a" >&2 || { down "$dir"; die "importing $a failed"; }
  done

  local kc=$dir/kube-scheduler.kubeconfig
  start_cmd "$dir" kube-scheduler "$node_bin" kube-scheduler \
    --kubeconfig="$kc" --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
    --bind-address=127.0.0.1 --secure-port="$sched_port" --leader-elect=false
  wait_for "$dir" kube-scheduler "/healthz ok" scheduler_healthy

  cat >"$nd/cni/net.d/10-baton-node.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "baton-node",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$cni_bridge",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$nd/cni/ipam",
        "ranges": [[{"subnet": "$pod_cidr"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF

  # No image garbage collection and (nearly) no eviction: nothing could pull an image back, and a
  # busy test machine's disk or memory must not evict the pods under test.
  cat >"$nd/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $node_ip
port: $kubelet_port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $kubelet_healthz
tlsCertFile: $pki/kubelet.crt
tlsPrivateKeyFile: $pki/kubelet.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$sock
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
clusterDomain: cluster.local
clusterDNS: [$dns_ip]
resolvConf: /etc/resolv.conf
podLogsDir: $nd/pod-logs
volumePluginDir: $nd/kubelet-plugins
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 50Mi, nodefs.available: 1%, nodefs.inodesFree: 1%, imagefs.available: 1%, imagefs.inodesFree: 1%}
serializeImagePulls: false
rotateCertificates: false
EOF
  start_cmd "$dir" kubelet "$node_bin" kubelet --config="$nd/kubelet.yaml" --kubeconfig="$dir/kubelet.kubeconfig" \
    --root-dir="$nd/kubelet" --cert-dir="$nd/kubelet/pki" --hostname-override="$node_name" \
    --node-ip="$node_ip" --pod-infra-container-image="$pause_image" --v=1

  cat >"$nd/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $dir/kube-proxy.kubeconfig}
hostnameOverride: $node_name
mode: iptables
clusterCIDR: $pod_cidr
healthzBindAddress: 127.0.0.1:$proxy_healthz
metricsBindAddress: 127.0.0.1:$proxy_metrics
nodePortAddresses: [primary]
iptables: {localhostNodePorts: false}
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
  start_cmd "$dir" kube-proxy "$node_bin" kube-proxy --config="$nd/kube-proxy.yaml"

  # Cluster DNS: CoreDNS on the node's address, behind the kube-dns Service (its ClusterIP is the
  # kubelet's clusterDNS) with an EndpointSlice naming that address, as kube-proxy routes it.
  cat >"$nd/Corefile" <<EOF
.:$dns_port {
    bind $node_ip
    errors
    health 127.0.0.1:$dns_health
    ready 127.0.0.1:$dns_ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $dir/admin.kubeconfig baton-test
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    cache 30
}
EOF
  start_cmd "$dir" coredns "$coredns_bin" -conf "$nd/Corefile"
  admin_send DELETE /api/v1/namespaces/kube-system/services/kube-dns >/dev/null 2>&1 || true
  admin_send DELETE /apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices/kube-dns \
    >/dev/null 2>&1 || true
  admin_send POST /api/v1/namespaces/kube-system/services "$(
    cat <<EOF
{"apiVersion": "v1", "kind": "Service",
 "metadata": {"name": "kube-dns", "namespace": "kube-system",
              "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}},
 "spec": {"clusterIP": "$dns_ip",
          "ports": [{"name": "dns", "port": 53, "protocol": "UDP", "targetPort": $dns_port},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": $dns_port}]}}
EOF
  )" >/dev/null || { down "$dir"; die "creating the kube-dns Service failed"; }
  admin_send POST /apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices "$(
    cat <<EOF
{"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
 "metadata": {"name": "kube-dns", "namespace": "kube-system",
              "labels": {"kubernetes.io/service-name": "kube-dns",
                         "endpointslice.kubernetes.io/managed-by": "control-plane.sh"}},
 "addressType": "IPv4",
 "endpoints": [{"addresses": ["$node_ip"], "conditions": {"ready": true}, "nodeName": "$node_name"}],
 "ports": [{"name": "dns", "port": $dns_port, "protocol": "UDP"},
           {"name": "dns-tcp", "port": $dns_port, "protocol": "TCP"}]}
EOF
  )" >/dev/null || { down "$dir"; die "creating the kube-dns EndpointSlice failed"; }

  wait_for "$dir" kubelet "a Ready Node $node_name" node_ready
  # NetworkPolicy: kube-router's controller alone (no routing, no service proxy, no CNI of its
  # own), iptables chains and ipsets in the host's namespace filtering the node's pods. It
  # starts once the Node exists: it reads the node's address from it.
  start_cmd "$dir" netpol "$netpol_bin" --run-firewall=true --run-router=false \
    --run-service-proxy=false --enable-cni=false --kubeconfig="$dir/admin.kubeconfig" \
    --hostname-override="$node_name" --service-cluster-ip-range="$service_cidr" \
    --health-port="$netpol_health" --metrics-port=0
  wait_for "$dir" netpol "/healthz ok" netpol_healthy

  # Storage: the default StorageClass `standard` (as kind names it), provisioned by Rancher's
  # local-path-provisioner (as kind's is) into directories under DIR/node/local-path, which its
  # helper pods (busybox) make and remove on the node. WaitForFirstConsumer: the scheduler picks
  # the node, then the volume is made there. Each volume is a `local` PersistentVolume (not
  # hostPath, the provisioner's default) of a directory owned by root, mode 0755, as a new
  # disk's file system is: a non-root container can write to it only through its pod's fsGroup,
  # which the kubelet applies to local volumes (kind's 0777 directories would hide a missing one).
  mkdir -p "$nd/local-path"
  local lp_ns=local-path-storage lp_sa=local-path-provisioner-service-account
  cat >"$nd/local-path.json" <<EOF
{"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["$nd/local-path"]}]}
EOF
  cat >"$nd/local-path-helper.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata: {name: helper-pod}
spec:
  priorityClassName: system-node-critical
  tolerations: [{key: node.kubernetes.io/disk-pressure, operator: Exists, effect: NoSchedule}]
  containers:
  - {name: helper-pod, image: $busybox_image, imagePullPolicy: Never}
EOF
  admin_send POST /api/v1/namespaces "{\"metadata\": {\"name\": \"$lp_ns\"}}" >/dev/null 2>&1 || true
  admin_send POST "/api/v1/namespaces/$lp_ns/serviceaccounts" \
    "{\"metadata\": {\"name\": \"$lp_sa\"}}" >/dev/null 2>&1 || true
  admin_send DELETE "/api/v1/namespaces/$lp_ns/configmaps/local-path-config" >/dev/null 2>&1 || true
  # The helper pods run the scripts of this ConfigMap (a volume of theirs).
  admin_send POST "/api/v1/namespaces/$lp_ns/configmaps" "$(jq -n \
    --arg config "$(cat "$nd/local-path.json")" --arg helper "$(cat "$nd/local-path-helper.yaml")" \
    '{metadata: {name: "local-path-config"}, data: {"config.json": $config,
      setup: "#!/bin/sh\nset -eu\nmkdir -m 0755 -p \"$VOL_DIR\"\n",
      teardown: "#!/bin/sh\nset -eu\nrm -rf \"$VOL_DIR\"\n", "helperPod.yaml": $helper}}')" \
    >/dev/null || { down "$dir"; die "creating the local-path-config ConfigMap failed"; }
  admin_send POST /apis/storage.k8s.io/v1/storageclasses '{"metadata": {"name": "standard",
    "annotations": {"storageclass.kubernetes.io/is-default-class": "true",
      "defaultVolumeType": "local"}},
    "provisioner": "rancher.io/local-path", "reclaimPolicy": "Delete",
    "volumeBindingMode": "WaitForFirstConsumer"}' >/dev/null 2>&1 || true
  start_cmd "$dir" storage "$storage_bin" start --config "$nd/local-path.json" \
    --provisioner-name rancher.io/local-path --namespace "$lp_ns" --helper-image "$busybox_image" \
    --kubeconfig "$dir/admin.kubeconfig" --configmap-name local-path-config \
    --service-account-name "$lp_sa" --helper-pod-file "$nd/local-path-helper.yaml"
  wait_for "$dir" kube-proxy "/healthz ok" proxy_healthy
  wait_for "$dir" coredns "/ready ok" coredns_ready
  log "node $node_name ($node_ip) Ready in $((SECONDS - t1))s: pods in $pod_cidr, cluster DNS $dns_ip"
}

# iptables rules and chains whose chain name starts with PREFIX, in every table of iptables and
# ip6tables: the jumps to them from other chains deleted, then the chains themselves.
drop_chains() { # PREFIX
  local cmd table rule chain
  for cmd in iptables ip6tables; do
    command -v "$cmd" >/dev/null || continue
    for table in filter nat mangle raw; do
      "$cmd" -t "$table" -S >/dev/null 2>&1 || continue
      while read -r rule; do
        # shellcheck disable=SC2086 # a rule as iptables -S prints it, re-split into arguments
        eval "$cmd -t $table ${rule/#-A/-D}" 2>/dev/null || true
      done < <("$cmd" -t "$table" -S | grep -E "^-A .* -j $1" | grep -vE "^-A $1" || true)
      for chain in $("$cmd" -t "$table" -S | awk -v p="$1" '$1 == "-N" && index($2, p) == 1 {print $2}'); do
        "$cmd" -t "$table" -F "$chain" 2>/dev/null || true
      done
      for chain in $("$cmd" -t "$table" -S | awk -v p="$1" '$1 == "-N" && index($2, p) == 1 {print $2}'); do
        "$cmd" -t "$table" -X "$chain" 2>/dev/null || true
      done
    done
  done
}

node_down() {
  local dir=$1 nd=$1/node sock=$1/node/containerd/containerd.sock node_bin="" pid m s cg
  node_bin=$(cat "$nd/node.path" 2>/dev/null) || true
  # The kubelet and kube-proxy first, so that nothing recreates what is removed next.
  stop_one "$dir" storage
  stop_one "$dir" netpol
  stop_one "$dir" coredns
  stop_one "$dir" kube-proxy
  stop_one "$dir" kubelet
  stop_one "$dir" kube-scheduler
  # Every pod sandbox stopped and removed through the CRI, as the kubelet does: the runtime
  # stops the containers, calls CNI DEL (veth, address, NAT rules) and removes the netns.
  if pid_of "$dir" containerd >/dev/null && [ -x "$node_bin" ]; then
    "$node_bin" cri-clean "unix://$sock" >&2 || log "removing the pod sandboxes failed"
  fi
  stop_one "$dir" containerd
  # runc shims outlive containerd by design: those of this containerd (its socket in their
  # arguments) go too.
  for pid in $(pgrep -f -- "-address $sock" || true); do
    log "stopping containerd-shim $pid"
    kill -KILL "$pid" 2>/dev/null || true
  done
  # kube-proxy's rules (its own cleanup), then the kubelet's chains (KUBE-FIREWALL,
  # KUBE-KUBELET-CANARY, KUBE-IPTABLES-HINT) and the portmap plugin's, which outlive their pods.
  if [ -x "$node_bin" ]; then "$node_bin" kube-proxy --cleanup >>"$dir/kube-proxy.log" 2>&1 || true; fi
  drop_chains KUBE-
  drop_chains CNI-HOSTPORT-
  # kube-router's ipsets (KUBE-SRC-*, KUBE-DST-*, kube-router-*), unused once its chains are gone.
  if command -v ipset >/dev/null; then
    for s in $(ipset list -n 2>/dev/null | grep -E '^(inet6:)?(KUBE-|kube-router-)' || true); do
      ipset destroy "$s" 2>/dev/null || true
    done
  fi
  # iptables-nft leaves its tables behind, empty: those with no rule and no chain of their own go.
  local fam t
  if command -v nft >/dev/null; then
    for fam in ip ip6; do
      for t in filter nat mangle raw; do
        nft list table "$fam" "$t" >/dev/null 2>&1 || continue
        # Read whole first: grep -q stopping early would fail the pipeline (pipefail).
        # shellcheck disable=SC2143
        if [ -z "$(nft list table "$fam" "$t" | grep -vE '^\s*(table|chain|type|}|$)')" ]; then
          nft delete table "$fam" "$t" 2>/dev/null || true
        fi
      done
    done
  fi
  ip link del "$cni_bridge" 2>/dev/null || true
  # Whatever is still mounted under DIR (pod volumes, network namespaces, container rootfs
  # and shm of a runtime that was killed), innermost first.
  while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done < <(awk -v d="$dir/" 'index($2, d) == 1 {print $2}' /proc/self/mounts | sort -r)
  # The kubelet's pod cgroups, in every v1 hierarchy (or the v2 tree), innermost first.
  for cg in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
    if [ -d "$cg" ]; then find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true; fi
  done
  # The kubelet's links to container logs (kept in DIR/node/pod-logs).
  for m in /var/log/containers/*.log; do
    [ -L "$m" ] && [[ $(readlink "$m") == "$nd/"* ]] && rm -f "$m"
  done
  # containerd 1.6 keeps its shims' sockets in /run/containerd/s whatever its state dir: the
  # directories it made there go when empty and no other containerd runs.
  if [ -d /run/containerd ] && ! pgrep -x containerd >/dev/null; then
    find /run/containerd -depth -type d -empty -delete 2>/dev/null || true
  fi
  if [ -s "$nd/sysctls.saved" ]; then
    while IFS= read -r s; do sysctl -qw "$s" >/dev/null 2>&1 || true; done <"$nd/sysctls.saved"
    rm -f "$nd/sysctls.saved"
  fi
}

[ $# -ge 1 ] || usage
case $1 in
build)
  [ $# -eq 1 ] || { [ $# -eq 2 ] && [ "$2" = node ]; } || usage
  if [ $# -eq 2 ]; then
    # Everything `up --node` runs, into the cache: the Go programs and the two local images.
    node_packages
    out=$(mktemp -d)
    node_programs "$out" || die "building the node's programs failed"
    cat "$out"/*.path
    rm -rf "$out"
    build_pause
    build_busybox
  else
    build
  fi
  ;;
packages)
  [ $# -eq 1 ] || { [ $# -eq 2 ] && [ "$2" = node ]; } || usage
  ensure_packages
  if [ $# -eq 2 ]; then node_packages; fi
  ;;
up | down)
  with_node=0
  if [ "$1" = up ] && [ $# -eq 3 ] && { [ "$2" = --node ] || [ "$3" = --node ]; }; then
    with_node=1
    service_cidr=$node_service_cidr
    service_ip=$node_service_ip
    if [ "$2" = --node ]; then set -- "$1" "$3"; else set -- "$1" "$2"; fi
  fi
  [ $# -eq 2 ] || usage
  # Nothing to stop in a DIR that does not exist; `up` makes it.
  [ "$1" = up ] || [ -d "$2" ] || exit 0
  mkdir -p "$2"
  dir=$(cd "$2" && pwd -P)
  if [ "$1" = up ]; then up; else down "$dir"; fi
  ;;
*) usage ;;
esac
