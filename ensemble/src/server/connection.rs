//! One client connection: a reader that decodes frames and hands requests to the core in
//! arrival order, and a writer that drains the core's replies in batches.

use std::net::SocketAddr;

use baton_proto::codec::{decode_connect_request, decode_request, decode_request_header};
use baton_proto::frame::{FrameDecoder, four_letter_word};
use baton_proto::{DecodeError, ErrorCode};
use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, oneshot};

use super::ClientContext;
use super::four_letter;
use crate::core::{ConnId, ConnectOutcome, CoreMsg, Outbound};

/// Serves one client until it goes away, breaks the protocol, or the core closes it.
pub async fn serve(stream: TcpStream, peer: SocketAddr, conn: ConnId, ctx: ClientContext) {
    // The zookeeper-client crate does not set TCP_NODELAY; setting it here keeps small replies
    // from waiting for Nagle.
    let _ = stream.set_nodelay(true);
    let (mut rd, mut wr) = stream.into_split();
    let mut buf = BytesMut::with_capacity(8 * 1024);

    while buf.len() < 4 {
        match rd.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
    let first4 = [buf[0], buf[1], buf[2], buf[3]];
    if let Some(word) = four_letter_word(&first4) {
        let status = fresh_status(&ctx).await;
        let text = four_letter::answer(word, &status);
        let _ = wr.write_all(text.as_bytes()).await;
        let _ = wr.shutdown().await;
        return;
    }

    let mut frames = FrameDecoder::new(ctx.max_frame_bytes);
    let first = match next_frame(&mut rd, &mut buf, &mut frames, peer).await {
        Some(f) => f,
        None => return,
    };
    let req = match decode_connect_request(&first) {
        Ok(req) => req,
        Err(e) => {
            tracing::warn!(%peer, error = %e, "malformed connect request; closing the connection");
            return;
        }
    };

    let (out_tx, out_rx) = mpsc::unbounded_channel();
    let (closed_tx, mut closed_rx) = oneshot::channel::<()>();
    let writer = tokio::spawn(write_loop(wr, out_rx, closed_tx));
    let (done_tx, done_rx) = oneshot::channel();
    let connect = CoreMsg::Connect {
        conn,
        peer,
        out: out_tx,
        req,
        done: done_tx,
    };
    if ctx.core.send(connect).await.is_err() {
        return;
    }
    match done_rx.await {
        Ok(ConnectOutcome::Established { .. }) => {}
        _ => {
            let _ = writer.await;
            return;
        }
    }

    loop {
        // Everything already buffered goes to the core before we wait on the socket again.
        loop {
            match frames.decode(&mut buf) {
                Ok(Some(frame)) => {
                    if let Err(reason) = forward(&ctx, conn, peer, &frame).await {
                        tracing::warn!(%peer, reason, "closing the connection");
                        return finish(&ctx, conn).await;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(%peer, error = %e, "bad frame; closing the connection");
                    return finish(&ctx, conn).await;
                }
            }
        }
        tokio::select! {
            read = rd.read_buf(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            },
            _ = &mut closed_rx => break,
        }
    }
    finish(&ctx, conn).await
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

/// Decodes one request frame and queues it for the core. As in ZooKeeper, an unknown opcode is
/// answered with Unimplemented (and the core then closes the connection), a body that does not
/// parse with MarshallingError; only a header too short to name its xid ends the connection here.
async fn forward(
    ctx: &ClientContext,
    conn: ConnId,
    peer: SocketAddr,
    frame: &[u8],
) -> Result<(), String> {
    let (hdr, body) =
        decode_request_header(frame).map_err(|e| format!("malformed request header: {e}"))?;
    let msg = match decode_request(hdr.opcode, body) {
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
        .map_err(|_| "the server is shutting down".to_string())
}

async fn next_frame(
    rd: &mut OwnedReadHalf,
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

/// Writes queued frames, coalescing whatever is already waiting into one syscall.
async fn write_loop(
    mut wr: OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<Outbound>,
    closed: oneshot::Sender<()>,
) {
    const MAX_BATCH: usize = 256 * 1024;
    let mut batch: Vec<u8> = Vec::with_capacity(16 * 1024);
    'outer: while let Some(first) = rx.recv().await {
        let mut close = false;
        let mut next = Some(first);
        while let Some(msg) = next.take() {
            match msg {
                Outbound::Frame(f) => batch.extend_from_slice(&f),
                Outbound::Close => {
                    close = true;
                    break;
                }
            }
            if batch.len() < MAX_BATCH {
                next = rx.try_recv().ok();
            }
        }
        if !batch.is_empty() && wr.write_all(&batch).await.is_err() {
            break 'outer;
        }
        batch.clear();
        if close {
            break;
        }
    }
    let _ = wr.shutdown().await;
    let _ = closed.send(());
}
