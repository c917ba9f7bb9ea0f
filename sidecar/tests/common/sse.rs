//! A server-sent-event client for the tests: one request on its own connection, then the
//! events as they arrive. Dropping it closes the connection, as an app that goes away would.

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

use super::BOUND;

/// One item of the stream.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// `event: NAME` with its `data:` as JSON.
    Event { name: String, data: Value },
    /// A `: text` comment (keep-alives, lag notices).
    Comment(String),
}

/// An open event stream.
pub struct EventStream {
    body: Incoming,
    buffer: Vec<u8>,
    connection: JoinHandle<()>,
    /// The request, to hold each event to the API's table.
    request: (String, String),
}

impl Drop for EventStream {
    fn drop(&mut self) {
        // The connection task owns the socket: ending it closes the socket.
        self.connection.abort();
    }
}

/// The status and body of a request that did not become a stream.
#[derive(Debug)]
pub struct Refused {
    pub status: u16,
    pub body: Value,
}

impl EventStream {
    /// `METHOD path` on `addr`; the stream if the answer is a 200 `text/event-stream`, else
    /// the answer.
    pub async fn open(addr: SocketAddr, method: &str, path: &str) -> Result<Self, Refused> {
        let opened = async {
            let tcp = TcpStream::connect(addr)
                .await
                .expect("connect to the sidecar");
            let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
                .await
                .expect("HTTP handshake");
            let connection = tokio::spawn(async move {
                let _ = connection.await;
            });
            let request = Request::builder()
                .method(Method::from_bytes(method.as_bytes()).expect("a method"))
                .uri(path)
                .header("host", addr.to_string())
                .body(Empty::<Bytes>::new())
                .expect("a request");
            let response = sender.send_request(request).await.expect("an answer");
            (response, connection)
        };
        let (response, connection) = tokio::time::timeout(BOUND, opened)
            .await
            .unwrap_or_else(|_| panic!("no answer to {method} {path} within {BOUND:?}"));
        let status = response.status().as_u16();
        let is_stream = response
            .headers()
            .get("content-type")
            .is_some_and(|v| v.as_bytes() == b"text/event-stream");
        if status == 200 && is_stream {
            return Ok(Self {
                body: response.into_body(),
                buffer: Vec::new(),
                connection,
                request: (method.to_owned(), path.to_owned()),
            });
        }
        let bytes = response
            .into_body()
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        connection.abort();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        super::check_contract(method, path, status, !body.is_null(), &body);
        Err(Refused { status, body })
    }

    /// The next item, or `None` when the stream ended; fails the test past [`BOUND`].
    pub async fn next(&mut self) -> Option<Item> {
        loop {
            if let Some(end) = find_blank_line(&self.buffer) {
                let block: Vec<u8> = self.buffer.drain(..end + 2).collect();
                let item = parse_block(&String::from_utf8_lossy(&block));
                if let Item::Event { name, data } = &item {
                    super::check_event(&self.request.0, &self.request.1, name, data);
                }
                return Some(item);
            }
            let frame = tokio::time::timeout(BOUND, self.body.frame())
                .await
                .unwrap_or_else(|_| panic!("no event within {BOUND:?}"));
            match frame {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buffer.extend_from_slice(&data);
                    }
                }
                Some(Err(_)) | None => return None,
            }
        }
    }

    /// The next event (skipping comments), or `None` when the stream ended.
    pub async fn next_event(&mut self) -> Option<(String, Value)> {
        loop {
            match self.next().await? {
                Item::Event { name, data } => return Some((name, data)),
                Item::Comment(_) => {}
            }
        }
    }

    /// Skips events until one named `name` whose data satisfies `matches`; fails the test if
    /// the stream ends first or none comes within two minutes (the per-read limit alone never
    /// fires on a stream whose keep-alives keep coming).
    pub async fn wait_for(&mut self, name: &str, matches: impl Fn(&Value) -> bool) -> Value {
        const WITHIN: std::time::Duration = std::time::Duration::from_secs(120);
        let mut seen = Vec::new();
        let found = tokio::time::timeout(WITHIN, async {
            loop {
                match self.next_event().await {
                    Some((n, data)) if n == name && matches(&data) => return Some(data),
                    Some(other) => seen.push(other),
                    None => return None,
                }
            }
        })
        .await;
        match found {
            Ok(Some(data)) => data,
            Ok(None) => panic!("the stream ended before a matching {name:?} event; saw {seen:?}"),
            Err(_) => panic!("no matching {name:?} event within {WITHIN:?}; saw {seen:?}"),
        }
    }
}

fn find_blank_line(buffer: &[u8]) -> Option<usize> {
    buffer.windows(2).position(|w| w == b"\n\n")
}

fn parse_block(block: &str) -> Item {
    let mut name = String::from("message");
    let mut data = String::new();
    for line in block.lines() {
        if let Some(comment) = line.strip_prefix(':') {
            return Item::Comment(comment.trim().to_owned());
        } else if let Some(n) = line.strip_prefix("event:") {
            name = n.trim().to_owned();
        } else if let Some(d) = line.strip_prefix("data:") {
            data.push_str(d.trim());
        }
    }
    let data = serde_json::from_str(&data).unwrap_or(Value::String(data));
    Item::Event { name, data }
}
