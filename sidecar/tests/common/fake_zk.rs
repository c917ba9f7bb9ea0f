//! A minimal ZooKeeper server that records the auth packets clients send: it answers the
//! connect handshake, pings and auth (accepting or refusing by token), and nothing else. For
//! testing what the sidecar sends before any ensemble understands the `k8s` scheme.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// One auth packet as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthSeen {
    /// Which TCP connection (1, 2, ...) it came on.
    pub connection: usize,
    pub scheme: String,
    pub auth: Vec<u8>,
}

/// The server; it runs until the test process ends.
pub struct FakeZk {
    pub addr: SocketAddr,
    auths: tokio::sync::Mutex<mpsc::UnboundedReceiver<AuthSeen>>,
    refused: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl FakeZk {
    /// Listens on a free loopback port.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let (tx, rx) = mpsc::unbounded_channel();
        let refused: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let refusing = refused.clone();
        tokio::spawn(async move {
            let mut connection = 0;
            while let Ok((stream, _)) = listener.accept().await {
                connection += 1;
                tokio::spawn(serve(stream, connection, tx.clone(), refusing.clone()));
            }
        });
        Self {
            addr,
            auths: tokio::sync::Mutex::new(rx),
            refused,
        }
    }

    /// Answers auth with `token` by AuthFailed (and closes the connection), as an ensemble
    /// whose TokenReview rejects it would.
    pub fn refuse(&self, token: &[u8]) {
        self.refused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(token.to_vec());
    }

    /// The next auth packet received (waits up to `bound`).
    pub async fn next_auth(&self, bound: std::time::Duration) -> AuthSeen {
        let mut rx = self.auths.lock().await;
        tokio::time::timeout(bound, rx.recv())
            .await
            .expect("an auth packet in time")
            .expect("the server runs")
    }
}

async fn read_frame(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let len = stream.read_i32().await.ok()?;
    let mut body = vec![0; usize::try_from(len).ok()?];
    stream.read_exact(&mut body).await.ok()?;
    Some(body)
}

async fn write_frame(stream: &mut TcpStream, body: &[u8]) -> Option<()> {
    let len = i32::try_from(body.len()).ok()?;
    stream.write_i32(len).await.ok()?;
    stream.write_all(body).await.ok()
}

fn reply_header(xid: i32, err: i32) -> Vec<u8> {
    let mut out = xid.to_be_bytes().to_vec();
    out.extend_from_slice(&0i64.to_be_bytes());
    out.extend_from_slice(&err.to_be_bytes());
    out
}

fn take<const N: usize>(buf: &mut &[u8]) -> Option<[u8; N]> {
    let (head, rest) = buf.split_at_checked(N)?;
    *buf = rest;
    head.try_into().ok()
}

fn take_bytes(buf: &mut &[u8]) -> Option<Vec<u8>> {
    let len = i32::from_be_bytes(take::<4>(buf)?);
    let len = usize::try_from(len).unwrap_or(0);
    let (head, rest) = buf.split_at_checked(len)?;
    *buf = rest;
    Some(head.to_vec())
}

async fn serve(
    mut stream: TcpStream,
    connection: usize,
    auths: mpsc::UnboundedSender<AuthSeen>,
    refused: Arc<Mutex<Vec<Vec<u8>>>>,
) -> Option<()> {
    // ConnectRequest: protocolVersion, lastZxidSeen, timeOut, sessionId, passwd, readOnly.
    let connect = read_frame(&mut stream).await?;
    let mut buf = connect.as_slice();
    take::<4>(&mut buf)?;
    take::<8>(&mut buf)?;
    let timeout = take::<4>(&mut buf)?;
    let session = i64::from_be_bytes(take::<8>(&mut buf)?);
    let session = if session == 0 {
        0x5eed_0000 + connection as i64
    } else {
        session
    };
    let mut answer = 0i32.to_be_bytes().to_vec();
    answer.extend_from_slice(&timeout);
    answer.extend_from_slice(&session.to_be_bytes());
    answer.extend_from_slice(&16i32.to_be_bytes());
    answer.extend_from_slice(&[7u8; 16]);
    answer.push(0);
    write_frame(&mut stream, &answer).await?;
    loop {
        let request = read_frame(&mut stream).await?;
        let mut buf = request.as_slice();
        let xid = i32::from_be_bytes(take::<4>(&mut buf)?);
        let opcode = i32::from_be_bytes(take::<4>(&mut buf)?);
        match opcode {
            100 => {
                take::<4>(&mut buf)?;
                let scheme = String::from_utf8(take_bytes(&mut buf)?).ok()?;
                let auth = take_bytes(&mut buf)?;
                let refuse = refused
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .contains(&auth);
                let _ = auths.send(AuthSeen {
                    connection,
                    scheme,
                    auth,
                });
                if refuse {
                    // AuthFailed, then the connection closes, as ZooKeeper does.
                    write_frame(&mut stream, &reply_header(xid, -115)).await?;
                    return None;
                }
                write_frame(&mut stream, &reply_header(xid, 0)).await?;
            }
            // closeSession: answer and end.
            -11 => {
                write_frame(&mut stream, &reply_header(xid, 0)).await?;
                return None;
            }
            // Pings and anything else: an empty OK (the sidecar makes no other calls here).
            _ => write_frame(&mut stream, &reply_header(xid, 0)).await?,
        }
    }
}
