//! JSON answers and the error envelope `{"error": {"code", "message"}}`.

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Response, StatusCode, header};

use crate::leases::LeaseError;
use crate::recipe::RecipeError;

/// The body type of every answer.
pub type Body = Full<Bytes>;

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
            LeaseError::Recipe(e) => return e.into(),
        };
        Self::new(StatusCode::CONFLICT, code, message)
    }
}

/// A JSON answer.
pub fn json(status: StatusCode, body: &impl serde::Serialize) -> Response<Body> {
    // Our own types always serialize; an empty body beats a panic if one ever does not.
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut response = Response::new(Full::new(Bytes::from(bytes)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

/// A plain-text answer with `content_type`.
pub fn text(status: StatusCode, content_type: &'static str, body: String) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    response
}
