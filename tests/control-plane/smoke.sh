#!/usr/bin/env bash
# Checks that a control plane started by `tests/scripts/control-plane.sh up DIR` behaves as a
# real cluster's, with curl and the admin client certificate (no kubectl needed):
# version, namespaces, a ServiceAccount, TokenRequest and TokenReview, RBAC refusing a
# token and the audit log recording it, a ValidatingAdmissionPolicy refusing an object,
# a Deployment turned into a ReplicaSet and Pods by the controllers, a StatefulSet's first
# Pod, and the garbage collector deleting the dependents of a deleted Deployment.
# Usage: tests/control-plane/smoke.sh DIR      Exits non-zero at the first check that fails.
set -euo pipefail
[ $# -eq 1 ] || {
  echo "usage: $0 DIR" >&2
  exit 2
}
dir=$(cd "$1" && pwd -P)
command -v jq >/dev/null || {
  apt-get update >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends jq >&2
}
server=$(awk '$1 == "server:" {print $2; exit}' "$dir/admin.kubeconfig")
ns=smoke-$$
passed=0

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
ok() {
  passed=$((passed + 1))
  echo "ok: $*"
}
# METHOD PATH [BODY]: prints the response body; the HTTP status goes to $status_file.
status_file=$(mktemp)
trap 'rm -f "$status_file"' EXIT
api() {
  local args=(-sS --max-time 10 --cacert "$dir/pki/ca.crt" -X "$1" -o /dev/stdout
    -w '%{stderr}%{http_code}' -H 'Content-Type: application/json')
  if [ -n "${token:-}" ]; then
    args+=(-H "Authorization: Bearer $token")
  else
    args+=(--cert "$dir/pki/admin.crt" --key "$dir/pki/admin.key")
  fi
  [ $# -lt 3 ] || args+=(--data "$3")
  curl "${args[@]}" "$server$2" 2>"$status_file"
}
status() { cat "$status_file"; }
# Polls PATH until the jq FILTER prints true; controllers act asynchronously.
eventually() { # WHAT PATH FILTER
  local deadline=$((SECONDS + 60))
  until [ "$(api GET "$2" | jq -r "$3" 2>/dev/null)" = true ]; do
    ((SECONDS < deadline)) || fail "$1: not within 60s (last answer: $(api GET "$2" | head -c 600))"
    sleep 0.2
  done
  ok "$1"
}

v=$(api GET /version | jq -r .gitVersion)
[[ $v == v1.* && $v != *master* ]] || fail "/version says $v"
ok "/version is $v"

api POST /api/v1/namespaces "{\"metadata\":{\"name\":\"$ns\"}}" >/dev/null
[ "$(status)" = 201 ] || fail "create namespace: HTTP $(status)"
ok "namespace $ns created"

api POST "/api/v1/namespaces/$ns/serviceaccounts" '{"metadata":{"name":"app"}}' >/dev/null
[ "$(status)" = 201 ] || fail "create ServiceAccount: HTTP $(status)"
ok "ServiceAccount $ns/app created"
eventually "the ServiceAccount controller made $ns's default ServiceAccount" \
  "/api/v1/namespaces/$ns/serviceaccounts" '[.items[].metadata.name] | index("default") != null'
eventually "the root-CA publisher made $ns's kube-root-ca.crt" \
  "/api/v1/namespaces/$ns/configmaps" '[.items[].metadata.name] | index("kube-root-ca.crt") != null'

# A token for audience "baton", as a projected volume would get, and the API server's review.
tr='{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"audiences":["baton"],"expirationSeconds":600}}'
baton_token=$(api POST "/api/v1/namespaces/$ns/serviceaccounts/app/token" "$tr" | jq -r .status.token)
if [ "$(status)" != 201 ] || [ -z "$baton_token" ] || [ "$baton_token" = null ]; then
  fail "TokenRequest: HTTP $(status)"
fi
ok "TokenRequest answered a token for audience baton"
review() { # TOKEN AUDIENCE
  api POST /apis/authentication.k8s.io/v1/tokenreviews \
    "{\"apiVersion\":\"authentication.k8s.io/v1\",\"kind\":\"TokenReview\",\"spec\":{\"token\":\"$1\",\"audiences\":[\"$2\"]}}"
}
r=$(review "$baton_token" baton)
[ "$(jq -r .status.authenticated <<<"$r")" = true ] || fail "TokenReview refused the token: $r"
[ "$(jq -r .status.user.username <<<"$r")" = "system:serviceaccount:$ns:app" ] ||
  fail "TokenReview user: $r"
ok "TokenReview: authenticated as system:serviceaccount:$ns:app"
r=$(review "$baton_token" other)
[ "$(jq -r .status.authenticated <<<"$r")" != true ] || fail "TokenReview took another audience: $r"
ok "TokenReview: the same token for another audience is refused ($(jq -r .status.error <<<"$r"))"

# A token for the API server's own audience authenticates, and RBAC, with no binding, refuses.
token=$(api POST "/api/v1/namespaces/$ns/serviceaccounts/app/token" \
  '{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{}}' | jq -r .status.token)
api GET "/api/v1/namespaces/$ns/secrets" >/dev/null
code=$(status)
unset token
[ "$code" = 403 ] || fail "a ServiceAccount without a binding listed secrets: HTTP $code"
ok "RBAC refused the ServiceAccount's token: HTTP 403"
# The log backend writes an event once the response is complete: poll the file. Its last line
# may be half written while we read, so each line is parsed alone and one that fails is skipped.
deadline=$((SECONDS + 60))
until jq -R --arg ns "$ns" 'fromjson? | select(.objectRef.namespace == $ns
    and .responseStatus.code == 403 and .user.username == "system:serviceaccount:\($ns):app")
    | .auditID' "$dir/audit.log" 2>/dev/null | grep -q .; do
  ((SECONDS < deadline)) || fail "no 403 for system:serviceaccount:$ns:app in $dir/audit.log"
  sleep 0.2
