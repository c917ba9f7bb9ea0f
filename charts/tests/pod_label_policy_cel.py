#!/usr/bin/env python3
"""Runs the chart's ValidatingAdmissionPolicy (templates/pod-label-policy.yaml, as Helm renders
it) on sample admission requests, with cel-python (celpy), the way the API server would:
matchConditions first (all true, or the policy does not apply), then the variables in order,
then every validation (any false, or any error under failurePolicy Fail, denies).

Usage: pod_label_policy_cel.py RENDERED_POLICY.yaml
Needs: pip install cel-python pyyaml (tests/scripts/validate-chart.sh installs both in its venv).

celpy does no Kubernetes type checking: that the expressions compile against the Pod schema
is checked by the real API server (tests/kube/tests/pod_label_policy.rs); what this proves, in
a second, is their logic on many more requests.
"""
import copy
import sys

import celpy
import yaml


def load_policy(path):
    with open(path) as f:
        for doc in yaml.safe_load_all(f):
            if doc and doc.get("kind") == "ValidatingAdmissionPolicy":
                return doc
    sys.exit(f"no ValidatingAdmissionPolicy in {path}")


class Policy:
    def __init__(self, doc):
        self.env = celpy.Environment()
        spec = doc["spec"]
        self.failure_policy = spec.get("failurePolicy", "Fail")
        compile_ = lambda e: self.env.program(self.env.compile(e))
        self.conditions = [(c["name"], compile_(c["expression"])) for c in spec.get("matchConditions", [])]
        self.variables = [(v["name"], compile_(v["expression"])) for v in spec.get("variables", [])]
        self.validations = [(v["message"], compile_(v["expression"])) for v in spec["validations"]]

    def admit(self, request):
        """Returns None when allowed, else the denial's message."""
        activation = {
            "request": celpy.json_to_cel(request),
            "object": celpy.json_to_cel(request["object"]),
            "oldObject": celpy.json_to_cel(request["oldObject"]),
        }
        for name, program in self.conditions:
            result = program.evaluate(activation)
            if isinstance(result, Exception):
                return self.error(f"matchCondition {name}: {result}")
            if not bool(result):
                return None
        variables = {}
        for name, program in self.variables:
            activation["variables"] = celpy.json_to_cel({})
            activation["variables"] = celpy.celtypes.MapType(
                {celpy.celtypes.StringType(k): v for k, v in variables.items()})
            value = program.evaluate(activation)
            if isinstance(value, Exception):
                return self.error(f"variable {name}: {value}")
            variables[name] = value
        activation["variables"] = celpy.celtypes.MapType(
            {celpy.celtypes.StringType(k): v for k, v in variables.items()})
        for message, program in self.validations:
            try:
                result = program.evaluate(activation)
            except celpy.CELEvalError as e:
                return self.error(f"{message}: {e}")
            if isinstance(result, Exception):
                return self.error(f"{message}: {result}")
            if not bool(result):
                return " ".join(message.split())
        return None

    def error(self, message):
        return f"error ({message})" if self.failure_policy == "Fail" else None


POD = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {
        "name": "web-6f7c9d8b4-x2x9z", "namespace": "prod", "uid": "u-web-1",
        "labels": {"app": "web", "pod-template-hash": "6f7c9d8b4", "baton.dev/role": "candidate"},
        "annotations": {"baton.dev/inject": "true"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-6f7c9d8b4",
                              "uid": "rs-1", "controller": True}],
    },
    "spec": {"serviceAccountName": "web", "containers": [{"name": "app", "image": "web:1"}]},
}


def request(change, user="system:serviceaccount:prod:web", pod_name="web-6f7c9d8b4-x2x9z",
            pod_uid="u-web-1", old=None):
    old = copy.deepcopy(old or POD)
    new = copy.deepcopy(old)
    change(new)
    extra = {}
    if pod_name is not None:
        extra["authentication.kubernetes.io/pod-name"] = [pod_name]
    if pod_uid is not None:
        extra["authentication.kubernetes.io/pod-uid"] = [pod_uid]
    user_info = {"username": user, "groups": ["system:serviceaccounts", "system:authenticated"]}
    if extra:
        user_info["extra"] = extra
    return {"uid": "r1", "operation": "UPDATE", "namespace": "prod", "name": old["metadata"]["name"],
            "userInfo": user_info, "object": new, "oldObject": old}


