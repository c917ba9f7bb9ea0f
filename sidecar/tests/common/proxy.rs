//! A TCP proxy in front of the ensemble that can lose one create's reply: the request reaches
//! the server and is applied, the reply is swallowed, and the connection is cut. The client
//! sees ConnectionLoss for a create that did happen — exactly the case the owner-id recovery
//! exists for. It can also partition the client from the ensemble ([`CutProxy::block`]).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};

/// ZooKeeper opcodes that create a node (create, create2, createContainer, createTTL).
const CREATE_OPCODES: [i32; 4] = [1, 15, 19, 21];

/// ZooKeeper's `exists` opcode.
pub const EXISTS: i32 = 3;

/// A request to hold ([`CutProxy::hold`]): the first one with one of `opcodes` on exactly `path`.
struct HoldSpec {
    opcodes: Vec<i32>,
    path: String,
    held: oneshot::Sender<()>,
    release: oneshot::Receiver<()>,
}

type Armed = Arc<Mutex<Option<HoldSpec>>>;

/// A request the proxy holds back (with everything after it on that connection).
pub struct Hold {
    held: oneshot::Receiver<()>,
    release: oneshot::Sender<()>,
}

impl Hold {
    /// Waits (bounded) until the request reached the proxy and is held.
    pub async fn held(&mut self) {
        tokio::time::timeout(super::BOUND, &mut self.held)
            .await
            .expect("the request to hold never came")
            .expect("the proxy went away");
    }

    /// Lets the request (and what queued behind it) through.
    pub fn release(self) {
        let _ = self.release.send(());
    }
}

/// The proxy; it runs until the test process ends.
pub struct CutProxy {
    pub addr: SocketAddr,
    hold: Armed,
    marker: Arc<Mutex<Option<String>>>,
    cuts: Arc<AtomicUsize>,
    blocked: watch::Sender<bool>,
}

impl CutProxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let addr = listener.local_addr().expect("proxy address");
        let marker = Arc::new(Mutex::new(None));
        let hold: Armed = Arc::new(Mutex::new(None));
        let cuts = Arc::new(AtomicUsize::new(0));
        let (blocked, blocked_rx) = watch::channel(false);
        let (m, c, h) = (marker.clone(), cuts.clone(), hold.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let mut blocked = blocked_rx.clone();
                if *blocked.borrow_and_update() {
                    // A partition: hold the connection silent until it lifts, then drop it.
                    tokio::spawn(async move {
                        let _ = blocked.wait_for(|b| !*b).await.is_ok();
                        drop(client);
                    });
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                tokio::spawn(relay(
                    client,
                    server,
                    m.clone(),
                    h.clone(),
                    c.clone(),
                    blocked,
                ));
            }
        });
        Self {
            addr,
            hold,
            marker,
            cuts,
            blocked,
        }
    }

    /// Partitions every client from the ensemble: open connections are cut, new ones hang.
    pub fn block(&self) {
        self.blocked.send_replace(true);
    }

    /// Lifts the partition.
    pub fn unblock(&self) {
        self.blocked.send_replace(false);
    }

    /// The next create whose path contains `marker` is applied but its reply is lost.
    pub fn arm(&self, marker: &str) {
        *self.marker.lock().unwrap_or_else(|p| p.into_inner()) = Some(marker.to_owned());
    }

    /// Holds the next request with one of `opcodes` on exactly `path` (and so everything the
    /// client sends after it on that connection) until [`Hold::release`].
    pub fn hold(&self, opcodes: &[i32], path: &str) -> Hold {
        let (held_tx, held) = oneshot::channel();
        let (release, release_rx) = oneshot::channel();
        *self.hold.lock().unwrap_or_else(|p| p.into_inner()) = Some(HoldSpec {
            opcodes: opcodes.to_vec(),
            path: path.to_owned(),
            held: held_tx,
            release: release_rx,
        });
        Hold { held, release }
    }

    /// How many connections were cut so far.
    pub fn cuts(&self) -> usize {
        self.cuts.load(Ordering::SeqCst)
    }
}

