//! The built objects, from inline YAML.

use super::*;
use crate::validate::validate;

fn ensemble(spec: &str) -> CoordinationEnsemble {
    let yaml = format!(
        "apiVersion: baton.dev/v1alpha1
kind: CoordinationEnsemble
metadata: {{name: zk, namespace: prod, uid: 7d1b, generation: 2}}
spec: {spec}
"
    );
    serde_saphyr::from_str(&yaml).expect("test YAML parses")
}

/// A PKI for members 1..=7 of prod/zk (made once: key generation is the slow part).
fn test_pki() -> &'static Pki {
    static PKI: std::sync::OnceLock<Pki> = std::sync::OnceLock::new();
    PKI.get_or_init(|| {
        let empty = crate::pki::StoredPki::default();
        let now = "2026-11-23T12:00:00Z".parse().expect("timestamp");
        let plan = crate::pki::plan(&empty, &[1, 2, 3, 4, 5, 6, 7], now);
        crate::pki::issue(&empty, &plan, &EnsembleNames::new("zk", "prod"), now).expect("pki")
    })
}

fn operator() -> OperatorPods {
    OperatorPods {
        namespace: "baton-system".into(),
        labels: BTreeMap::from([("app.kubernetes.io/name".into(), "baton-operator".into())]),
        metrics_scraper: None,
    }
}

fn built(spec: &str, replicas: i32, bootstrap: i32) -> Built {
    let ce = ensemble(spec);
    let valid = validate(&ce, "baton:test").expect("valid spec");
    build(
        &ce,
        &valid,
        StoredMembership {
            replicas,
            bootstrap,
        },
        test_pki(),
        &operator(),
        None,
    )
    .expect("built")
}

use serde_json::json;
use std::collections::BTreeMap;

fn json(value: &impl serde::Serialize) -> serde_json::Value {
    serde_json::to_value(value).expect("serializes")
}

#[test]
fn statefulset_runs_members_by_ordinal_with_join_beyond_bootstrap() {
    let sts = json(&built("{replicas: 5}", 4, 3).statefulset);
    assert_eq!(sts["apiVersion"], "apps/v1");
    assert_eq!(sts["kind"], "StatefulSet");
    assert_eq!(sts["metadata"]["name"], "zk");
    assert_eq!(
        sts["metadata"]["ownerReferences"][0]["kind"],
        "CoordinationEnsemble"
    );
    assert_eq!(sts["metadata"]["ownerReferences"][0]["uid"], "7d1b");
    assert_eq!(sts["metadata"]["ownerReferences"][0]["controller"], true);
    let spec = &sts["spec"];
    assert_eq!(spec["replicas"], 4);
    assert_eq!(spec["serviceName"], "zk-peers");
    assert_eq!(spec["podManagementPolicy"], "Parallel");
    assert_eq!(spec["updateStrategy"]["type"], "OnDelete");
    assert_eq!(
        spec["persistentVolumeClaimRetentionPolicy"]["whenScaled"],
        "Delete"
    );
    let pod = &spec["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(c["image"], "baton:test");
    assert_eq!(c["command"][0], "/bin/sh");
    assert_eq!(c["command"][2], START_SCRIPT);
    assert!(START_SCRIPT.contains("BATON_ID=$((ordinal + 1))"));
    assert!(START_SCRIPT.contains("--join"));
    let args: Vec<&str> = c["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert!(args.contains(&"--data-dir=/var/lib/baton/data"));
    assert!(args.contains(&"--admin-addr=[::]:8080"));
    assert!(args.contains(&"--secure-client-addr=[::]:2281"));
    assert!(
        args.contains(&"--client-addr=off"),
        "plain clients are off by default"
    );
    assert!(!args.iter().any(|a| a.contains("insecure")));
    assert!(args.contains(&"--max-session-timeout=40s"));
    assert_eq!(c["envFrom"][0]["configMapRef"]["name"], "zk-config");
    assert_eq!(
        c["env"][0]["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.name"
    );
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["readinessProbe"]["httpGet"]["port"], "admin");
    assert_eq!(c["readinessProbe"]["httpGet"]["scheme"], "HTTPS");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["livenessProbe"]["httpGet"]["scheme"], "HTTPS");
    // The members' Secret, read-only, with the CA named in the environment; the certificate
    // and key are picked by the start script from the member id.
    let env = |name: &str| {
        c["env"]
            .as_array()
            .and_then(|e| e.iter().find(|v| v["name"] == name))
            .map(|v| v["value"].clone())
    };
    assert_eq!(env("BATON_TLS_CA"), Some(json!("/etc/baton/tls/ca.crt")));
    // Identities: tokens checked with TokenReview, namespaces enforced, a super digest from
    // the Secret (never a literal in the StatefulSet).
    assert_eq!(env("BATON_K8S_AUTH"), Some(json!("true")));
    assert_eq!(env("BATON_CHECK_IDENTITIES"), Some(json!("true")));
    let digest = c["env"]
        .as_array()
        .and_then(|e| e.iter().find(|v| v["name"] == "BATON_SUPER_DIGEST"))
        .expect("BATON_SUPER_DIGEST");
    assert_eq!(
        digest["valueFrom"]["secretKeyRef"],
        json!({"name": "zk-super", "key": "digest", "optional": false})
    );
    assert!(digest.get("value").is_none());
    assert_eq!(pod["serviceAccountName"], "zk");
    assert_eq!(pod["automountServiceAccountToken"], true);
    assert_eq!(env("BATON_TLS_DIR"), Some(json!("/etc/baton/tls")));
    let mount = c["volumeMounts"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["name"] == "tls"))
        .expect("tls mount");
    assert_eq!(mount["mountPath"], "/etc/baton/tls");
    assert_eq!(mount["readOnly"], true);
    assert!(
        mount.get("subPath").is_none(),
        "subPath mounts are never refreshed"
    );
    let volume = pod["volumes"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["name"] == "tls"))
        .expect("tls volume");
    assert_eq!(volume["secret"]["secretName"], "zk-tls");
    let ports: Vec<&str> = c["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(ports, ["client-tls", "peer", "admin"]);
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(c["securityContext"]["capabilities"]["drop"][0], "ALL");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["fsGroup"], 65532);
    let anti =
        &pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0];
    assert_eq!(
        anti["podAffinityTerm"]["topologyKey"],
        "kubernetes.io/hostname"
    );
    assert_eq!(
        pod["topologySpreadConstraints"][0]["topologyKey"],
        "topology.kubernetes.io/zone"
    );
    let claim = &spec["volumeClaimTemplates"][0];
    assert_eq!(claim["metadata"]["name"], "data");
    assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "1Gi");
}

