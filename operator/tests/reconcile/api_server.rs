//! A mocked API server (tower-test's `mock::pair`) holding a tiny world — the ensemble, its
//! certificate Secrets, ConfigMap, StatefulSet and pods — that answers the operator's requests
//! and records each one (method, path, body) in order. Each reconcile runs a new operator
//! (client, context) that knows only what the world holds, and may be stopped after a write.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use baton_operator::build::OperatorPods;
use baton_operator::crd::CoordinationEnsemble;
use baton_operator::metrics::Metrics;
use baton_operator::reconcile::{Context, Settings, reconcile};
use baton_operator::sidecar_audit::MissingSidecars;
use http::{Method, Request, Response, StatusCode};
use k8s_openapi::jiff::Timestamp;
use kube::client::Body;
use serde_json::{Value, json};

use super::fake_ensemble::{Entry, FakeEnsemble};

/// What `try_reconcile` answers when the operator was stopped.
pub const STOPPED: &str = "the operator was stopped";

/// One request the operator made.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: Method,
    pub path: String,
    pub query: String,
    pub body: Value,
}

impl Seen {
    /// `METHOD path`, what scenarios compare.
    pub fn line(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

/// What the fake API server holds.
pub struct World {
    pub ce: Value,
    pub config_map: Option<Value>,
    pub statefulset: Option<Value>,
    /// Secrets by name, as last applied.
    pub secrets: BTreeMap<String, Value>,
    /// `status.updateRevision` the fake StatefulSet controller reports.
    pub update_revision: String,
    /// Member pods: (member id, revision).
    pub pods: Vec<(u64, String)>,
    /// Members whose pods are not Ready.
    pub unready_pods: Vec<u64>,
    /// Member data volume claims: (created, terminating) by member id. A claim deleted while
    /// its pod runs is terminating until the pod goes.
    pub volumes: BTreeMap<u64, (String, bool)>,
    pub ensemble: FakeEnsemble,
    /// Events published, as `Type Reason: note`.
    pub events: Vec<String>,
    /// Answer the StatefulSet's apply with 422, as for a change to an immutable field.
    pub refuse_statefulset: bool,
    /// ClusterRoleBindings by name, as last applied.
    pub bindings: BTreeMap<String, Value>,
    /// ConfigMaps in namespaces other than prod, by `namespace/name`.
    pub foreign_config_maps: BTreeMap<String, Value>,
    /// Namespaces that exist besides prod (a ConfigMap elsewhere is answered 404).
    pub namespaces: Vec<String>,
    /// The backup CronJob as last applied.
    pub cron_job: Option<Value>,
    /// The status the fake CronJob controller reports for it.
    pub cron_job_status: Value,
    /// The operator's metrics, kept across reconciles (as one running operator's are).
    pub metrics: Arc<Metrics>,
    /// Pods missing their sidecar, as the audit would have found them.
    pub missing_sidecars: Arc<MissingSidecars>,
}

/// When the volumes of the pods `run_pods` makes were created.
pub const VOLUMES_CREATED: &str = "2026-01-01T00:00:00Z";

/// The clock every scenario runs at.
pub fn now() -> Timestamp {
    "2026-11-23T12:00:00Z"
        .parse()
        .unwrap_or(Timestamp::UNIX_EPOCH)
}

pub const NS: &str = "/api/v1/namespaces/prod";
pub const APPS: &str = "/apis/apps/v1/namespaces/prod";
pub const POLICY: &str = "/apis/policy/v1/namespaces/prod";
/// The backup CronJob.
pub const CRON_JOB: &str = "/apis/batch/v1/namespaces/prod/cronjobs/zk-backup";
pub const NETWORKING: &str = "/apis/networking.k8s.io/v1/namespaces/prod";
pub const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/prod/events";
pub const CE: &str = "/apis/baton.dev/v1alpha1/namespaces/prod/coordinationensembles/zk";
pub const CRB: &str =
    "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/baton.dev:ensemble:prod:zk";
/// Every ConfigMap of the cluster (the published CAs are found by label).
pub const ALL_CONFIG_MAPS: &str = "/api/v1/configmaps";

impl World {
    /// A world with the ensemble `spec` (YAML flow mapping) and nothing else yet.
    pub fn new(spec: &str, ensemble: FakeEnsemble) -> World {
        let yaml = format!(
            "apiVersion: baton.dev/v1alpha1
kind: CoordinationEnsemble
metadata: {{name: zk, namespace: prod, uid: 7d1b, generation: 2}}
spec: {spec}
"
        );
        let ce: CoordinationEnsemble = serde_saphyr::from_str(&yaml).expect("test YAML parses");
        World {
            ce: serde_json::to_value(ce).expect("serializes"),
            config_map: None,
            statefulset: None,
            secrets: BTreeMap::new(),
            update_revision: "r1".into(),
            pods: Vec::new(),
            unready_pods: Vec::new(),
            volumes: BTreeMap::new(),
            ensemble,
            events: Vec::new(),
            refuse_statefulset: false,
            bindings: BTreeMap::new(),
            foreign_config_maps: BTreeMap::new(),
            namespaces: vec!["web".into(), "batch".into(), "team-c".into()],
            cron_job: None,
            cron_job_status: json!({}),
            metrics: Arc::new(Metrics::new()),
            missing_sidecars: Arc::default(),
        }
    }

    /// Changes the ensemble's spec (as `kubectl edit` would), bumping its generation.
    pub fn set_spec(&mut self, field: &str, value: Value) {
        self.ce["spec"][field] = value;
        let generation = self.ce["metadata"]["generation"].as_i64().unwrap_or(1);
        self.ce["metadata"]["generation"] = json!(generation + 1);
    }

    /// Pods for members 1..=n at `revision`, as the StatefulSet controller would make them.
    pub fn run_pods(&mut self, n: u64, revision: &str) {
        self.pods = (1..=n).map(|id| (id, revision.to_string())).collect();
        self.volumes = (1..=n)
            .map(|id| (id, (VOLUMES_CREATED.into(), false)))
            .collect();
    }

    /// The StatefulSet's applied replicas.
    pub fn replicas(&self) -> i64 {
        self.statefulset
            .as_ref()
            .and_then(|s| s["spec"]["replicas"].as_i64())
            .unwrap_or(-1)
    }

    /// Runs one reconcile against this world and returns the requests it made, in order.
    pub async fn reconcile(&mut self) -> Vec<Seen> {
        let (seen, result) = self.try_reconcile().await;
        if let Err(e) = result {
            panic!("reconcile failed: {e}; requests: {:?}", lines(&seen));
        }
        seen
    }

    /// `reconcile`, also when it fails.
    pub async fn try_reconcile(&mut self) -> (Vec<Seen>, Result<(), String>) {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = kube::Client::new(service, "default");
        let settings = Settings {
            default_image: "baton:1".into(),
            settle_timeout: Duration::from_secs(5),
            operator_pods: operator_pods(),
            ..Settings::default()
        };
        let ctx = Arc::new(
            Context::new(
                client,
                self.ensemble.clone(),
                settings,
                self.metrics.clone(),
            )
            .with_clock(now)
            .with_missing_sidecars(self.missing_sidecars.clone()),
        );
        let ce: CoordinationEnsemble =
            serde_json::from_value(self.ce.clone()).expect("the world's ensemble deserializes");
        let task = tokio::spawn(reconcile(Arc::new(ce), ctx));
        let mut seen = Vec::new();
        let fake = self.ensemble.clone();
        loop {
            // A bound, not a synchronisation: an unexpected hang fails instead of stalling.
            let next = tokio::select! {
                next = tokio::time::timeout(Duration::from_secs(30), handle.next_request()) => next,
                () = fake.stopped() => {
                    task.abort();
                    return (seen, Err(STOPPED.into()));
                }
            };
            let Ok(Some((request, reply))) = next else {
                break;
            };
            let (parts, body) = request.into_parts();
            let bytes = body.collect_bytes().await.expect("request body");
            let body: Value = if bytes.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(&bytes).expect("request body is JSON")
            };
            let s = Seen {
                method: parts.method.clone(),
                path: parts.uri.path().to_string(),
                query: parts.uri.query().unwrap_or_default().to_string(),
                body,
            };
            let (status, answer) = self.answer(&s);
            if is_step_write(&s) && self.ensemble.spend_write() {
                // Taken effect, but the operator never hears back.
                task.abort();
                seen.push(s);
                return (seen, Err(STOPPED.into()));
            }
            let response = Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&answer).expect("answer")))
                .expect("response");
            reply.send_response(response);
            seen.push(s);
        }
        let result = task
            .await
            .expect("reconcile task")
            .map(|_| ())
            .map_err(|e| e.to_string());
        (seen, result)
    }

    fn answer(&mut self, s: &Seen) -> (StatusCode, Value) {
        let not_found = || {
            (
                StatusCode::NOT_FOUND,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                       "reason": "NotFound", "code": 404, "message": "not found"}),
            )
        };
        let ok = |v: Value| (StatusCode::OK, v);
        let path = s.path.as_str();
        match (&s.method, path) {
            (&Method::GET, p) if p.starts_with(&format!("{NS}/secrets/")) => {
                let name = p.rsplit('/').next().unwrap_or_default();
                self.secrets.get(name).cloned().map_or_else(not_found, ok)
            }
            (&Method::GET, p) if p == format!("{NS}/configmaps/zk-config") => {
                self.config_map.clone().map_or_else(not_found, ok)
            }
            (&Method::GET, p) if p == format!("{APPS}/statefulsets/zk") => {
                match &self.statefulset {
                    None => not_found(),
                    Some(sts) => {
                        let mut sts = sts.clone();
                        sts["metadata"]["generation"] = json!(1);
                        sts["status"] = json!({"observedGeneration": 1, "replicas": sts["spec"]["replicas"],
                                               "updateRevision": self.update_revision});
                        ok(sts)
                    }
                }
            }
            (&Method::GET, CRON_JOB) => match &self.cron_job {
                None => not_found(),
                Some(cron_job) => {
                    let mut cron_job = cron_job.clone();
                    cron_job["status"] = self.cron_job_status.clone();
                    ok(cron_job)
                }
            },
            (&Method::PATCH, CRON_JOB) => {
                self.cron_job = Some(s.body.clone());
                ok(s.body.clone())
            }
            (&Method::DELETE, CRON_JOB) => match self.cron_job.take() {
                Some(_) => ok(
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200}),
                ),
                None => not_found(),
            },
            (&Method::GET, p) if p == format!("{NS}/pods") => {
                // As a kubelet's readiness probe would find it: Ready while the fake member
                // answers (a voter or learner, not down, not removed), unless the scenario
                // holds the pod back in `unready_pods`.
                let m = self.ensemble.model();
                let items: Vec<Value> = self
                    .pods
                    .iter()
                    .map(|(id, rev)| {
                        let healthy = (m.voters.contains(id) || m.learners.contains(id))
                            && !m.down.contains(id)
                            && !m.removed.contains(id)
                            && !self.unready_pods.contains(id);
                        let ready = if healthy { "True" } else { "False" };
                        json!({"metadata": {"name": format!("zk-{}", id - 1),
                                            "labels": {"controller-revision-hash": rev}},
                               "status": {"conditions": [{"type": "Ready", "status": ready}]}})
                    })
                    .collect();
                drop(m);
                ok(json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items}))
            }
            (&Method::PATCH, p) if p == format!("{CE}/status") => {
                self.ce["status"] = s.body["status"].clone();
                let operation = &s.body["status"]["membershipOperation"];
                let record = operation.is_object().then(|| {
                    format!(
                        "{} {} {}",
                        operation["kind"].as_str().unwrap_or("?"),
                        operation["memberId"],
                        operation["step"].as_str().unwrap_or("?")
                    )
                });
                self.ensemble.model().journal.push(Entry::Recorded(record));
                ok(self.ce.clone())
            }
            // The finalizer: a JSON patch of the ensemble, tests included.
            (&Method::PATCH, CE) => {
                // As the API server's JSON patch does: testing a missing path for null passes.
                let ops: Vec<Value> = s
                    .body
                    .as_array()
                    .expect("a JSON patch")
                    .iter()
                    .filter(|op| {
                        !(op["op"] == "test"
                            && op["value"].is_null()
                            && op["path"]
                                .as_str()
                                .is_some_and(|p| self.ce.pointer(p).is_none()))
                    })
                    .cloned()
                    .collect();
                let patch: json_patch::Patch =
                    serde_json::from_value(Value::Array(ops)).expect("a JSON patch");
                match json_patch::patch(&mut self.ce, &patch) {
                    Ok(()) => ok(self.ce.clone()),
                    Err(e) => (
                        StatusCode::UNPROCESSABLE_ENTITY,
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                               "code": 422, "message": e.to_string()}),
                    ),
                }
            }
            (&Method::POST, p) if p == format!("{NS}/secrets") => {
                let name = s.body["metadata"]["name"].as_str().unwrap_or_default();
                if self.secrets.contains_key(name) {
                    return (
                        StatusCode::CONFLICT,
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                               "reason": "AlreadyExists", "code": 409, "message": "exists"}),
                    );
                }
                self.secrets.insert(name.to_string(), s.body.clone());
                (StatusCode::CREATED, s.body.clone())
            }
            (&Method::PATCH, CRB) => {
                self.bindings.insert(
                    CRB.rsplit('/').next().unwrap_or_default().into(),
                    s.body.clone(),
                );
                ok(s.body.clone())
            }
            (&Method::DELETE, CRB) => {
                match self
                    .bindings
                    .remove(CRB.rsplit('/').next().unwrap_or_default())
                {
                    Some(_) => ok(
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200}),
                    ),
                    None => not_found(),
                }
            }
            (&Method::GET, ALL_CONFIG_MAPS) => {
                let items: Vec<Value> = self
                    .foreign_config_maps
                    .values()
                    .filter(|cm| {
                        s.query.contains("baton.dev%2Fensemble-namespace%3Dprod")
                            && cm["metadata"]["labels"]["baton.dev/ensemble-name"] == "zk"
                    })
                    .map(|cm| {
                        json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                                     "metadata": cm["metadata"]})
                    })
                    .collect();
                ok(
                    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
                          "metadata": {}, "items": items}),
                )
            }
            (method, p)
                if p.starts_with("/api/v1/namespaces/")
                    && !p.starts_with(&format!("{NS}/"))
                    && p.contains("/configmaps/") =>
            {
                let rest = p.trim_start_matches("/api/v1/namespaces/");
                let (ns, name) = rest.split_once("/configmaps/").unwrap_or_default();
                if !self.namespaces.iter().any(|n| n == ns) {
                    return not_found();
                }
                let key = format!("{ns}/{name}");
                match *method {
                    // Read as metadata, before publishing: someone else's is left alone.
                    Method::GET => self.foreign_config_maps.get(&key).map_or_else(not_found, |cm| {
                        ok(json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                                  "metadata": cm["metadata"]}))
                    }),
                    Method::PATCH => {
                        self.foreign_config_maps.insert(key, s.body.clone());
                        ok(s.body.clone())
                    }
                    Method::DELETE => match self.foreign_config_maps.remove(&key) {
                        Some(_) => ok(
                            json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200}),
                        ),
                        None => not_found(),
                    },
                    _ => not_found(),
                }
            }
            (&Method::PATCH, p)
                if self.refuse_statefulset && p == format!("{APPS}/statefulsets/zk") =>
            {
                (
                    StatusCode::UNPROCESSABLE_ENTITY,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                           "reason": "Invalid", "code": 422,
                           "message": "spec: Forbidden: updates to statefulset spec for fields other than ... are forbidden"}),
                )
            }
            (&Method::PATCH, p) => {
                if p == format!("{NS}/configmaps/zk-config") {
                    self.config_map = Some(s.body.clone());
                } else if p == format!("{APPS}/statefulsets/zk") {
                    self.check_replicas(s.body["spec"]["replicas"].as_i64().unwrap_or(0));
                    self.statefulset = Some(s.body.clone());
                } else if let Some(name) = p.strip_prefix(&format!("{NS}/secrets/")) {
                    self.secrets.insert(name.to_string(), s.body.clone());
                }
                ok(s.body.clone())
            }
            (&Method::POST, p) if p == EVENTS => {
                let b = &s.body;
                self.events.push(format!(
                    "{} {}: {}",
                    b["type"].as_str().unwrap_or("?"),
                    b["reason"].as_str().unwrap_or("?"),
                    b["note"].as_str().unwrap_or("")
                ));
                (StatusCode::CREATED, s.body.clone())
            }
            (&Method::DELETE, p) if p.starts_with(&format!("{NS}/pods/")) => {
                let name = p.rsplit('/').next().unwrap_or_default().to_string();
                let id = member_of(&name, "zk-");
                // The pod of a claim being deleted lets it go: part of a reseed's step.
                let releases = id
                    .and_then(|id| self.volumes.get(&id))
                    .is_some_and(|(_, terminating)| *terminating);
                if releases {
                    if let Some(id) = id {
                        self.volumes.remove(&id);
                    }
                } else {
                    self.check_pod_deletion(&name);
                }
                self.pods.retain(|(id, _)| format!("zk-{}", id - 1) != name);
                ok(json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200}))
            }
            (method, p) if p.starts_with(&format!("{NS}/persistentvolumeclaims/")) => {
                let name = p.rsplit('/').next().unwrap_or_default().to_string();
                // Named after the StatefulSet's volume claim template, as the controller does.
                let template = self.statefulset.as_ref().and_then(|sts| {
                    sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"].as_str()
                });
                let prefix = format!("{}-zk-", template.unwrap_or("?"));
                let Some(id) = member_of(&name, &prefix) else {
                    return not_found();
                };
                let Some((created, terminating)) = self.volumes.get(&id).cloned() else {
                    return not_found();
                };
                let claim = |terminating: bool| {
                    let mut meta = json!({"name": name, "namespace": "prod",
                                          "creationTimestamp": created});
                    if terminating {
                        meta["deletionTimestamp"] = json!(now().to_string());
                    }
                    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta})
                };
                match *method {
                    Method::GET => ok(claim(terminating)),
                    Method::DELETE => {
                        if !terminating {
                            let mut m = self.ensemble.model();
                            m.journal
                                .push(Entry::Took(format!("reseed {id} delete-volume")));
                            if m.voters.contains(&id) || m.learners.contains(&id) {
                                let violation =
                                    format!("deleted the volume of member {id}, still a member");
                                m.violations.push(violation);
                            }
                        }
                        if self.pods.iter().any(|(p, _)| *p == id) {
                            self.volumes.insert(id, (created.clone(), true));
                        } else {
                            self.volumes.remove(&id);
                        }
                        ok(claim(true))
                    }
                    _ => not_found(),
                }
            }
            _ => not_found(),
        }
    }
}