async fn read_frame(from: &mut OwnedReadHalf) -> Option<Vec<u8>> {
    let len = from.read_i32().await.ok()?;
    let mut frame = vec![0; usize::try_from(len).ok()?];
    from.read_exact(&mut frame).await.ok()?;
    Some(frame)
}

async fn write_frame(to: &mut OwnedWriteHalf, frame: &[u8]) -> Option<()> {
    let len = i32::try_from(frame.len()).ok()?;
    to.write_i32(len).await.ok()?;
    to.write_all(frame).await.ok()
}

fn be_i32(bytes: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

/// A request's (xid, opcode, path), for requests whose body starts with a path.
fn request_path(frame: &[u8]) -> Option<(i32, i32, &str)> {
    let xid = be_i32(frame, 0)?;
    let opcode = be_i32(frame, 4)?;
    let path_len = usize::try_from(be_i32(frame, 8)?).ok()?;
    let path = std::str::from_utf8(frame.get(12..12 + path_len)?).ok()?;
    Some((xid, opcode, path))
}

/// The xid of a create request whose path contains `marker`.
fn targeted_create(frame: &[u8], marker: &str) -> Option<i32> {
    let (xid, opcode, path) = request_path(frame)?;
    (CREATE_OPCODES.contains(&opcode) && path.contains(marker)).then_some(xid)
}

/// The armed hold, taken, if `frame` is the request it waits for.
fn take_hold(frame: &[u8], hold: &Armed) -> Option<HoldSpec> {
    let (_, opcode, path) = request_path(frame)?;
    let mut armed = hold.lock().unwrap_or_else(|p| p.into_inner());
    let matches = armed
        .as_ref()
        .is_some_and(|h| h.opcodes.contains(&opcode) && h.path == path);
    if matches { armed.take() } else { None }
}

async fn relay(
    client: TcpStream,
    server: TcpStream,
    marker: Arc<Mutex<Option<String>>>,
    hold: Armed,
    cuts: Arc<AtomicUsize>,
    mut blocked: watch::Receiver<bool>,
) {
    let (client_rx, client_tx) = client.into_split();
    let (server_rx, server_tx) = server.into_split();
    let target = Arc::new(Mutex::new(None));
    // Whichever side ends first ends the connection; dropping the halves closes both sockets.
    tokio::select! {
        _ = upstream(client_rx, server_tx, marker, hold, target.clone()) => {}
        _ = downstream(server_rx, client_tx, target, cuts) => {}
        _ = blocked.wait_for(|b| *b) => {}
    }
}

/// Client to server: notes the xid of the targeted create, and holds the held request.
async fn upstream(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    marker: Arc<Mutex<Option<String>>>,
    hold: Armed,
    target: Arc<Mutex<Option<i32>>>,
) -> Option<()> {
    // The first frame is the handshake (no request header).
    let connect = read_frame(&mut from).await?;
    write_frame(&mut to, &connect).await?;
    loop {
        let frame = read_frame(&mut from).await?;
        let armed = marker.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(m) = armed
            && let Some(xid) = targeted_create(&frame, &m)
        {
            *marker.lock().unwrap_or_else(|p| p.into_inner()) = None;
            *target.lock().unwrap_or_else(|p| p.into_inner()) = Some(xid);
        }
        if let Some(held) = take_hold(&frame, &hold) {
            let _ = held.held.send(());
            // Released, or the test dropped its handle: forward it either way.
            let _ = held.release.await;
        }
        write_frame(&mut to, &frame).await?;
    }
}

/// Server to client: swallows the targeted create's reply and ends the connection.
async fn downstream(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    target: Arc<Mutex<Option<i32>>>,
    cuts: Arc<AtomicUsize>,
) -> Option<()> {
    let connected = read_frame(&mut from).await?;
    write_frame(&mut to, &connected).await?;
    loop {
        let frame = read_frame(&mut from).await?;
        let xid = be_i32(&frame, 0)?;
        if *target.lock().unwrap_or_else(|p| p.into_inner()) == Some(xid) {
            // The server applied the create and answered: lose the answer, cut the line.
            cuts.fetch_add(1, Ordering::SeqCst);
            return None;
        }
        write_frame(&mut to, &frame).await?;
    }
}