#[test]
fn limits_are_the_members_first_settings_and_watermark() {
    let b = built(
        "{limits: {namespaceZnodes: 500, namespaceBytes: 2097152, sharedZnodes: 5000, \
          sharedBytes: 33554432, ephemeralsPerSession: 50, minFreeDiskBytes: 0}}",
        3,
        3,
    );
    let data = &json(&b.config_map)["data"];
    assert_eq!(data["BATON_QUOTA_NAMESPACE_ZNODES"], "500");
    assert_eq!(data["BATON_QUOTA_NAMESPACE_BYTES"], "2097152");
    assert_eq!(data["BATON_QUOTA_SHARED_ZNODES"], "5000");
    assert_eq!(data["BATON_QUOTA_SHARED_BYTES"], "33554432");
    assert_eq!(data["BATON_MAX_EPHEMERALS_PER_SESSION"], "50");
    let sts = json(&b.statefulset);
    let c = &sts["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = c["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    // Per member, so on the command line; the quotas are not (a change would roll members).
    assert!(args.contains(&"--min-free-disk-bytes=0"), "{args:?}");
    assert!(!args.iter().any(|a| a.starts_with("--quota")), "{args:?}");
    let env = c["env"].as_array().expect("env");
    assert!(env.contains(&serde_json::json!({"name": "BATON_CHECK_IDENTITIES", "value": "true"})));
    // The defaults when the spec says nothing.
    let b = built("{}", 3, 3);
    assert_eq!(
        json(&b.config_map)["data"]["BATON_QUOTA_NAMESPACE_BYTES"],
        "67108864"
    );
    let sts = json(&b.statefulset);
    assert!(
        sts["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .is_some_and(|a| a.contains(&serde_json::json!("--min-free-disk-bytes=67108864")))
    );
}

#[test]
fn config_map_records_cluster_members_and_bootstrap_count() {
    let cm = json(&built("{}", 3, 3).config_map);
    let data = &cm["data"];
    assert_eq!(data["BATON_CLUSTER_ID"], "prod.zk");
    assert_eq!(
        data["BATON_MEMBERS"],
        "1=zk-0.zk-peers.prod.svc:2888,2=zk-1.zk-peers.prod.svc:2888,3=zk-2.zk-peers.prod.svc:2888"
    );
    assert_eq!(data["BATON_REPLICAS"], "3");
    assert_eq!(data["BATON_BOOTSTRAP_REPLICAS"], "3");
    let stored = StoredMembership::from_config_map(&built("{}", 5, 3).config_map);
    assert_eq!(
        stored,
        Some(StoredMembership {
            replicas: 5,
            bootstrap: 3
        })
    );
}

#[test]
fn services_and_disruption_budget() {
    let b = built("{}", 3, 3);
    let peers = json(&b.peer_service);
    assert_eq!(peers["spec"]["clusterIP"], "None");
    assert_eq!(peers["spec"]["publishNotReadyAddresses"], true);
    assert_eq!(
        peers["spec"]["selector"]["app.kubernetes.io/instance"],
        "zk"
    );
    let client = json(&b.client_service);
    assert_eq!(client["metadata"]["name"], "zk-client");
    assert_eq!(
        client["spec"]["ports"],
        json!([{"name": "client-tls", "port": 2281, "protocol": "TCP", "targetPort": "client-tls"}])
    );
    let peer_ports: Vec<i64> = peers["spec"]["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .filter_map(|p| p["port"].as_i64())
        .collect();
    assert_eq!(peer_ports, [2888, 8080, 2281]);
    let pdb = json(&b.pdb.expect("a PDB by default"));
    assert_eq!(pdb["apiVersion"], "policy/v1");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert!(
        built("{podDisruptionBudget: {enabled: false}}", 3, 3)
            .pdb
            .is_none()
    );
}

#[test]
fn scheduling_and_storage_follow_the_spec() {
    let b = built(
        "{scheduling: {antiAffinity: Required, zoneSpread: false, nodeSelector: {disk: ssd}}, \
         storage: {size: 5Gi, storageClassName: fast}, imagePullPolicy: Always, \
         resources: {requests: {cpu: 100m}}}",
        3,
        3,
    );
    let sts = json(&b.statefulset);
    let pod = &sts["spec"]["template"]["spec"];
    assert_eq!(
        pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"],
        "kubernetes.io/hostname"
    );
    assert!(pod.get("topologySpreadConstraints").is_none());
    assert_eq!(pod["nodeSelector"]["disk"], "ssd");
    assert_eq!(pod["containers"][0]["imagePullPolicy"], "Always");
    assert_eq!(pod["containers"][0]["resources"]["requests"]["cpu"], "100m");
    let claim = &sts["spec"]["volumeClaimTemplates"][0]["spec"];
    assert_eq!(claim["storageClassName"], "fast");
    assert_eq!(claim["resources"]["requests"]["storage"], "5Gi");
    let none = json(&built("{scheduling: {antiAffinity: None}}", 1, 1).statefulset);
    assert!(none["spec"]["template"]["spec"].get("affinity").is_none());
}

/// Runs the start script under a real `/bin/sh` with a stand-in `baton-ensemble` that prints
/// the id and flags it was given.
fn run_start_script(pod: &str, bootstrap: &str) -> String {
    let dir = std::env::temp_dir().join(format!("baton-start-script-{}-{pod}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let stand_in = dir.join("baton-ensemble");
    std::fs::write(
        &stand_in,
        "#!/bin/sh\necho \"id=$BATON_ID $*\"\necho \"$BATON_TLS_CERT $BATON_TLS_KEY\" >&2\n",
    )
    .expect("write stand-in");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&stand_in, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = std::process::Command::new("/bin/sh")
        .args(["-c", START_SCRIPT, "baton-ensemble", "--data-dir=/d"])
        .env("PATH", path)
        .env("POD_NAME", pod)
        .env("BATON_BOOTSTRAP_REPLICAS", bootstrap)
        .env("BATON_TLS_DIR", "/etc/baton/tls")
        .output()
        .expect("run /bin/sh");
    let _ = std::fs::remove_dir_all(&dir);
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn start_script_derives_the_id_and_joins_beyond_the_bootstrap_set() {
    assert_eq!(
        run_start_script("zk-0", "3"),
        "id=1 --data-dir=/d\n/etc/baton/tls/member-1.crt /etc/baton/tls/member-1.key\n"
    );
    assert!(run_start_script("zk-2", "3").starts_with("id=3 --data-dir=/d\n"));
    assert!(run_start_script("zk-3", "3").starts_with("id=4 --data-dir=/d --join\n"));
    assert_eq!(
        run_start_script("my-zk-10", "3"),
        "id=11 --data-dir=/d --join\n/etc/baton/tls/member-11.crt /etc/baton/tls/member-11.key\n"
    );
    assert!(run_start_script("zk", "3").contains("cannot derive a member id"));
}

#[test]
fn the_plain_client_port_is_served_only_when_the_spec_asks() {
    let b = built("{plainClientPort: true}", 3, 3);
    let sts = json(&b.statefulset);
    let c = &sts["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = c["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert!(args.contains(&"--client-addr=[::]:2181"));
    assert!(args.contains(&"--secure-client-addr=[::]:2281"));
    let client = json(&b.client_service);
    let ports: Vec<i64> = client["spec"]["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .filter_map(|p| p["port"].as_i64())
        .collect();
    assert_eq!(ports, [2281, 2181]);
    let policy = json(&b.network_policy);
    assert_eq!(
        policy["spec"]["ingress"][2]["ports"],
        json!([{"port": 2281, "protocol": "TCP"}, {"port": 2181, "protocol": "TCP"}])
    );
}

#[test]
fn the_pki_becomes_three_secrets_and_a_public_ca_config_map() {
    let b = built("{}", 3, 3);
    let pki = test_pki();
    let cm = json(&b.ca_config_map);
    assert_eq!(cm["metadata"]["name"], "zk-ca");
    assert_eq!(cm["metadata"]["ownerReferences"][0]["uid"], "7d1b");
    assert_eq!(cm["data"], json!({"ca.crt": pki.ca.bundle_pem}));
    let names: Vec<_> = b
        .secrets
        .in_order()
        .iter()
        .map(|s| s.metadata.name.clone().unwrap_or_default())
        .collect();
    assert_eq!(names, ["zk-ca-key", "zk-tls", "zk-admin"]);
    for secret in b.secrets.in_order() {
        assert_eq!(secret.metadata.namespace.as_deref(), Some("prod"));
        assert!(secret.metadata.owner_references.is_some());
        assert_eq!(secret.type_.as_deref(), Some("Opaque"));
    }
}

#[test]
fn network_policy_opens_each_port_to_whom_it_serves() {
    let policy = json(&built("{}", 3, 3).network_policy);
    assert_eq!(policy["apiVersion"], "networking.k8s.io/v1");
    assert_eq!(policy["metadata"]["name"], "zk-members");
    let members = json!({"matchLabels": {"app.kubernetes.io/instance": "zk", "app.kubernetes.io/name": "baton-ensemble"}});
    assert_eq!(policy["spec"]["podSelector"], members);
    assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress"]));
    let namespace = |ns: &str| json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": [ns]}]});
    assert_eq!(
        policy["spec"]["ingress"],
        json!([
            {"from": [{"podSelector": members}], "ports": [{"port": 2888, "protocol": "TCP"}]},
            {"from": [{"namespaceSelector": namespace("baton-system"),
                       "podSelector": {"matchLabels": {"app.kubernetes.io/name": "baton-operator"}}}],
             "ports": [{"port": 8080, "protocol": "TCP"}]},
            {"from": [{"namespaceSelector": namespace("prod")}],
             "ports": [{"port": 2281, "protocol": "TCP"}]},
        ])
    );
}

#[test]
fn network_policy_builder_takes_a_list_of_client_namespaces() {
    use super::network::{Reach, network_policy};
    let names = EnsembleNames::new("zk", "prod");
    let anyone_there = OperatorPods {
        namespace: "ops".into(),
        labels: BTreeMap::new(),
        metrics_scraper: None,
    };
    let served = ["team-b".to_string(), "prod".into(), "team-b".into()];
    let policy = json(&network_policy(
        &names,
        Default::default(),
        &Reach {
            operator: &anyone_there,
            client_namespaces: &served,
            plain_client_port: false,
            backup: false,
        },
    ));
    let ingress = &policy["spec"]["ingress"];
    assert_eq!(
        ingress[2]["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"],
        json!(["prod", "team-b"])
    );
    // No operator labels: any pod of the operator's namespace, still only that namespace.
    assert_eq!(ingress[1]["from"][0]["podSelector"], json!({}));
    assert_eq!(
        ingress[1]["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"],
        json!(["ops"])
    );
    let nobody = json(&network_policy(
        &names,
        Default::default(),
        &Reach {
            operator: &anyone_there,
            client_namespaces: &[],
            plain_client_port: false,
            backup: false,
        },
    ));
    assert_eq!(
        nobody["spec"]["ingress"][2]["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"],
        json!(["prod"])
    );
}

/// With a metrics scraper named (the chart's PodMonitors on), the admin port is open to its
/// pods in its one namespace as well, and nothing else changes; without one it is not.
#[test]
fn network_policy_admits_the_named_metrics_scraper_to_the_admin_port_only() {
    use super::network::{Reach, ScraperPods, network_policy};
    let names = EnsembleNames::new("zk", "prod");
    let mut operator = operator();
    let reach = |operator: &OperatorPods| {
        json(&network_policy(
            &names,
            Default::default(),
            &Reach {
                operator,
                client_namespaces: &["prod".to_string()],
                plain_client_port: false,
                backup: false,
            },
        ))
    };
    let without = reach(&operator);
    assert_eq!(
        without["spec"]["ingress"][1]["from"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    operator.metrics_scraper = Some(ScraperPods {
        namespace: "monitoring".into(),
        labels: BTreeMap::from([("app.kubernetes.io/name".into(), "prometheus".into())]),
    });
    let with = reach(&operator);
    let ingress = &with["spec"]["ingress"];
    assert_eq!(
        ingress[1]["ports"],
        json!([{"port": 8080, "protocol": "TCP"}])
    );
    assert_eq!(
        ingress[1]["from"][1],
        json!({"namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                   "operator": "In", "values": ["monitoring"]}]},
               "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}})
    );
    // The peer and client rules do not let it in.
    for rule in [0, 2] {
        assert_eq!(ingress[rule], without["spec"]["ingress"][rule]);
    }
}

#[test]
fn members_get_a_service_account_bound_to_token_review() {
    let b = built("{}", 3, 3);
    let sa = json(&b.service_account);
    assert_eq!(sa["metadata"]["name"], "zk");
    assert_eq!(sa["metadata"]["namespace"], "prod");
    assert_eq!(sa["metadata"]["ownerReferences"][0]["uid"], "7d1b");
    assert_eq!(sa["automountServiceAccountToken"], true);
    let crb = json(&b.token_review_binding);
    assert_eq!(crb["apiVersion"], "rbac.authorization.k8s.io/v1");
    assert_eq!(crb["metadata"]["name"], "baton.dev:ensemble:prod:zk");
    assert!(
        crb["metadata"].get("ownerReferences").is_none(),
        "cluster-scoped: no owner across scopes"
    );
    assert!(crb["metadata"].get("namespace").is_none());
    assert_eq!(
        crb["metadata"]["labels"]["baton.dev/ensemble-namespace"],
        "prod"
    );
    assert_eq!(crb["metadata"]["labels"]["baton.dev/ensemble-name"], "zk");
    assert_eq!(
        crb["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:auth-delegator"})
    );
    assert_eq!(
        crb["subjects"],
        json!([{"kind": "ServiceAccount", "name": "zk", "namespace": "prod"}])
    );
    assert!(b.super_secret.is_none(), "made only when missing");
}

#[test]
fn the_super_secret_is_built_only_from_new_credentials() {
    let ce = ensemble("{}");
    let valid = validate(&ce, "baton:test").expect("valid spec");
    let credentials = SuperCredentials {
        username: "super".into(),
        password: "secret".into(),
    };
    let membership = StoredMembership {
        replicas: 3,
        bootstrap: 3,
    };
    let b = build(
        &ce,
        &valid,
        membership,
        test_pki(),
        &operator(),
        Some(&credentials),
    )
    .expect("built");
    let secret = json(&b.super_secret.expect("a new super Secret"));
    assert_eq!(secret["metadata"]["name"], "zk-super");
    assert_eq!(secret["metadata"]["ownerReferences"][0]["uid"], "7d1b");
    let decode = |key: &str| {
        use base64::Engine as _;
        let b64 = secret["data"][key].as_str().expect("data");
        let raw = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .expect("base64");
        String::from_utf8(raw).expect("utf-8")
    };
    assert_eq!(decode("username"), "super");
    assert_eq!(decode("password"), "secret");
    assert_eq!(decode("digest"), "super:lK75jTNcA+U9vtVEw5vB51mj/w4=");
}

#[test]
fn allowed_namespaces_get_the_ca_and_the_client_port() {
    let b = built("{allowedNamespaces: [web, batch]}", 3, 3);
    let published: Vec<serde_json::Value> = b.published_ca_config_maps.iter().map(json).collect();
    assert_eq!(published.len(), 2);
    for (cm, ns) in published.iter().zip(["batch", "web"]) {
        assert_eq!(cm["metadata"]["name"], "prod.zk-ca");
        assert_eq!(cm["metadata"]["namespace"], ns);
        assert!(cm["metadata"].get("ownerReferences").is_none());
        assert_eq!(
            cm["metadata"]["labels"]["baton.dev/ensemble-namespace"],
            "prod"
        );
        assert_eq!(cm["metadata"]["labels"]["baton.dev/ensemble-name"], "zk");
        assert_eq!(cm["data"], json(&b.ca_config_map)["data"]);
    }
    let policy = json(&b.network_policy);
    assert_eq!(
        policy["spec"]["ingress"][2]["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"],
        json!(["batch", "prod", "web"])
    );
    assert!(built("{}", 3, 3).published_ca_config_maps.is_empty());
}

mod backup;