done
ok "the audit log records the 403 with the ServiceAccount's name"

# A ValidatingAdmissionPolicy bound to this namespace refuses ConfigMaps without a label.
vap='{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingAdmissionPolicy",
  "metadata":{"name":"'$ns'"},"spec":{"failurePolicy":"Fail",
  "matchConstraints":{"resourceRules":[{"apiGroups":[""],"apiVersions":["v1"],
    "operations":["CREATE"],"resources":["configmaps"]}]},
  "validations":[{"expression":"has(object.metadata.labels) && \"ok\" in object.metadata.labels",
    "message":"smoke: needs label ok"}]}}'
vapb='{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingAdmissionPolicyBinding",
  "metadata":{"name":"'$ns'"},"spec":{"policyName":"'$ns'","validationActions":["Deny"],
  "matchResources":{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"'$ns'"}}}}}'
api POST /apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies "$vap" >/dev/null
[ "$(status)" = 201 ] || fail "create ValidatingAdmissionPolicy: HTTP $(status)"
api POST /apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings "$vapb" >/dev/null
[ "$(status)" = 201 ] || fail "create ValidatingAdmissionPolicyBinding: HTTP $(status)"
# The policy takes effect once the API server's informer has it: poll for the refusal.
deadline=$((SECONDS + 60))
until msg=$(api POST "/api/v1/namespaces/$ns/configmaps" '{"metadata":{"generateName":"c-"}}') &&
  [ "$(status)" = 422 ]; do
  ((SECONDS < deadline)) || fail "the policy never refused an unlabelled ConfigMap: $msg"
  sleep 0.2