impl World {
    /// Journals a change of the StatefulSet's replicas; a pod must not go while its member votes.
    fn check_replicas(&mut self, replicas: i64) {
        let before = self.replicas();
        let mut m = self.ensemble.model();
        if self.statefulset.is_some() && replicas > before {
            m.journal
                .push(Entry::Took(format!("add {replicas} raise-replicas")));
        } else if self.statefulset.is_some() && replicas < before {
            m.journal
                .push(Entry::Took(format!("remove {before} lower-replicas")));
        }
        if let Some(voter) = m.voters.iter().find(|v| **v as i64 > replicas) {
            let violation = format!("replicas lowered to {replicas} while member {voter} votes");
            m.violations.push(violation);
        }
    }

    /// Journals a restart; it must leave a quorum: no other member's pod missing, and not the
    /// leader's while another member could lead.
    fn check_pod_deletion(&mut self, name: &str) {
        let Some(id) = member_of(name, "zk-") else {
            return;
        };
        let mut m = self.ensemble.model();
        m.journal
            .push(Entry::Took(format!("restart {id} delete-pod")));
        let missing: Vec<u64> = m
            .voters
            .iter()
            .copied()
            .filter(|v| *v != id && !self.pods.iter().any(|(p, _)| p == v))
            .collect();
        if !missing.is_empty() || id == m.leader && m.voters.len() > 1 {
            let violation = format!(
                "deleted pod {name} (leader {}, pods missing {missing:?})",
                m.leader
            );
            m.violations.push(violation);
        }
    }
}

