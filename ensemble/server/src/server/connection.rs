//! One client connection: a reader that decodes frames and hands requests to the core in
//! arrival order, and a writer (`writer.rs`) that drains the core's replies in batches.
//! Generic over the stream, so plain TCP and TLS share everything after the TLS handshake.
//!
//! Limits (DESIGN.md §4): the TLS handshake, the first frame (a ConnectRequest, or a
//! four-letter word) and the core's answer must all come within the handshake time limit;
//! after that, the reader stops reading the socket while the connection has too many requests
//! or reply bytes outstanding (`window.rs`, `ReplyBudget`).

use std::net::SocketAddr;
use std::sync::Arc;

use baton_machine::tenancy::K8S_SCHEME;
use baton_proto::codec::{decode_connect_request, decode_request, decode_request_header};
use baton_proto::frame::{FrameDecoder, four_letter_word};
use baton_proto::{DecodeError, ErrorCode, Request};
use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use super::window::RequestWindow;
use super::writer::{WriterParts, write_loop};
use super::{ClientContext, four_letter};
use crate::core::{ConnId, ConnectOutcome, CoreMsg, IdentityVerdict, OutboundTx, ReplyBudget};

/// A stream that splits into halves the reader and the writer own.
pub(super) trait SplitStream: Send + 'static {
    type Read: AsyncRead + Unpin + Send + 'static;
    type Write: AsyncWrite + Unpin + Send + 'static;
    fn split_halves(self) -> (Self::Read, Self::Write);
}

impl SplitStream for TcpStream {
    type Read = tokio::net::tcp::OwnedReadHalf;
    type Write = tokio::net::tcp::OwnedWriteHalf;
    fn split_halves(self) -> (Self::Read, Self::Write) {
        self.into_split()
    }
}

impl SplitStream for tokio_rustls::server::TlsStream<TcpStream> {
    type Read = tokio::io::ReadHalf<Self>;
    type Write = tokio::io::WriteHalf<Self>;
    fn split_halves(self) -> (Self::Read, Self::Write) {
        tokio::io::split(self)
    }
}

/// Serves one accepted TCP connection (over TLS when `tls` is given) until the client goes
/// away, breaks the protocol, runs out of time for its handshake, or the core closes it.
pub async fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    conn: ConnId,
    ctx: ClientContext,
    tls: Option<TlsAcceptor>,
) {
    // The zookeeper-client crate does not set TCP_NODELAY; setting it here keeps small replies
    // from waiting for Nagle.
    let _ = stream.set_nodelay(true);
    let deadline = Instant::now() + ctx.limits.handshake_timeout;
    let Some(tls) = tls else {
        return serve_stream(stream, peer, conn, ctx, deadline).await;
    };
    match tokio::time::timeout_at(deadline, tls.accept(stream)).await {
        Ok(Ok(stream)) => serve_stream(stream, peer, conn, ctx, deadline).await,
        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "client TLS handshake failed"),
        Err(_) => handshake_timed_out(&ctx, peer, "TLS handshake"),
    }
}

fn handshake_timed_out(ctx: &ClientContext, peer: SocketAddr, stage: &'static str) {
    ctx.metrics.client_handshake_timeouts.inc();
    if let Some(suppressed) = super::HANDSHAKE_LOG.admit() {
        tracing::warn!(
            %peer, stage, limit = ?ctx.limits.handshake_timeout, similar_lines_suppressed = suppressed,
            "client did not finish its handshake in time (--client-handshake-timeout); closing the connection"
        );
    }
}

/// The connection's state once the core has accepted its session.
struct Established<R> {
    rd: R,
    buf: BytesMut,
    frames: FrameDecoder,
    budget: Arc<ReplyBudget>,
    window: Arc<RequestWindow>,
    closed: oneshot::Receiver<()>,
}

async fn serve_stream<S: SplitStream>(
    stream: S,
    peer: SocketAddr,
    conn: ConnId,
    ctx: ClientContext,
    deadline: Instant,
) {
    let (rd, wr) = stream.split_halves();
    match tokio::time::timeout_at(deadline, handshake(rd, wr, peer, conn, &ctx)).await {
        Ok(Some(established)) => serve_requests(established, peer, conn, &ctx).await,
        Ok(None) => {}
        Err(_) => {
            handshake_timed_out(&ctx, peer, "connect request");
            // The core may hold a half-made connection; it forgets one it never knew.
            finish(&ctx, conn).await;
        }
    }
}

