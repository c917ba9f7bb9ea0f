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
    )
    .expect("built")
}

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
    assert!(args.contains(&"--admin-addr=0.0.0.0:8080"));
    assert!(args.contains(&"--max-session-timeout=40s"));
    assert_eq!(c["envFrom"][0]["configMapRef"]["name"], "zk-config");
    assert_eq!(
        c["env"][0]["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.name"
    );
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["readinessProbe"]["httpGet"]["port"], "admin");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
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
    assert_eq!(client["spec"]["ports"][0]["port"], 2181);
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
    std::fs::write(&stand_in, "#!/bin/sh\necho \"id=$BATON_ID $*\"\n").expect("write stand-in");
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
    assert_eq!(run_start_script("zk-0", "3"), "id=1 --data-dir=/d\n");
    assert_eq!(run_start_script("zk-2", "3"), "id=3 --data-dir=/d\n");
    assert_eq!(run_start_script("zk-3", "3"), "id=4 --data-dir=/d --join\n");
    assert_eq!(
        run_start_script("my-zk-10", "3"),
        "id=11 --data-dir=/d --join\n"
    );
    assert!(run_start_script("zk", "3").contains("cannot derive a member id"));
}
