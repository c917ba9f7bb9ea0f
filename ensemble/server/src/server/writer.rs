//! A connection's writer: drains the core's frames to the socket in order, coalescing small
//! ones into one write, and reports progress to the two budgets (reply bytes to the core,
//! requests in flight to the reader).

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;

use super::ClientContext;
use super::window::RequestWindow;
use crate::core::{ConnId, CoreMsg, Outbound, OutboundRx, ReplyBudget};

/// Small frames are gathered up to this size before a write.
const MAX_BATCH: usize = 256 * 1024;
/// A frame this large is written from its own buffer rather than copied into the batch.
const LARGE_FRAME: usize = 64 * 1024;
/// A batch buffer larger than this is freed once written if nothing else is queued: an idle
/// session should cost next to nothing (10,000 per member are expected), while a busy one
/// keeps its buffer rather than allocating one per flush.
const KEEP_BATCH: usize = 4 * 1024;

/// What the writer needs besides the socket.
pub(super) struct WriterParts {
    pub rx: OutboundRx,
    pub budget: Arc<ReplyBudget>,
    pub window: Arc<RequestWindow>,
    pub conn: ConnId,
    pub ctx: ClientContext,
    /// Fired when the writer stops, so the reader stops too.
    pub closed: oneshot::Sender<()>,
}

/// Why writing stopped early.
#[derive(Debug, thiserror::Error)]
enum WriteError {
    #[error("no reply bytes were taken by the client for {0:?}")]
    Stalled(Duration),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Counts the frames of one write: bytes, and replies among them. The first frame of a
/// connection is the ConnectResponse; after it every frame but a notification (xid -1)
/// answers exactly one request.
#[derive(Default)]
struct Tally {
    bytes: usize,
    replies: usize,
}

fn is_notification(frame: &[u8]) -> bool {
    frame.get(4..8) == Some(&(-1i32).to_be_bytes()[..])
}

/// Writes until the core says Close, the socket fails, or the client stops reading for the
/// stall limit.
pub(super) async fn write_loop<W: AsyncWrite + Unpin>(mut wr: W, parts: WriterParts) {
    let WriterParts {
        mut rx,
        budget,
        window,
        conn,
        ctx,
        closed,
    } = parts;
    let stall = ctx.limits.write_stall_timeout;
    let mut connect_response_sent = false;
    let mut batch: Vec<u8> = Vec::new();
    let mut close = false;
    // A message taken to see whether the queue was empty, written in the next round.
    let mut waiting: Option<Outbound> = None;
    // The round being written; its bytes leave the budget once written, or when writing stops.
    let mut tally = Tally::default();
    'outer: loop {
        let first = match waiting.take() {
            Some(msg) => msg,
            None => match rx.recv().await {
                Some(msg) => msg,
                None => break,
            },
        };
        let mut next = Some(first);
        tally = Tally::default();
        while let Some(msg) = next.take() {
            let frame = match msg {
                Outbound::Frame(f) => f,
                Outbound::Close => {
                    close = true;
                    break;
                }
            };
            tally.bytes += frame.len();
            if connect_response_sent && !is_notification(&frame) {
                tally.replies += 1;
            }
            connect_response_sent = true;
            if frame.len() >= LARGE_FRAME {
                if let Err(e) = write_progressing(&mut wr, &batch, stall).await {
                    report(&ctx, conn, &e);
                    break 'outer;
                }
                batch.clear();
                if let Err(e) = write_progressing(&mut wr, &frame, stall).await {
                    report(&ctx, conn, &e);
                    break 'outer;
                }
            } else {
                batch.extend_from_slice(&frame);
            }
            if batch.len() < MAX_BATCH {
                next = rx.try_recv();
            }
        }
        if let Err(e) = write_progressing(&mut wr, &batch, stall).await {
            report(&ctx, conn, &e);
            break;
        }
        batch.clear();
        if batch.capacity() > KEEP_BATCH {
            // Freed only if nothing else is queued; what was is written in the next round.
            waiting = rx.try_recv();
            if waiting.is_none() {
                batch = Vec::new();
            }
        }
        if let Err(e) = flush_progressing(&mut wr, stall).await {
            report(&ctx, conn, &e);
            break;
        }
        if budget.written(std::mem::take(&mut tally.bytes)) {
            // The core holds this connection's requests until we caught up.
            let _ = ctx.core.send(CoreMsg::Drained { conn }).await;
        }
        window.answered(tally.replies);
        if close {
            break;
        }
    }
    // Whatever is still queued, or was in the round that failed, will never be written: take
    // it off the budget (and the member's total), and refuse anything the core sends from now
    // on.
    budget.written(tally.bytes);
    rx.close();
    while let Some(msg) = waiting.take().or_else(|| rx.try_recv()) {
        if let Outbound::Frame(f) = msg {
            budget.written(f.len());
        }
    }
    if close {
        let _ = tokio::time::timeout(stall, wr.shutdown()).await;
    }
    let _ = closed.send(());
}

