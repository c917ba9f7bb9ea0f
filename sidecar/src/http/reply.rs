//! JSON answers, the error envelope `{"error": {"code", "message"}}`, and server-sent event
//! streams.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Frame, SizeHint};
use hyper::{Response, StatusCode, header};
use tokio::sync::mpsc;

use super::error_code::ErrorCode;
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

/// An error answer: status, a stable machine-readable code ([`ErrorCode`]), and a message for
/// people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// For 405: the methods the path does take.
    pub allow: Option<&'static str>,
}

impl ApiError {
    /// An error with `code`, and the status that code has.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            status: code.status(),
            code: code.as_str(),
            message: message.into(),
            allow: None,
        }
    }

    /// A 400 error with `code` (whose status is 400).
    pub fn bad_request(code: ErrorCode, message: impl Into<String>) -> Self {
        debug_assert_eq!(code.status(), StatusCode::BAD_REQUEST, "{}", code.as_str());
        Self::new(code, message)
    }

    /// 404 for a path no route matches.
    pub fn no_route(path: &str) -> Self {
        Self::new(ErrorCode::NotFound, format!("no such endpoint: {path}"))
    }

    /// 405 naming the methods `path` takes.
    pub fn method_not_allowed(method: &hyper::Method, path: &str, allow: &'static str) -> Self {
        Self {
            allow: Some(allow),
            ..Self::new(
                ErrorCode::MethodNotAllowed,
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
            RecipeError::Suspended => Self::new(ErrorCode::SessionSuspended, message),
            RecipeError::SessionLost => Self::new(ErrorCode::SessionLost, message),
            RecipeError::ShuttingDown => Self::new(ErrorCode::ShuttingDown, message),
            RecipeError::NodeVanished(_) => Self::new(ErrorCode::NodeVanished, message),
            RecipeError::ZooKeeper { .. } => Self::new(ErrorCode::EnsembleError, message),
        }
    }
}

impl From<LeaseError> for ApiError {
    fn from(e: LeaseError) -> Self {
        let message = e.to_string();
        let code = match e {
            LeaseError::AlreadyHeld { .. } => ErrorCode::AlreadyHeld,
            LeaseError::AcquireInProgress { .. } => ErrorCode::AcquireInProgress,
            LeaseError::NotGranted { .. } => ErrorCode::NotGranted,
            LeaseError::NotHeld { .. } => ErrorCode::NotHeld,
            LeaseError::StaleToken { .. } => ErrorCode::StaleToken,
            LeaseError::Lost { .. } => ErrorCode::LockLost,
            LeaseError::StreamHold { .. } => ErrorCode::StreamHold,
            LeaseError::PermitsMismatch { .. } => ErrorCode::PermitsMismatch,
            LeaseError::AppUnhealthy => {
                return Self::new(ErrorCode::AppUnhealthy, message);
            }
            LeaseError::Recipe(e) => return e.into(),
        };
        Self::new(code, message)
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
