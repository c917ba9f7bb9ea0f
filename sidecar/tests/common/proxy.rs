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
use tokio::sync::watch;

/// ZooKeeper opcodes that create a node (create, create2, createContainer, createTTL).
const CREATE_OPCODES: [i32; 4] = [1, 15, 19, 21];

/// The proxy; it runs until the test process ends.
pub struct CutProxy {
    pub addr: SocketAddr,
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
        let cuts = Arc::new(AtomicUsize::new(0));
        let (blocked, blocked_rx) = watch::channel(false);
        let (m, c) = (marker.clone(), cuts.clone());
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
                tokio::spawn(relay(client, server, m.clone(), c.clone(), blocked));
            }
        });
        Self {
            addr,
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

/// The xid of a create request whose path contains `marker`.
fn targeted_create(frame: &[u8], marker: &str) -> Option<i32> {
    let xid = be_i32(frame, 0)?;
    let opcode = be_i32(frame, 4)?;
    let path_len = usize::try_from(be_i32(frame, 8)?).ok()?;
    let path = std::str::from_utf8(frame.get(12..12 + path_len)?).ok()?;
    (CREATE_OPCODES.contains(&opcode) && path.contains(marker)).then_some(xid)
}

async fn relay(
    client: TcpStream,
    server: TcpStream,
    marker: Arc<Mutex<Option<String>>>,
    cuts: Arc<AtomicUsize>,
    mut blocked: watch::Receiver<bool>,
) {
    let (client_rx, client_tx) = client.into_split();
    let (server_rx, server_tx) = server.into_split();
    let target = Arc::new(Mutex::new(None));
    // Whichever side ends first ends the connection; dropping the halves closes both sockets.
    tokio::select! {
        _ = upstream(client_rx, server_tx, marker, target.clone()) => {}
        _ = downstream(server_rx, client_tx, target, cuts) => {}
        _ = blocked.wait_for(|b| *b) => {}
    }
}

/// Client to server: notes the xid of the targeted create.
async fn upstream(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    marker: Arc<Mutex<Option<String>>>,
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
