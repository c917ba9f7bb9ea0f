//! JSON answers, the error envelope `{"error": {"code", "message"}}`, and server-sent event
//! streams.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Frame, SizeHint};
use hyper::{Response, StatusCode, header};
use tokio::sync::mpsc;

use crate::leases::LeaseError;
use crate::recipe::RecipeError;

/// The body of every answer: whole (JSON, text), or a stream of server-sent events fed by a
/// task through a small channel.
///
/// A stream's receiver lives inside hyper's connection: when the client goes away (its socket
/// closes, or it crashes), hyper ends the connection and drops the body, the channel closes,
/// and the feeding task sees `Sender::closed` resolve at once. That drop, not a timer, is what
/// ends a stream hold.
#[derive(Debug)]
pub struct Body(Kind);

#[derive(Debug)]
enum Kind {
    Whole(Option<Bytes>),
    Stream(mpsc::Receiver<Bytes>),
}

impl Body {
    /// A body sent at once, with its length.
    pub fn whole(bytes: impl Into<Bytes>) -> Self {
        Self(Kind::Whole(Some(bytes.into())))
    }

    /// A body that sends what `rx` yields, as it comes, and ends when every sender is gone.
    pub fn stream(rx: mpsc::Receiver<Bytes>) -> Self {
        Self(Kind::Stream(rx))
    }
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match &mut self.get_mut().0 {
            Kind::Whole(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Kind::Stream(rx) => rx
                .poll_recv(cx)
                .map(|chunk| chunk.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.0, Kind::Whole(None))
    }

    fn size_hint(&self) -> SizeHint {
        match &self.0 {
            Kind::Whole(Some(bytes)) => SizeHint::with_exact(bytes.len() as u64),
            Kind::Whole(None) => SizeHint::with_exact(0),
            Kind::Stream(_) => SizeHint::default(),
        }
    }
}

/// An error answer: status, a stable machine-readable code, and a message for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// For 405: the methods the path does take.
    pub allow: Option<&'static str>,
}

impl ApiError {
    /// An error with `status` and `code`.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            allow: None,
        }
    }

    /// 400 with `code`.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// 404 for a path no route matches.
    pub fn no_route(path: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("no such endpoint: {path}"),
        )
    }

    /// 405 naming the methods `path` takes.
    pub fn method_not_allowed(method: &hyper::Method, path: &str, allow: &'static str) -> Self {
        Self {
            allow: Some(allow),
            ..Self::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                format!("{path} does not take {method}; it takes {allow}"),
            )
        }
    }

    /// Renders the envelope.
    pub fn into_response(self) -> Response<Body> {
        let body = serde_json::json!({ "error": { "code": self.code, "message": self.message } });
        let mut response = json(self.status, &body);
        if let Some(allow) = self.allow
            && let Ok(value) = header::HeaderValue::from_str(allow)
        {
            response.headers_mut().insert(header::ALLOW, value);
        }
        response
    }
}

impl From<RecipeError> for ApiError {
    fn from(e: RecipeError) -> Self {
        let message = e.to_string();
        match e {
            RecipeError::Suspended => {
                Self::new(StatusCode::SERVICE_UNAVAILABLE, "SessionSuspended", message)
            }
            RecipeError::SessionLost => {
                Self::new(StatusCode::SERVICE_UNAVAILABLE, "SessionLost", message)
            }
            RecipeError::ShuttingDown => {
                Self::new(StatusCode::SERVICE_UNAVAILABLE, "ShuttingDown", message)
            }
            RecipeError::NodeVanished(_) => {
                Self::new(StatusCode::CONFLICT, "NodeVanished", message)
            }
            RecipeError::ZooKeeper { .. } => {
                Self::new(StatusCode::BAD_GATEWAY, "EnsembleError", message)
            }
        }
    }
}

impl From<LeaseError> for ApiError {
    fn from(e: LeaseError) -> Self {
        let message = e.to_string();
        let code = match e {
            LeaseError::AlreadyHeld { .. } => "AlreadyHeld",
            LeaseError::AcquireInProgress { .. } => "AcquireInProgress",
            LeaseError::NotGranted { .. } => "NotGranted",
            LeaseError::NotHeld { .. } => "NotHeld",
            LeaseError::StaleToken { .. } => "StaleToken",
            LeaseError::Lost { .. } => "LockLost",
            LeaseError::StreamHold { .. } => "StreamHold",
            LeaseError::PermitsMismatch { .. } => "PermitsMismatch",
            LeaseError::AppUnhealthy => {
                return Self::new(StatusCode::SERVICE_UNAVAILABLE, "AppUnhealthy", message);
            }
            LeaseError::Recipe(e) => return e.into(),
        };
        Self::new(StatusCode::CONFLICT, code, message)
    }
}

/// A JSON answer.
pub fn json(status: StatusCode, body: &impl serde::Serialize) -> Response<Body> {
    // Our own types always serialize; an empty body beats a panic if one ever does not.
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut response = Response::new(Body::whole(bytes));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

/// A plain-text answer with `content_type`.
pub fn text(status: StatusCode, content_type: &'static str, body: String) -> Response<Body> {
    let mut response = Response::new(Body::whole(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    response
}

/// A `text/event-stream` answer whose events come from `rx`.
pub fn event_stream(rx: mpsc::Receiver<Bytes>) -> Response<Body> {
    let mut response = Response::new(Body::stream(rx));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-cache"),
    );
    response
}
