//! One client connection: a reader (`Connection`: the socket's read half and its framing) whose
//! requests go to the core in arrival order, and a writer (`writer.rs`) that drains the core's
//! replies in batches.
//! Generic over the stream, so plain TCP and TLS share everything after the TLS handshake.
//!
//! Limits (DESIGN.md §4): the TLS handshake, the first frame (a ConnectRequest, or a
//! four-letter word) and the core's answer must all come within the handshake time limit;
//! after that, the reader stops reading the socket while the connection has too many requests
//! or reply bytes outstanding (`window.rs`, `ReplyBudget`).

use std::net::SocketAddr;
use std::sync::Arc;

use baton_proto::ConnectRequest;
use baton_proto::codec::decode_connect_request;
use baton_proto::frame::{FrameDecoder, FrameError, four_letter_word};
use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use super::request::{Flow, send_request_to_core};
use super::window::RequestWindow;
use super::writer::{WriterParts, write_loop};
use super::{ClientContext, four_letter};
use crate::core::{ConnId, ConnectOutcome, CoreMsg, OutboundTx, ReplyBudget, outbound_queue};

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
    // Boxed, so that a plain connection's task carries no room for a TLS session's state: a
    // task is as large as its largest state, for as long as the connection lives.
    Box::pin(serve_tls(stream, peer, conn, ctx, tls, deadline)).await
}

