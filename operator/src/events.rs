//! Kubernetes Events on the `CoordinationEnsemble` for every step the operator takes and every
//! failure, so `kubectl describe ce` tells the story. Publishing is best effort: an Event that
//! cannot be written is logged, never a reason to fail a reconcile.

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

use crate::crd::CoordinationEnsemble;
use crate::ensemble::MembershipStep;
use crate::names::FIELD_MANAGER;
use crate::plan::Action;

/// Publishes Events as `baton-operator`.
#[derive(Clone)]
pub struct EventSink {
    recorder: Recorder,
}

impl EventSink {
    /// Events reported by `baton-operator` (instance `instance`, e.g. the pod name).
    pub fn new(client: kube::Client, instance: Option<String>) -> Self {
        EventSink {
            recorder: Recorder::new(
                client,
                Reporter {
                    controller: FIELD_MANAGER.into(),
                    instance,
                },
            ),
        }
    }

    /// A Normal Event for a step about to be taken (`reseeding`: as part of that member's reseed).
    pub async fn step(&self, ce: &CoordinationEnsemble, action: &Action, reseeding: Option<u64>) {
        let (reason, verb) = match action {
            Action::ReplaceVolume { .. } => ("Reseeding", "ReplaceVolume"),
            _ if reseeding.is_some() => (
                "Reseeding",
                match action {
                    Action::Membership(MembershipStep::Add { .. }) => "AddMember",
                    Action::Membership(MembershipStep::Remove { .. }) => "RemoveMember",
                    _ => "TransferLeadership",
                },
            ),
            Action::Membership(MembershipStep::Add { .. }) => ("ScalingUp", "AddMember"),
            Action::Membership(MembershipStep::Remove { .. }) => ("ScalingDown", "RemoveMember"),
            Action::Membership(MembershipStep::Transfer { .. }) => {
                ("LeaderTransfer", "TransferLeadership")
            }
            Action::RestartMember { .. } => ("RollingUpdate", "RestartMember"),
        };
        let note = match action {
            Action::Membership(step) => step.to_string(),
            Action::RestartMember { id } => format!("restart member {id} at the new revision"),
            Action::ReplaceVolume { id } => format!(
                "delete the data volume claim and pod of member {id}: it starts empty and joins"
            ),
        };
        let note = match reseeding {
            Some(id) => format!("reseed member {id}: {note}"),
            None => note,
        };
        self.publish(ce, EventType::Normal, reason, verb, &note)
            .await;
    }

    /// A Normal Event for certificates issued, renewed or dropped (`note` says which).
    pub async fn certificates(&self, ce: &CoordinationEnsemble, note: &str) {
        self.publish(
            ce,
            EventType::Normal,
            "Certificates",
            "IssueCertificates",
            note,
        )
        .await;
    }

    /// A Normal Event.
    pub async fn normal(&self, ce: &CoordinationEnsemble, reason: &str, action: &str, note: &str) {
        self.publish(ce, EventType::Normal, reason, action, note)
            .await;
    }

    /// A Warning Event.
    pub async fn warning(&self, ce: &CoordinationEnsemble, reason: &str, note: &str) {
        self.publish(ce, EventType::Warning, reason, "Reconcile", note)
            .await;
    }

    /// A Warning Event on a pod (e.g. `SidecarMissing`).
    pub async fn pod_warning(&self, pod: &Pod, reason: &str, note: &str) {
        self.publish_on(
            &pod.object_ref(&()),
            EventType::Warning,
            reason,
            "Audit",
            note,
        )
        .await;
    }

    async fn publish(
        &self,
        ce: &CoordinationEnsemble,
        type_: EventType,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        self.publish_on(&ce.object_ref(&()), type_, reason, action, note)
            .await;
    }

    async fn publish_on(
        &self,
        object: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        let event = Event {
            type_,
            reason: reason.into(),
            // The API server refuses notes over 1 kB.
            note: Some(note.chars().take(1000).collect()),
            action: action.into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, object).await {
            tracing::warn!(error = %e, reason, "cannot publish an Event");
        }
    }
}