/// The first frame and the core's answer; `None` when the connection is done (a four-letter
/// word answered, a refusal, a broken frame, a client gone).
async fn handshake<R, W>(
    mut rd: R,
    mut wr: W,
    peer: SocketAddr,
    conn: ConnId,
    ctx: &ClientContext,
) -> Option<Established<R>>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let mut buf = BytesMut::with_capacity(8 * 1024);
    while buf.len() < 4 {
        match rd.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(_) => {}
        }
    }
    let first4 = [buf[0], buf[1], buf[2], buf[3]];
    if let Some(word) = four_letter_word(&first4) {
        let status = fresh_status(ctx).await;
        let text = four_letter::answer(word, &status);
        let _ = wr.write_all(text.as_bytes()).await;
        let _ = wr.shutdown().await;
        return None;
    }

    let mut frames = FrameDecoder::new(ctx.limits.max_frame_bytes);
    let first = next_frame(&mut rd, &mut buf, &mut frames, peer).await?;
    let req = match decode_connect_request(&first) {
        Ok(req) => req,
        Err(e) => {
            tracing::warn!(%peer, error = %e, "malformed connect request; closing the connection");
            return None;
        }
    };

    let limits = &ctx.limits;
    let budget = Arc::new(ReplyBudget::new(
        limits.max_unread_reply_bytes,
        ctx.metrics.client_reply_queue_bytes.clone(),
    ));
    let window = Arc::new(RequestWindow::new(
        limits.max_outstanding_requests,
        limits.max_unread_reply_bytes,
    ));
    let (out_tx, out_rx) = mpsc::unbounded_channel();
    let (closed_tx, closed) = oneshot::channel::<()>();
    let writer = tokio::spawn(write_loop(
        wr,
        WriterParts {
            rx: out_rx,
            budget: budget.clone(),
            window: window.clone(),
            conn,
            ctx: ctx.clone(),
            closed: closed_tx,
        },
    ));
    let (done_tx, done_rx) = oneshot::channel();
    let connect = CoreMsg::Connect {
        conn,
        peer,
        out: OutboundTx::new(out_tx, budget.clone()),
        req,
        done: done_tx,
    };
    if ctx.core.send(connect).await.is_err() {
        return None;
    }
    match done_rx.await {
        Ok(ConnectOutcome::Established { .. }) => Some(Established {
            rd,
            buf,
            frames,
            budget,
            window,
            closed,
        }),
        _ => {
            // The refusal (if any) is queued with a Close behind it.
            let _ = writer.await;
            None
        }
    }
}