/// The member id of the object `name` of member pod or claim names starting with `prefix`.
fn member_of(name: &str, prefix: &str) -> Option<u64> {
    name.strip_prefix(prefix)?
        .parse::<u64>()
        .ok()
        .map(|ordinal| ordinal + 1)
}

/// A write the resume scenarios stop the operator after: one that records or takes a step, or
/// ends a reseed (the annotation's removal).
fn is_step_write(s: &Seen) -> bool {
    match s.method {
        Method::PATCH => {
            s.path == format!("{CE}/status")
                || s.path == format!("{APPS}/statefulsets/zk")
                || s.path == CE
        }
        Method::DELETE => {
            s.path.starts_with(&format!("{NS}/pods/"))
                || s.path.starts_with(&format!("{NS}/persistentvolumeclaims/"))
        }
        _ => false,
    }
}

/// The request lines of `seen`.
pub fn lines(seen: &[Seen]) -> Vec<String> {
    seen.iter().map(Seen::line).collect()
}

/// The body of the last request to `path` with `method` (the status: the one a reconcile ends
/// with, after the operation records).
pub fn body<'a>(seen: &'a [Seen], method: Method, path: &str) -> &'a Value {
    seen.iter()
        .rev()
        .find(|s| s.method == method && s.path == path)
        .map(|s| &s.body)
        .unwrap_or_else(|| panic!("no {method} {path} in {:?}", lines(seen)))
}