async fn serve_tls(
    stream: TcpStream,
    peer: SocketAddr,
    conn: ConnId,
    ctx: ClientContext,
    tls: TlsAcceptor,
    deadline: Instant,
) {
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

/// A client socket's read half and the framing on it: bytes in, frames out. The write half
/// belongs to the writer task (`writer.rs`), which sends replies while requests are read.
struct Connection<R> {
    rd: R,
    buf: BytesMut,
    frames: FrameDecoder,
}

/// Room made for each read. Most requests (pings, reads, sidecar writes) are smaller, and an
/// idle session's buffer is all it costs between requests: with 10,000 sessions per member, 8 KiB
/// each was most of the member's memory, and 1 KiB still a sixth of an idle connection. A
/// larger frame grows the buffer to its whole length once its length prefix is read.
const READ_CHUNK: usize = 256;

impl<R: AsyncRead + Unpin> Connection<R> {
    fn new(rd: R, max_frame_bytes: usize) -> Self {
        Connection {
            rd,
            buf: BytesMut::new(),
            frames: FrameDecoder::new(max_frame_bytes),
        }
    }

    /// The first four bytes, left in the buffer: a four-letter word, or a frame's length.
    /// `None` when the client goes away first.
    async fn peek_first_four(&mut self) -> Option<[u8; 4]> {
        while self.buf.len() < 4 {
            if !self.read_more().await {
                return None;
            }
        }
        Some([self.buf[0], self.buf[1], self.buf[2], self.buf[3]])
    }

    /// The next frame, reading the socket as needed; `Ok(None)` when the client goes away.
    async fn read_frame(&mut self) -> Result<Option<Bytes>, FrameError> {
        loop {
            if let Some(frame) = self.buffered_frame()? {
                return Ok(Some(frame));
            }
            if !self.read_more().await {
                return Ok(None);
            }
        }
    }

    /// A frame already read from the socket, without reading more.
    fn buffered_frame(&mut self) -> Result<Option<Bytes>, FrameError> {
        self.frames.decode(&mut self.buf)
    }

    /// Reads what the socket has; false when the client has gone away (or the read failed).
    async fn read_more(&mut self) -> bool {
        if self.buf.is_empty() && self.buf.capacity() > 4 * READ_CHUNK {
            // What a large frame left behind is not kept for an idle session.
            self.buf = BytesMut::new();
        }
        if self.buf.capacity() - self.buf.len() < READ_CHUNK / 4 {
            self.buf.reserve(READ_CHUNK);
        }
        matches!(self.rd.read_buf(&mut self.buf).await, Ok(n) if n > 0)
    }
}

/// The connection once the core has accepted its session.
struct Established<R> {
    conn: Connection<R>,
    budget: Arc<ReplyBudget>,
    window: Arc<RequestWindow>,
    /// Fires when the writer stops.
    closed: oneshot::Receiver<()>,
}

impl<R> Established<R> {
    /// Whether another request may be read: few enough awaiting replies, and reply bytes
    /// below the limit.
    fn has_room(&self, max_unread: usize) -> bool {
        self.window.has_room() && self.budget.queued() < max_unread
    }
}

async fn serve_stream<S: SplitStream>(
    stream: S,
    peer: SocketAddr,
    conn: ConnId,
    ctx: ClientContext,
    deadline: Instant,
) {
    let (rd, wr) = stream.split_halves();
    // Boxed: the handshake's state is freed once it is done instead of sizing the task for the
    // connection's whole life.
    let handshake = Box::pin(handshake(rd, wr, peer, conn, &ctx));
    match tokio::time::timeout_at(deadline, handshake).await {
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
    rd: R,
    mut wr: W,
    peer: SocketAddr,
    conn: ConnId,
    ctx: &ClientContext,
) -> Option<Established<R>>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let mut reader = Connection::new(rd, ctx.limits.max_frame_bytes);
    let first4 = reader.peek_first_four().await?;
    if let Some(word) = four_letter_word(&first4) {
        let text = if ctx.limits.four_letter_words.allows(word) {
            four_letter::answer(word, &fresh_status(ctx).await)
        } else {
            four_letter::refusal(word)
        };
        let _ = wr.write_all(text.as_bytes()).await;
        let _ = wr.shutdown().await;
        return None;
    }
    let req = read_connect_request(&mut reader, peer).await?;
    let writer = start_writer(wr, conn, ctx);
    let (done_tx, done_rx) = oneshot::channel();
    let connect = CoreMsg::Connect {
        conn,
        peer,
        out: writer.out,
        req,
        done: done_tx,
    };
    if ctx.core.send(connect).await.is_err() {
        return None;
    }
    match done_rx.await {
        Ok(ConnectOutcome::Established { .. }) => Some(Established {
            conn: reader,
            budget: writer.budget,
            window: writer.window,
            closed: writer.closed,
        }),
        _ => {
            // The refusal (if any) is queued with a Close behind it.
            let _ = writer.task.await;
            None
        }
    }
}

/// A connection's writer task, and what the reader and the core share with it.
struct StartedWriter {
    task: tokio::task::JoinHandle<()>,
    /// The core's end of the reply queue.
    out: OutboundTx,
    budget: Arc<ReplyBudget>,
    window: Arc<RequestWindow>,
    closed: oneshot::Receiver<()>,
}

fn start_writer<W>(wr: W, conn: ConnId, ctx: &ClientContext) -> StartedWriter
where
    W: AsyncWrite + Unpin + Send + 'static,
{
    let limits = &ctx.limits;
    let budget = Arc::new(ReplyBudget::new(
        limits.max_unread_reply_bytes,
        ctx.metrics.client_reply_queue_bytes.clone(),
    ));
    let window = Arc::new(RequestWindow::new(
        limits.max_outstanding_requests,
        limits.max_unread_reply_bytes,
    ));
    let (out, out_rx) = outbound_queue(budget.clone());
    let (closed_tx, closed) = oneshot::channel::<()>();
    let task = tokio::spawn(write_loop(
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
    StartedWriter {
        task,
        out,
        budget,
        window,
        closed,
    }
}

/// The first frame, which must be a ConnectRequest; `None` (logged) when it is not there.
async fn read_connect_request<R: AsyncRead + Unpin>(
    reader: &mut Connection<R>,
    peer: SocketAddr,
) -> Option<ConnectRequest> {
    let first = match reader.read_frame().await {
        Ok(Some(frame)) => frame,
        Ok(None) => return None,
        Err(e) => {
            tracing::warn!(%peer, error = %e, "bad frame; closing the connection");
            return None;
        }
    };
    match decode_connect_request(&first) {
        Ok(req) => Some(req),
        Err(e) => {
            tracing::warn!(%peer, error = %e, "malformed connect request; closing the connection");
            None
        }
    }
}

/// Hands requests to the core until the client goes away or breaks the protocol, or the writer
/// stops. Frames already read go to the core before the socket is read again, as long as the
/// connection has room.
async fn serve_requests<R: AsyncRead + Unpin>(
    mut c: Established<R>,
    peer: SocketAddr,
    conn: ConnId,
    ctx: &ClientContext,
) {
    let max_unread = ctx.limits.max_unread_reply_bytes;
    loop {
        if !c.has_room(max_unread) && !pause_until_room(&mut c, peer, ctx).await {
            break;
        }
        match c.conn.buffered_frame() {
            Ok(Some(frame)) => {
                c.window.sent(frame.len());
                match send_request_to_core(ctx, conn, peer, &frame).await {
                    Ok(Flow::Continue) => continue,
                    // The core answers and closes; nothing after the refused auth is read.
                    Ok(Flow::Stop) => break,
                    Err(e) => {
                        tracing::warn!(%peer, reason = %e, "closing the connection");
                        break;
                    }
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(%peer, error = %e, "bad frame; closing the connection");
                break;
            }
        }
        tokio::select! {
            more = c.conn.read_more() => if !more {
                break;
            },
            _ = &mut c.closed => break,
        }
    }
    finish(ctx, conn).await
}

/// Back-pressure: the socket is not read until the client has read its replies; its own
/// writes then block in TCP. False when the writer stopped meanwhile.
async fn pause_until_room<R>(
    c: &mut Established<R>,
    peer: SocketAddr,
    ctx: &ClientContext,
) -> bool {
    let max_unread = ctx.limits.max_unread_reply_bytes;
    ctx.metrics.client_read_pauses.inc();
    ctx.metrics.client_paused_connections.inc();
    if let Some(suppressed) = super::PAUSE_LOG.admit() {
        tracing::info!(
            %peer, in_flight = c.window.in_flight(), unread_reply_bytes = c.budget.queued(),
            similar_lines_suppressed = suppressed,
            "a client has too much outstanding (--max-outstanding-requests, --max-unread-reply-bytes); not reading from it until it reads its replies"
        );
    }
    let mut writer_alive = true;
    while !c.has_room(max_unread) {
        tokio::select! {
            _ = c.window.progressed() => {}
            _ = &mut c.closed => {
                writer_alive = false;
                break;
            }
        }
    }
    ctx.metrics.client_paused_connections.dec();
    writer_alive
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

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncWriteExt, duplex};

    use super::*;

    fn frame(payload: &[u8]) -> Vec<u8> {
        let mut bytes = (payload.len() as u32).to_be_bytes().to_vec();
        bytes.extend_from_slice(payload);
        bytes
    }

    /// A reader fed `bytes` one at a time, the way a slow network splits them.
    fn trickled(bytes: Vec<u8>) -> tokio::io::DuplexStream {
        let (mut tx, rx) = duplex(64);
        tokio::spawn(async move {
            for b in bytes {
                tx.write_all(&[b]).await.expect("reader open");
                tokio::task::yield_now().await;
            }
        });
        rx
    }

    #[tokio::test]
    async fn frames_split_across_reads_come_out_whole_and_in_order() {
        let mut bytes = frame(b"first");
        bytes.extend(frame(b""));
        bytes.extend(frame(b"third"));
        let mut c = Connection::new(trickled(bytes), 1024);
        assert_eq!(c.read_frame().await, Ok(Some(Bytes::from_static(b"first"))));
        assert_eq!(c.read_frame().await, Ok(Some(Bytes::new())));
        assert_eq!(c.read_frame().await, Ok(Some(Bytes::from_static(b"third"))));
        assert_eq!(c.read_frame().await, Ok(None), "the client went away");
    }

    #[tokio::test]
    async fn the_first_four_bytes_are_looked_at_not_taken() {
        let mut c = Connection::new(trickled(b"ruok".to_vec()), 1024);
        assert_eq!(c.peek_first_four().await, Some(*b"ruok"));
        let mut c = Connection::new(trickled(frame(b"hello")), 1024);
        assert_eq!(c.peek_first_four().await, Some([0, 0, 0, 5]));
        assert_eq!(c.read_frame().await, Ok(Some(Bytes::from_static(b"hello"))));
        let mut c = Connection::new(trickled(b"ru".to_vec()), 1024);
        assert_eq!(c.peek_first_four().await, None);
    }

    #[tokio::test]
    async fn a_client_gone_mid_frame_leaves_no_frame_and_an_oversized_one_is_an_error() {
        let mut cut = frame(b"hello");
        cut.truncate(6);
        let mut c = Connection::new(trickled(cut), 1024);
        assert_eq!(c.read_frame().await, Ok(None));
        let mut c = Connection::new(trickled(frame(&[0; 100])), 99);
        assert_eq!(
            c.read_frame().await,
            Err(FrameError::TooLarge { len: 100, max: 99 })
        );
    }

    #[tokio::test]
    async fn buffered_frames_come_without_reading_the_socket() {
        let mut bytes = frame(b"a");
        bytes.extend(frame(b"b"));
        // The writer half stays open: a read would wait forever.
        let (mut tx, rx) = duplex(64);
        tx.write_all(&bytes).await.expect("open");
        let mut c = Connection::new(rx, 1024);
        assert!(c.read_more().await);
        assert_eq!(c.buffered_frame(), Ok(Some(Bytes::from_static(b"a"))));
        assert_eq!(c.buffered_frame(), Ok(Some(Bytes::from_static(b"b"))));
        assert_eq!(c.buffered_frame(), Ok(None));
    }
}