/// Forwards requests until the client goes away or breaks the protocol, or the writer stops.
async fn serve_requests<R: AsyncRead + Unpin>(
    mut c: Established<R>,
    peer: SocketAddr,
    conn: ConnId,
    ctx: &ClientContext,
) {
    let max_unread = ctx.limits.max_unread_reply_bytes;
    let room = |c: &Established<R>| c.window.has_room() && c.budget.queued() < max_unread;
    loop {
        // Everything already buffered goes to the core before we wait on the socket again,
        // as long as the connection has room.
        while room(&c) {
            match c.frames.decode(&mut c.buf) {
                Ok(Some(frame)) => {
                    c.window.sent(frame.len());
                    match forward(ctx, conn, peer, &frame).await {
                        Ok(Flow::Continue) => {}
                        // The core answers and closes; nothing after the refused auth is read.
                        Ok(Flow::Stop) => return finish(ctx, conn).await,
                        Err(reason) => {
                            tracing::warn!(%peer, reason, "closing the connection");
                            return finish(ctx, conn).await;
                        }
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(%peer, error = %e, "bad frame; closing the connection");
                    return finish(ctx, conn).await;
                }
            }
        }
        if !room(&c) {
            // Backpressure: the socket is not read until the client has read its replies;
            // its own writes then block in TCP.
            ctx.metrics.client_read_pauses.inc();
            ctx.metrics.client_paused_connections.inc();
            if let Some(suppressed) = super::PAUSE_LOG.admit() {
                tracing::info!(
                    %peer, in_flight = c.window.in_flight(), unread_reply_bytes = c.budget.queued(),
                    similar_lines_suppressed = suppressed,
                    "a client has too much outstanding (--max-outstanding-requests, --max-unread-reply-bytes); not reading from it until it reads its replies"
                );
            }
            let mut writer_gone = false;
            while !room(&c) {
                tokio::select! {
                    _ = c.window.progressed() => {}
                    _ = &mut c.closed => {
                        writer_gone = true;
                        break;
                    }
                }
            }
            ctx.metrics.client_paused_connections.dec();
            if writer_gone {
                break;
            }
            continue;
        }
        tokio::select! {
            read = c.rd.read_buf(&mut c.buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            },
            _ = &mut c.closed => break,
        }
    }
    finish(ctx, conn).await
}

/// The core's current figures (a four-letter word must reflect the request just before it),
/// or the last published ones if the core cannot answer.
pub(crate) async fn fresh_status(ctx: &ClientContext) -> crate::status::Status {
    let (tx, rx) = oneshot::channel();
    if ctx.core.send(CoreMsg::Status(tx)).await.is_ok()
        && let Ok(status) = rx.await
    {
        return status;
    }
    ctx.status.borrow().clone()
}

async fn finish(ctx: &ClientContext, conn: ConnId) {
    let _ = ctx.core.send(CoreMsg::Disconnected { conn }).await;
}

/// Whether the connection reads on after a request.
enum Flow {
    Continue,
    /// An auth packet was refused: the core answers (or not) and closes the connection.
    Stop,
}

/// Decodes one request frame and queues it for the core. As in ZooKeeper, an unknown opcode is
/// answered with Unimplemented (and the core then closes the connection), a body that does not
/// parse with MarshallingError; only a header too short to name its xid ends the connection here.
///
/// A `k8s` auth packet (with `--k8s-auth`) is checked here, with TokenReview, and the core gets
/// the verdict instead of the packet. Nothing else is read from the socket meanwhile, so the
/// verdict reaches the core before any request the client sent after it (per-session FIFO).
async fn forward(
    ctx: &ClientContext,
    conn: ConnId,
    peer: SocketAddr,
    frame: &[u8],
) -> Result<Flow, String> {
    let (hdr, body) =
        decode_request_header(frame).map_err(|e| format!("malformed request header: {e}"))?;
    let mut flow = Flow::Continue;
    let msg = match decode_request(hdr.opcode, body) {
        Ok(Request::Auth(packet))
            if packet.scheme == K8S_SCHEME && ctx.token_reviewer.is_some() =>
        {
            let verdict = match &ctx.token_reviewer {
                Some(reviewer) => reviewer.review(&packet.auth).await,
                None => IdentityVerdict::Unavailable("no token reviewer".into()),
            };
            match &verdict {
                IdentityVerdict::Accepted(_) | IdentityVerdict::Expired => {}
                IdentityVerdict::Rejected(reason) => {
                    super::token_review::log_rejected(peer, reason);
                    flow = Flow::Stop;
                }
                // Logged by the reviewer, which knows the API's error.
                IdentityVerdict::Unavailable(_) => flow = Flow::Stop,
            }
            CoreMsg::Identity {
                conn,
                xid: hdr.xid,
                verdict,
            }
        }
        Ok(request) => CoreMsg::Request {
            conn,
            xid: hdr.xid,
            request,
        },
        Err(DecodeError::UnknownOpCode(op)) => {
            tracing::debug!(%peer, opcode = op, xid = hdr.xid, "unsupported opcode");
            CoreMsg::BadRequest {
                conn,
                xid: hdr.xid,
                err: ErrorCode::Unimplemented,
            }
        }
        Err(e) => {
            tracing::info!(%peer, xid = hdr.xid, opcode = hdr.opcode, error = %e, "request does not parse");
            CoreMsg::BadRequest {
                conn,
                xid: hdr.xid,
                err: ErrorCode::MarshallingError,
            }
        }
    };
    ctx.core
        .send(msg)
        .await
        .map_err(|_| "the server is shutting down".to_string())?;
    Ok(flow)
}

async fn next_frame<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
    frames: &mut FrameDecoder,
    peer: SocketAddr,
) -> Option<bytes::Bytes> {
    loop {
        match frames.decode(buf) {
            Ok(Some(frame)) => return Some(frame),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(%peer, error = %e, "bad frame; closing the connection");
                return None;
            }
        }
        match rd.read_buf(buf).await {
            Ok(0) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}
