//! A client connection as the core sees it: its session, identities and in-order pipeline.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Instant;

use baton_proto::{Id, Request};
use bytes::Bytes;

use super::messages::{Outbound, OutboundTx};

/// A request waiting for its turn so that replies leave in the order requests arrived
/// (ZooKeeper's per-session FIFO guarantee): a read never overtakes an earlier write.
#[derive(Debug)]
pub enum Pending {
    /// A write proposed to Raft in `term`, answered when its entry applies.
    Write { xid: i32, since: Instant, term: u64 },
    /// A `sync`: answered once this member has applied up to the leader's commit index as of
    /// when the sync arrived (Raft ReadIndex), so later reads see every write acknowledged before.
    Sync {
        xid: i32,
        path: String,
        ctx: u64,
        index: Option<u64>,
        since: Instant,
        term: u64,
    },
    /// A local request queued behind a write; executed right after that write applies.
    Deferred { xid: i32, request: Request },
    /// A request the decoder refused, answered with `err` in its turn.
    Refused {
        xid: i32,
        err: baton_proto::ErrorCode,
    },
    /// An auth packet checked outside the core (`k8s`), taking effect in its turn: requests
    /// sent after it see the identity, requests sent before it do not.
    Identity {
        xid: i32,
        verdict: super::messages::IdentityVerdict,
    },
}

/// One client connection attached to the core.
#[derive(Debug)]
pub struct LocalConn {
    pub peer: SocketAddr,
    pub out: OutboundTx,
    pub session_id: Option<i64>,
    /// Identities for ACL checks: `ip:<addr>` always, plus what `auth` packets added (at most
    /// one `k8s` identity: the newest), `super:` with the super digest.
    pub auth: Vec<Id>,
    pub pipeline: VecDeque<Pending>,
    pub received: u64,
    pub sent: u64,
}

impl Pending {
    /// When a request that waits on the ensemble (write or sync) was sent on its way.
    pub fn waiting_since(&self) -> Option<(Instant, u64)> {
        match self {
            Pending::Write { since, term, .. } | Pending::Sync { since, term, .. } => {
                Some((*since, *term))
            }
            _ => None,
        }
    }
}

impl LocalConn {
    pub fn new(peer: SocketAddr, out: OutboundTx) -> Self {
        LocalConn {
            peer,
            out,
            session_id: None,
            auth: vec![Id::new("ip", peer.ip().to_string())],
            pipeline: VecDeque::new(),
            received: 0,
            sent: 0,
        }
    }

    /// Queues a frame; a writer that has gone away is noticed through `Disconnected`.
    pub fn send(&mut self, frame: Bytes) {
        self.sent += 1;
        let _ = self.out.send(Outbound::Frame(frame));
    }

    pub fn close(&self) {
        let _ = self.out.send(Outbound::Close);
    }

    /// Whether the client has left so many reply bytes unread that the next local request
    /// (whose reply may be large) must wait (`ReplyBudget`).
    pub fn must_hold(&self) -> bool {
        self.out.budget().should_hold()
    }

    /// The xid and term of the newest write in the pipeline: the predecessor the next write of
    /// the session names (`Proposal::prev_xid`).
    pub fn last_write(&self) -> Option<(i32, u64)> {
        self.pipeline.iter().rev().find_map(|p| match p {
            Pending::Write { xid, term, .. } => Some((*xid, *term)),
            _ => None,
        })
    }

    /// Whether a local request waits in the pipeline. Requests that wait on the ensemble
    /// (writes, syncs) are only sent on their way from the front of a pipeline with none
    /// (`Core::on_request`), so none is ever in flight behind a waiting local request: a
    /// held reply can never be overtaken by a later write's, and a held read never sees a
    /// write the client sent after it.
    pub fn has_waiting_local(&self) -> bool {
        matches!(
            self.pipeline.back(),
            Some(Pending::Deferred { .. } | Pending::Refused { .. } | Pending::Identity { .. })
        )
    }
}

#[cfg(test)]
mod tests {
    use baton_proto::ErrorCode;

    use super::*;

    fn conn() -> LocalConn {
        let peer: SocketAddr = "10.0.0.1:4000".parse().expect("address");
        LocalConn::new(peer, crate::core::unlimited_outbound_queue().0)
    }

    #[test]
    fn a_connection_starts_with_its_ip_identity() {
        assert_eq!(conn().auth, vec![Id::new("ip", "10.0.0.1")]);
    }

    #[test]
    fn the_newest_write_is_the_next_writes_predecessor() {
        let mut c = conn();
        let since = Instant::now();
        assert_eq!(c.last_write(), None);
        c.pipeline.push_back(Pending::Write {
            xid: 1,
            since,
            term: 2,
        });
        c.pipeline.push_back(Pending::Write {
            xid: 2,
            since,
            term: 3,
        });
        c.pipeline.push_back(Pending::Refused {
            xid: 3,
            err: ErrorCode::MarshallingError,
        });
        assert_eq!(c.last_write(), Some((2, 3)));
    }

    #[test]
    fn only_a_local_request_at_the_back_makes_later_requests_wait() {
        let mut c = conn();
        assert!(!c.has_waiting_local());
        c.pipeline.push_back(Pending::Write {
            xid: 1,
            since: Instant::now(),
            term: 1,
        });
        assert!(!c.has_waiting_local());
        c.pipeline.push_back(Pending::Deferred {
            xid: 2,
            request: Request::Ping,
        });
        assert!(c.has_waiting_local());
    }
}