fn report(ctx: &ClientContext, conn: ConnId, e: &WriteError) {
    match e {
        WriteError::Stalled(_) => {
            ctx.metrics.client_write_stalls.inc();
            if let Some(suppressed) = super::STALL_LOG.admit() {
                tracing::warn!(conn, error = %e, similar_lines_suppressed = suppressed, "closing a client connection whose client stopped reading");
            }
        }
        WriteError::Io(e) => tracing::debug!(conn, error = %e, "client connection write failed"),
    }
}

/// `write_all`, failing if the client takes no bytes at all for `stall`.
async fn write_progressing<W: AsyncWrite + Unpin>(
    wr: &mut W,
    mut buf: &[u8],
    stall: Duration,
) -> Result<(), WriteError> {
    while !buf.is_empty() {
        match tokio::time::timeout(stall, wr.write(buf)).await {
            Err(_) => return Err(WriteError::Stalled(stall)),
            Ok(Ok(0)) => return Err(std::io::Error::from(std::io::ErrorKind::WriteZero).into()),
            Ok(Ok(n)) => buf = &buf[n..],
            Ok(Err(e)) => return Err(e.into()),
        }
    }
    Ok(())
}

/// `flush` (TLS keeps records until flushed), with the same stall limit.
async fn flush_progressing<W: AsyncWrite + Unpin>(
    wr: &mut W,
    stall: Duration,
) -> Result<(), WriteError> {
    match tokio::time::timeout(stall, wr.flush()).await {
        Err(_) => Err(WriteError::Stalled(stall)),
        Ok(r) => Ok(r?),
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use bytes::Bytes;

    use super::*;
    use crate::core::outbound_queue;

    /// A socket that takes every write and fails every flush: the client went away.
    struct BrokenOnFlush;

    impl AsyncWrite for BrokenOnFlush {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// The writer looks for a queued message before it frees a large batch buffer. When the
    /// socket then fails, that message was never written: it must come off the budget (and the
    /// member's total) like everything else still queued.
    #[tokio::test]
    async fn what_a_failed_writer_held_comes_off_the_budget() {
        let (core, _core_rx) = tokio::sync::mpsc::channel(4);
        let budget = Arc::new(ReplyBudget::new(1 << 20, Default::default()));
        let (out, rx) = outbound_queue(budget.clone());
        // Frames copied into the batch until it is full; the last one waits for the next round,
        // and the writer takes it to see that the queue is not empty.
        let frame = Bytes::from(vec![0u8; LARGE_FRAME - 1]);
        for _ in 0..=MAX_BATCH / frame.len() + 1 {
            out.send(Outbound::Frame(frame.clone())).expect("queued");
        }
        let (closed, _) = oneshot::channel();
        let parts = WriterParts {
            rx,
            budget: budget.clone(),
            window: Arc::new(RequestWindow::new(10, 1 << 20)),
            conn: 7,
            ctx: super::super::test_context(core),
            closed,
        };
        write_loop(BrokenOnFlush, parts).await;
        assert_eq!(
            budget.queued(),
            0,
            "every queued byte was taken off the budget"
        );
    }

    #[test]
    fn notifications_are_told_apart_by_their_xid() {
        let mut frame = vec![0, 0, 0, 20];
        frame.extend_from_slice(&(-1i32).to_be_bytes());
        assert!(is_notification(&frame));
        frame[4..8].copy_from_slice(&(-2i32).to_be_bytes());
        assert!(!is_notification(&frame));
        assert!(!is_notification(&[0, 0, 0]));
    }
}