/// The operator's pods as the scenarios configure them (the NetworkPolicy's admin rule).
pub fn operator_pods() -> OperatorPods {
    OperatorPods {
        namespace: "baton-system".into(),
        labels: BTreeMap::from([("app.kubernetes.io/name".into(), "baton-operator".into())]),
        metrics_scraper: None,
    }
}

/// The reads every reconcile starts with.
pub fn read_lines(with_pods: bool) -> Vec<String> {
    let mut v = vec![
        format!("GET {NS}/secrets/zk-ca-key"),
        format!("GET {NS}/secrets/zk-tls"),
        format!("GET {NS}/secrets/zk-admin"),
        format!("GET {NS}/secrets/zk-super"),
        format!("GET {NS}/configmaps/zk-config"),
        format!("GET {APPS}/statefulsets/zk"),
        format!("GET {CRON_JOB}"),
    ];
    if with_pods {
        v.push(format!("GET {NS}/pods"));
    }
    v
}

/// The requests every reconcile of an existing ensemble makes before its step and status;
/// `secrets` are the certificate Secrets it writes (only those whose content changes).
pub fn apply_lines(with_pods: bool, secrets: &[&str]) -> Vec<String> {
    let mut v = read_lines(with_pods);
    v.extend(secrets.iter().map(|s| format!("PATCH {NS}/secrets/{s}")));
    v.extend(identity_lines());
    v.extend([
        format!("PATCH {NS}/configmaps/zk-ca"),
        format!("GET {ALL_CONFIG_MAPS}"),
        format!("PATCH {NS}/configmaps/zk-config"),
        format!("PATCH {NS}/services/zk-peers"),
        format!("PATCH {NS}/services/zk-client"),
        format!("PATCH {POLICY}/poddisruptionbudgets/zk"),
        format!("PATCH {NETWORKING}/networkpolicies/zk-members"),
        format!("PATCH {APPS}/statefulsets/zk"),
    ]);
    v
}

/// The members' identity, applied every round: ServiceAccount, then the token-review binding.
pub fn identity_lines() -> Vec<String> {
    vec![
        format!("PATCH {NS}/serviceaccounts/zk"),
        format!("PATCH {CRB}"),
    ]
}