done
grep -q "smoke: needs label ok" <<<"$msg" || fail "refusal without the policy's message: $msg"
ok "ValidatingAdmissionPolicy refused an unlabelled ConfigMap with its message"
api POST "/api/v1/namespaces/$ns/configmaps" '{"metadata":{"name":"labelled","labels":{"ok":"y"}}}' >/dev/null
[ "$(status)" = 201 ] || fail "a labelled ConfigMap was refused: HTTP $(status)"
ok "ValidatingAdmissionPolicy let a labelled ConfigMap through"
eventually "the ValidatingAdmissionPolicy status controller type-checked the policy" \
  "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/$ns" \
  '.status.observedGeneration == .metadata.generation and (.status.typeChecking != null)'

pod='{"containers":[{"name":"c","image":"example.invalid/none:1"}]}'
api POST "/apis/apps/v1/namespaces/$ns/deployments" '{"apiVersion":"apps/v1","kind":"Deployment",
  "metadata":{"name":"web"},"spec":{"replicas":2,"selector":{"matchLabels":{"app":"web"}},
  "template":{"metadata":{"labels":{"app":"web"}},"spec":'"$pod"'}}}' >/dev/null
[ "$(status)" = 201 ] || fail "create Deployment: HTTP $(status)"
ok "Deployment $ns/web created"
eventually "the Deployment controller made a ReplicaSet owned by the Deployment" \
  "/apis/apps/v1/namespaces/$ns/replicasets" \
  '[.items[] | select(.metadata.ownerReferences[0].kind == "Deployment" and .metadata.ownerReferences[0].name == "web")] | length == 1'
eventually "the ReplicaSet controller made 2 Pods owned by the ReplicaSet" \
  "/api/v1/namespaces/$ns/pods?labelSelector=app%3Dweb" \
  '[.items[] | select(.metadata.ownerReferences[0].kind == "ReplicaSet")] | length == 2'
eventually "the ServiceAccount admission plugin gave the Pods a projected token volume" \
  "/api/v1/namespaces/$ns/pods?labelSelector=app%3Dweb" \
  '[.items[].spec.volumes[]?.projected.sources[]?.serviceAccountToken.path] | index("token") != null'

api POST "/apis/apps/v1/namespaces/$ns/statefulsets" '{"apiVersion":"apps/v1","kind":"StatefulSet",
  "metadata":{"name":"db"},"spec":{"replicas":3,"serviceName":"db","selector":{"matchLabels":{"app":"db"}},
  "template":{"metadata":{"labels":{"app":"db"}},"spec":'"$pod"'}}}' >/dev/null
[ "$(status)" = 201 ] || fail "create StatefulSet: HTTP $(status)"
# OrderedReady: with no kubelet db-0 never becomes Ready, so db-1 must not appear.
eventually "the StatefulSet controller made db-0 (and, db-0 never Ready, nothing more)" \
  "/api/v1/namespaces/$ns/pods?labelSelector=app%3Ddb" '[.items[].metadata.name] == ["db-0"]'

api DELETE "/apis/apps/v1/namespaces/$ns/deployments/web" '{"propagationPolicy":"Background"}' >/dev/null
[ "$(status)" = 200 ] || fail "delete Deployment: HTTP $(status)"
eventually "the garbage collector deleted the Deployment's ReplicaSet" \
  "/apis/apps/v1/namespaces/$ns/replicasets" '.items | length == 0'
eventually "the garbage collector deleted its Pods" \
  "/api/v1/namespaces/$ns/pods?labelSelector=app%3Dweb" '.items | length == 0'

api DELETE "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/$ns" >/dev/null
api DELETE "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/$ns" >/dev/null
api DELETE "/api/v1/namespaces/$ns" >/dev/null
[ "$(status)" = 200 ] || fail "delete namespace: HTTP $(status)"
# Unscheduled Pods need no kubelet to confirm their deletion, so the namespace goes entirely.
eventually "the namespace controller emptied and deleted $ns" "/api/v1/namespaces/$ns" '.code == 404'
echo "smoke: $passed passed, 0 failed"
