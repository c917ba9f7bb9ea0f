//! One request frame from a client, decoded and queued for the core in its place.

use std::net::SocketAddr;

use baton_machine::tenancy::K8S_SCHEME;
use baton_proto::codec::{decode_request, decode_request_header};
use baton_proto::{DecodeError, ErrorCode, Request};

use super::ClientContext;
use crate::core::{ConnId, CoreMsg, IdentityVerdict};

/// Whether the connection reads on after a request.
pub(super) enum Flow {
    Continue,
    /// An auth packet was refused: the core answers (or not) and closes the connection.
    Stop,
}

/// Why a connection stops at a request.
#[derive(Debug, thiserror::Error)]
pub(super) enum RequestError {
    #[error("malformed request header: {0}")]
    Header(DecodeError),
    #[error("the server is shutting down")]
    ShuttingDown,
}

/// Decodes one request frame and queues it for the core. As in ZooKeeper, an unknown opcode is
/// answered with Unimplemented (and the core then closes the connection), a body that does not
/// parse with MarshallingError; only a header too short to name its xid ends the connection here.
///
/// A `k8s` auth packet (with `--k8s-auth`) is checked here, with TokenReview, and the core gets
/// the verdict instead of the packet. Nothing else is read from the socket meanwhile, so the
/// verdict reaches the core before any request the client sent after it (per-session FIFO).
pub(super) async fn send_request_to_core(
    ctx: &ClientContext,
    conn: ConnId,
    peer: SocketAddr,
    frame: &[u8],
) -> Result<Flow, RequestError> {
    let (hdr, body) = decode_request_header(frame).map_err(RequestError::Header)?;
    let xid = hdr.xid;
    let mut flow = Flow::Continue;
    let msg = match decode_request(hdr.opcode, body) {
        Ok(Request::Auth(packet)) if packet.scheme == K8S_SCHEME => match &ctx.token_reviewer {
            Some(reviewer) => {
                // Boxed: a TokenReview call's state is kilobytes, and an unboxed one would size
                // every connection's task for it (this future lives inside the read loop) for
                // the whole life of the connection, though it runs once at most.
                let verdict = Box::pin(reviewer.review(&packet.auth, peer.ip())).await;
                flow = after_verdict(&verdict, peer);
                CoreMsg::Identity { conn, xid, verdict }
            }
            // The core refuses it: this member does not check k8s tokens.
            None => CoreMsg::Request {
                conn,
                xid,
                request: Request::Auth(packet),
            },
        },
        Ok(request) => CoreMsg::Request { conn, xid, request },
        Err(DecodeError::UnknownOpCode(op)) => {
            tracing::debug!(%peer, opcode = op, xid, "unsupported opcode");
            CoreMsg::BadRequest {
                conn,
                xid,
                err: ErrorCode::Unimplemented,
            }
        }
        Err(e) => {
            tracing::info!(%peer, xid, opcode = hdr.opcode, error = %e, "request does not parse");
            CoreMsg::BadRequest {
                conn,
                xid,
                err: ErrorCode::MarshallingError,
            }
        }
    };
    ctx.core
        .send(msg)
        .await
        .map_err(|_| RequestError::ShuttingDown)?;
    Ok(flow)
}

/// Whether the connection reads on after the verdict on a `k8s` token: not after a refusal,
/// nor without a verdict (the core closes the connection in both cases).
fn after_verdict(verdict: &IdentityVerdict, peer: SocketAddr) -> Flow {
    match verdict {
        IdentityVerdict::Accepted(_) | IdentityVerdict::Expired => Flow::Continue,
        IdentityVerdict::Rejected(reason) => {
            super::token_review::log_rejected(peer, reason);
            Flow::Stop
        }
        // Logged by the reviewer, which knows the API's error.
        IdentityVerdict::Unavailable(_) => Flow::Stop,
    }
}

#[cfg(test)]
mod tests {
    use tokio::sync::mpsc;

    use super::*;
    use crate::server::test_context as context;

    fn request_frame(xid: i32, opcode: i32) -> Vec<u8> {
        let mut bytes = xid.to_be_bytes().to_vec();
        bytes.extend_from_slice(&opcode.to_be_bytes());
        bytes
    }

    #[tokio::test]
    async fn requests_reach_the_core_decoded_or_refused_in_their_place() {
        let (tx, mut rx) = mpsc::channel(4);
        let ctx = context(tx);
        let peer: SocketAddr = "127.0.0.1:1".parse().expect("address");
        let ping = request_frame(-2, 11);
        assert!(matches!(
            send_request_to_core(&ctx, 7, peer, &ping).await,
            Ok(Flow::Continue)
        ));
        assert!(matches!(
            rx.recv().await,
            Some(CoreMsg::Request {
                conn: 7,
                xid: -2,
                request: Request::Ping
            })
        ));
        let unknown = request_frame(3, 9999);
        assert!(send_request_to_core(&ctx, 7, peer, &unknown).await.is_ok());
        assert!(matches!(
            rx.recv().await,
            Some(CoreMsg::BadRequest {
                xid: 3,
                err: ErrorCode::Unimplemented,
                ..
            })
        ));
    }

    /// A connection's task is as large as the largest state it can reach, for as long as the
    /// connection lives: with 10,000 sessions that is memory the members hold for nothing. A
    /// rare path with a large state belongs in a box (a TokenReview call in the read loop made
    /// every connection's task 2 KiB larger).
    #[tokio::test]
    async fn a_connections_task_is_not_sized_for_its_rare_paths() {
        let (tx, _rx) = mpsc::channel(4);
        let ctx = context(tx);
        let peer: SocketAddr = "127.0.0.1:1".parse().expect("address");
        let ping = request_frame(-2, 11);
        let send = send_request_to_core(&ctx, 7, peer, &ping);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("listen");
        let addr = listener.local_addr().expect("address");
        let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let serve = crate::server::connection::serve(stream, peer, 7, ctx.clone(), None);
        // 672 and 1,592 bytes in a debug build when this was written; 2,712 and 3,632 with the
        // TokenReview call unboxed.
        assert!(
            size_of_val(&send) <= 1024,
            "handing a request to the core needs {} bytes of every connection's task",
            size_of_val(&send)
        );
        assert!(
            size_of_val(&serve) <= 2048,
            "a connection's task is {} bytes",
            size_of_val(&serve)
        );
    }

    #[tokio::test]
    async fn a_header_too_short_or_a_stopped_core_ends_the_connection() {
        let (tx, rx) = mpsc::channel(4);
        let ctx = context(tx);
        let peer: SocketAddr = "127.0.0.1:1".parse().expect("address");
        assert!(matches!(
            send_request_to_core(&ctx, 7, peer, &[0, 0, 0]).await,
            Err(RequestError::Header(_))
        ));
        drop(rx);
        let ping = request_frame(-2, 11);
        let stopped = send_request_to_core(&ctx, 7, peer, &ping).await;
        assert!(matches!(stopped, Err(RequestError::ShuttingDown)));
        assert_eq!(
            stopped.err().map(|e| e.to_string()),
            Some("the server is shutting down".into())
        );
    }
}
