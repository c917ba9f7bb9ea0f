//! The NetworkPolicy in front of the members (DESIGN.md §4: defence in depth, not the guard:
//! many clusters enforce none, so the ports authenticate by TLS anyway).
//!
//! Ingress to member pods only: the peer port from the ensemble's own members, the admin port
//! from the operator's pods (and the ensemble's backup Jobs, and the metrics scraper when one
//! is named), the client ports from the namespaces the ensemble serves. Egress
//! is left alone (members resolve DNS and reach each other). Kubelet probes of the admin port
//! come from the node, which most network plugins let through whatever the policy says (the
//! policy API cannot name the node), so the probes keep working.

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::names::{ADMIN_PORT, CLIENT_PORT, EnsembleNames, PEER_PORT, SECURE_CLIENT_PORT};

/// Label every namespace carries with its own name (Kubernetes 1.22+).
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Where the operator runs: the pods allowed to the admin port, with the metrics scraper.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OperatorPods {
    /// The operator's namespace.
    pub namespace: String,
    /// Labels of the operator's pods; empty: every pod of that namespace.
    pub labels: BTreeMap<String, String>,
    /// The monitoring stack's scraper (`--metrics-scraper-namespace`, `-pod-labels`; the chart
    /// sets them with its PodMonitors): also let through to the admin port, for `/metrics`.
    /// Everything else on that port needs the admin certificate anyway.
    pub metrics_scraper: Option<ScraperPods>,
}

/// Pods of one namespace that scrape the members' `/metrics`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScraperPods {
    /// Their namespace (exactly one: never every namespace).
    pub namespace: String,
    /// Their labels; empty: every pod of that namespace.
    pub labels: BTreeMap<String, String>,
}

/// Who may reach which port of the members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reach<'a> {
    pub operator: &'a OperatorPods,
    /// Namespaces whose pods may use the client ports: the ensemble's own and
    /// `spec.allowedNamespaces`.
    pub client_namespaces: &'a [String],
    /// Whether the plain client port is served (else only the TLS one is opened).
    pub plain_client_port: bool,
    /// Whether the ensemble's backup Jobs run (`spec.backup`): their pods, in the ensemble's
    /// namespace, reach the admin port too.
    pub backup: bool,
}

/// The policy for `names`' members.
pub fn network_policy(names: &EnsembleNames, meta: ObjectMeta, reach: &Reach<'_>) -> NetworkPolicy {
    let ports = |ports: &[i32]| {
        Some(
            ports
                .iter()
                .map(|&p| NetworkPolicyPort {
                    port: Some(IntOrString::Int(p)),
                    protocol: Some("TCP".into()),
                    ..NetworkPolicyPort::default()
                })
                .collect(),
        )
    };
    let namespace = |names: Vec<String>| LabelSelector {
        match_expressions: Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                key: NAMESPACE_NAME_LABEL.into(),
                operator: "In".into(),
                values: Some(names),
            },
        ]),
        ..LabelSelector::default()
    };
    let members = LabelSelector {
        match_labels: Some(names.selector_labels()),
        ..LabelSelector::default()
    };
    let peers = NetworkPolicyIngressRule {
        from: Some(vec![NetworkPolicyPeer {
            pod_selector: Some(members.clone()),
            ..NetworkPolicyPeer::default()
        }]),
        ports: ports(&[PEER_PORT]),
    };
    let pods_in = |ns: &str, labels: &BTreeMap<String, String>| NetworkPolicyPeer {
        namespace_selector: Some(namespace(vec![ns.to_string()])),
        pod_selector: Some(LabelSelector {
            match_labels: Some(labels.clone()).filter(|labels| !labels.is_empty()),
            ..LabelSelector::default()
        }),
        ..NetworkPolicyPeer::default()
    };
    let mut admin_from = vec![pods_in(&reach.operator.namespace, &reach.operator.labels)];
    if let Some(scraper) = &reach.operator.metrics_scraper {
        admin_from.push(pods_in(&scraper.namespace, &scraper.labels));
    }
    if reach.backup {
        // No namespace selector: the policy's own namespace, where the CronJob runs.
        admin_from.push(NetworkPolicyPeer {
            pod_selector: Some(LabelSelector {
                match_labels: Some(names.backup_pod_labels()),
                ..LabelSelector::default()
            }),
            ..NetworkPolicyPeer::default()
        });
    }
    let admin = NetworkPolicyIngressRule {
        from: Some(admin_from),
        ports: ports(&[ADMIN_PORT]),
    };
    let client_ports: &[i32] = if reach.plain_client_port {
        &[SECURE_CLIENT_PORT, CLIENT_PORT]
    } else {
        &[SECURE_CLIENT_PORT]
    };
    let mut client_namespaces = reach.client_namespaces.to_vec();
    if client_namespaces.is_empty() {
        // An empty `In` list is invalid; the ensemble's own namespace is always served.
        client_namespaces.push(names.namespace.clone());
    }
    client_namespaces.sort();
    client_namespaces.dedup();
    let clients = NetworkPolicyIngressRule {
        from: Some(vec![NetworkPolicyPeer {
            namespace_selector: Some(namespace(client_namespaces)),
            ..NetworkPolicyPeer::default()
        }]),
        ports: ports(client_ports),
    };
    NetworkPolicy {
        metadata: meta,
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(members),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(vec![peers, admin, clients]),
            egress: None,
        }),
    }
}
