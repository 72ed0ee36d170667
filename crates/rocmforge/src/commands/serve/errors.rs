//! Errors in OpenAI's shape, `{"error": {"message", "type", "param",
//! "code"}}`, with their HTTP status: clients (the `openai` package among
//! them) read the message from there, and a plain-text body would reach the
//! user as a parse failure instead.

use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's `type`: `invalid_request_error`, `authentication_error`,
    /// `not_found_error`, `server_error`.
    pub kind: &'static str,
    /// The request field at fault, when one is.
    pub param: Option<&'static str>,
    pub code: Option<&'static str>,
    /// Seconds to wait before trying again (`Retry-After`), for 503s.
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// A request the server cannot take as it is (400).
    pub fn invalid(message: impl Into<String>, param: Option<&'static str>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param,
            code: None,
            retry_after: None,
        }
    }

    pub fn model_not_found(requested: &str, served: &str) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!(
                "The model `{requested}` does not exist; this server serves `{served}`"
            ),
            kind: "invalid_request_error",
            param: Some("model"),
            code: Some("model_not_found"),
            retry_after: None,
        }
    }

    pub fn context_overflow(message: String) -> ApiError {
        ApiError {
            code: Some("context_length_exceeded"),
            ..ApiError::invalid(message, Some("messages"))
        }
    }

    pub fn unauthorized() -> ApiError {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            message: "Invalid or missing API key: send `Authorization: Bearer <key>`".into(),
            kind: "authentication_error",
            param: None,
            code: Some("invalid_api_key"),
            retry_after: None,
        }
    }

    pub fn not_found(path: &str) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("No route {path}"),
            kind: "not_found_error",
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// The model failed while answering (a backend error): the request was
    /// fine, the server was not.
    pub fn server(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
            kind: "server_error",
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// The JSON body of the error, also sent as an SSE event when a stream
    /// fails after its headers went out.
    pub fn body(&self) -> serde_json::Value {
        json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
    }

    /// The server is at one of its limits (open connections, bytes being
    /// received, the queue): 503, to be tried again in a second.
    pub fn busy(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: message.into(),
            kind: "server_error",
            param: None,
            code: Some("server_busy"),
            retry_after: Some(1),
        }
    }

    /// A request body not received within `limit`: 408.
    pub fn timeout(limit: std::time::Duration) -> ApiError {
        ApiError {
            status: StatusCode::REQUEST_TIMEOUT,
            message: format!(
                "The request body did not arrive within {} s",
                limit.as_secs()
            ),
            code: Some("request_timeout"),
            ..ApiError::invalid("", None)
        }
    }

    /// A body over [`super::routes::BODY_LIMIT`]: 413.
    pub fn too_large() -> ApiError {
        ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            message: format!(
                "Request body too large (the limit is {} bytes)",
                super::routes::BODY_LIMIT
            ),
            kind: "invalid_request_error",
            param: None,
            code: Some("request_too_large"),
            retry_after: None,
        }
    }

    /// A body that could not be read: over the size limit (413) or cut off.
    pub fn from_body_rejection(r: &BytesRejection) -> ApiError {
        let status = r.status();
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::too_large()
        } else {
            ApiError {
                status,
                ..ApiError::invalid(
                    format!("Cannot read the request body: {}", r.body_text()),
                    None,
                )
            }
        }
    }

    /// A body that is not JSON (malformed) or not the request's shape
    /// (wrong types, missing fields): both 400, told apart in the message.
    pub fn from_json(e: &serde_json::Error) -> ApiError {
        use serde_json::error::Category;
        let message = match e.classify() {
            Category::Data => format!("Invalid request: {e}"),
            Category::Syntax | Category::Eof | Category::Io => {
                format!("Malformed JSON in the request body: {e}")
            }
        };
        ApiError::invalid(message, None)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, Json(self.body())).into_response();
        if let Some(s) = self.retry_after {
            r.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, s.into());
        }
        r
    }
}