def set_label(key, value):
    return lambda pod: pod["metadata"].setdefault("labels", {}).__setitem__(key, value)


def set_annotation(key, value):
    return lambda pod: pod["metadata"].setdefault("annotations", {}).__setitem__(key, value)


def drop_label(key):
    return lambda pod: pod["metadata"]["labels"].pop(key)


def both(*changes):
    def apply(pod):
        for change in changes:
            change(pod)
    return apply


BARE = copy.deepcopy(POD)
del BARE["metadata"]["labels"], BARE["metadata"]["annotations"]

CASES = [
    # (what, request, allowed, part of the denial message)
    ("the sidecar sets its own pod's baton.dev/role", request(set_label("baton.dev/role", "leader")), True, None),
    ("the sidecar adds baton.dev/* annotations to its own pod",
     request(both(set_annotation("baton.dev/leader-since", "2026-11-23T12:00:00Z"),
                  set_annotation("baton.dev/fencing-token", "7"))), True, None),
    ("the sidecar labels its own pod that had no labels or annotations",
     request(set_label("baton.dev/role", "leader"), old=BARE), True, None),
    ("the sidecar removes its own baton.dev/role", request(drop_label("baton.dev/role")), True, None),
    ("the sidecar labels another pod of its namespace",
     request(set_label("baton.dev/role", "leader"), pod_name="db-0", pod_uid="u-db-0"), False, "own token"),
    ("a token naming another pod, without a uid",
     request(set_label("baton.dev/role", "leader"), pod_name="db-0", pod_uid=None), False, "own token"),
    ("a token of an earlier pod of the same name (uid differs)",
     request(set_label("baton.dev/role", "leader"), pod_uid="u-old"), False, "own token"),
    ("a token bound to no pod", request(set_label("baton.dev/role", "leader"), pod_name=None, pod_uid=None),
     False, "own token"),
    ("the sidecar changes an app label of its own pod", request(set_label("app", "evil")), False, "labels"),
    ("the sidecar adds a non-baton label", request(set_label("team", "x")), False, "labels"),
    ("the sidecar removes an app label", request(drop_label("app")), False, "labels"),
    ("the sidecar changes a non-baton annotation", request(set_annotation("baton.dev-evil/x", "1")),
     False, "annotations"),
    ("the sidecar changes its own pod's image",
     request(lambda p: p["spec"]["containers"][0].__setitem__("image", "evil:1")), False, "spec"),
    ("the sidecar orphans its own pod", request(lambda p: p["metadata"].pop("ownerReferences")), False, "spec"),
    ("the sidecar adds a finalizer", request(lambda p: p["metadata"].__setitem__("finalizers", ["x/y"])),
     False, "spec"),
    # Not matched: the policy does not apply.
    ("kube-system's ReplicaSet controller releases the pod",
     request(lambda p: p["metadata"].pop("ownerReferences"),
             user="system:serviceaccount:kube-system:replicaset-controller", pod_name=None, pod_uid=None),
     True, None),
    ("a person relabels the pod", request(set_label("app", "other"), user="alice", pod_name=None, pod_uid=None),
     True, None),
    ("a service account of another namespace", request(set_label("app", "other"),
                                                        user="system:serviceaccount:ops:manager",
                                                        pod_name="manager-0", pod_uid="u-m"), True, None),
]

EXEMPT_CASE = ("an exempt service account manages other pods",
               request(set_label("app", "other"), user="system:serviceaccount:prod:mgr",
                       pod_name="mgr-0", pod_uid="u-mgr"))


def main():
    policy = Policy(load_policy(sys.argv[1]))
    exempt = any(name == "not-exempt" for name, _ in policy.conditions)
    failures = 0
    cases = list(CASES)
    cases.append((*EXEMPT_CASE, exempt, None if exempt else "own token"))
    for what, req, allowed, expected in cases:
        denial = policy.admit(req)
        ok = (denial is None) == allowed and (expected is None or expected in (denial or ""))
        if not ok:
            failures += 1
        verdict = "allowed" if denial is None else f"denied: {denial}"
        print(f"{'ok  ' if ok else 'FAIL'} {what}: {verdict}")
    if failures:
        sys.exit(f"{failures} of {len(cases)} pod-label policy cases went the wrong way")
    print(f"pod-label policy: {len(cases)} cases as expected")


if __name__ == "__main__":
    main()
