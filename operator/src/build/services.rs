//! The two Services and the PodDisruptionBudget.

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::names::{ADMIN_PORT, CLIENT_PORT, EnsembleNames, PEER_PORT, SECURE_CLIENT_PORT};

fn port(name: &str, port: i32) -> ServicePort {
    ServicePort {
        name: Some(name.into()),
        port,
        target_port: Some(IntOrString::String(name.into())),
        protocol: Some("TCP".into()),
        ..ServicePort::default()
    }
}

/// Headless Service: one DNS name per member, published before the member is ready because a
/// bootstrapping member becomes ready only once it can reach its peers.
/// The client ports served: TLS always, plain only when the spec asks for it.
fn client_ports(plain_client_port: bool) -> Vec<ServicePort> {
    let mut ports = vec![port("client-tls", SECURE_CLIENT_PORT)];
    if plain_client_port {
        ports.push(port("client", CLIENT_PORT));
    }
    ports
}

pub(super) fn peer_service(
    names: &EnsembleNames,
    meta: ObjectMeta,
    plain_client_port: bool,
) -> Service {
    let mut ports = vec![port("peer", PEER_PORT), port("admin", ADMIN_PORT)];
    ports.extend(client_ports(plain_client_port));
    Service {
        metadata: meta,
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            publish_not_ready_addresses: Some(true),
            selector: Some(names.selector_labels()),
            ports: Some(ports),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// ClusterIP Service for ZooKeeper clients: only members that know the leader and are caught up.
pub(super) fn client_service(
    names: &EnsembleNames,
    meta: ObjectMeta,
    plain_client_port: bool,
) -> Service {
    Service {
        metadata: meta,
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(names.selector_labels()),
            ports: Some(client_ports(plain_client_port)),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// At most one member voluntarily disrupted at a time (a drain never costs the quorum).
pub(super) fn pdb(names: &EnsembleNames, meta: ObjectMeta) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: meta,
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(names.selector_labels()),
                ..LabelSelector::default()
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    }
}
