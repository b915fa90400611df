//! vLLM's error bodies: `{"error": {"message", "type", "param", "code"}}` with the status
//! code, plus the two special shapes (401 `{"error": "Unauthorized"}` and FastAPI's
//! `{"detail": ...}` for unknown routes). vLLM: `serve/exception_handling/error_response.py`
//! (`create_error_response`) and `serve/engine/protocol.py` (`ErrorResponse`, `ErrorInfo`).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// vLLM: `ErrorInfo`.
#[derive(Clone, Debug, Serialize)]
pub struct ErrorInfo {
    pub message: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub param: Option<String>,
    pub code: u16,
}

#[derive(Clone, Debug, Serialize)]
struct ErrorBody<'a> {
    error: &'a ErrorInfo,
}

/// An error response in vLLM's shape.
#[derive(Clone, Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub info: ErrorInfo,
}

impl ApiError {
    fn new(status: StatusCode, kind: &str, message: String, param: Option<&str>) -> Self {
        ApiError {
            status,
            info: ErrorInfo {
                message,
                kind: kind.to_string(),
                param: param.map(str::to_string),
                code: status.as_u16(),
            },
        }
    }

    /// `VLLMValidationError` → 400 `BadRequestError` with its parameter.
    pub fn bad_request(message: impl Into<String>, param: Option<&str>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "BadRequestError",
            message.into(),
            param,
        )
    }

    /// FastAPI's `RequestValidationError` → 400 typed "Bad Request" (the status phrase).
    /// vLLM: `handlers/validation.py` (`validation_exception_handler`).
    pub fn validation(message: impl Into<String>, param: Option<&str>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "Bad Request",
            message.into(),
            param,
        )
    }

    /// Unknown model → 404 `NotFoundError`. vLLM: `OpenAIServing._check_model`.
    pub fn model_not_found(model: &str, served: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "NotFoundError",
            format!("The model `{model}` does not exist. Valid aliases: {served}."),
            Some("model"),
        )
    }

    /// `GracefulHTTPError` (admission control) → 503 typed by the status phrase.
    /// vLLM: `QueueOverflowError`, `MaxQueuedTokensError` in `vllm/exceptions.py`.
    pub fn unavailable(message: &str) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "Service Unavailable",
            message.to_string(),
            None,
        )
    }

    /// An `HTTPException` → its status, typed by the status phrase.
    /// vLLM: `handlers/http.py` (`http_exception_handler`).
    fn http(status: StatusCode, phrase: &str, message: String) -> Self {
        Self::new(status, phrase, message, None)
    }

    /// A `VLLMServerError` → 500 `InternalServerError`.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalServerError",
            message.into(),
            None,
        )
    }

    /// `EngineDeadError` → 500 with its client message. vLLM: `create_error_response`.
    pub fn engine_dead() -> Self {
        Self::internal("The server had an error while processing your request.")
    }

    /// The JSON body (also sent as an SSE `data:` frame when a stream fails mid-way).
    pub fn body_json(&self) -> String {
        serde_json::to_string(&ErrorBody { error: &self.info }).unwrap_or_else(|_| "{}".into())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        json_response(self.status, self.body_json())
    }
}

/// A JSON body with `application/json`, as Starlette's `JSONResponse` sends it.
pub fn json_response(status: StatusCode, body: String) -> Response {
    let mut r = (status, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// 401 from `AuthenticationMiddleware`: `{"error": "Unauthorized"}`.
pub fn unauthorized() -> Response {
    json_response(
        StatusCode::UNAUTHORIZED,
        r#"{"error":"Unauthorized"}"#.to_string(),
    )
}

/// FastAPI's 404 / 405 bodies.
pub fn detail(status: StatusCode, detail: &str) -> Response {
    json_response(status, serde_json::json!({ "detail": detail }).to_string())
}

/// A body that is not `application/json`: vLLM's `validate_json_request` raises a
/// `RequestValidationError` with this one error, rendered by `validation_exception_handler`.
pub fn unsupported_media_type() -> ApiError {
    ApiError::validation(
        "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed",
        None,
    )
}

/// A body over `--max-request-body-bytes` (the twin's bound; uvicorn has none): 413, typed by
/// the status phrase as vLLM types an `HTTPException`.
pub fn body_too_large() -> ApiError {
    ApiError::http(
        StatusCode::PAYLOAD_TOO_LARGE,
        "Request Entity Too Large",
        "The request body is larger than the server accepts (--max-request-body-bytes).".into(),
    )
}

/// Render a serde error like pydantic's one-error summary: `1 validation error:\n  {...}`.
/// The `param` is the dotted location (`body` for unparsable JSON).
pub fn from_serde(e: &serde_json::Error, raw_is_json: bool) -> ApiError {
    let (kind, msg) = if raw_is_json {
        ("value_error", e.to_string())
    } else {
        ("json_invalid", "JSON decode error".to_string())
    };
    let loc = "body";
    let message = format!(
        "1 validation error:\n  {{'type': '{kind}', 'loc': '{loc}', 'msg': {}, 'ctx': {{'error': {}}}}}",
        py_repr(&msg),
        py_repr(&e.to_string())
    );
    ApiError::validation(message, Some(loc))
}

/// Python's `repr()` of a str (single quotes unless the text has one).
fn py_repr(s: &str) -> String {
    if s.contains('\'') && !s.contains('"') {
        format!("\"{s}\"")
    } else {
        format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_json_has_vllm_shape() {
        let e = ApiError::bad_request("x", Some("max_tokens"));
        assert_eq!(
            e.body_json(),
            r#"{"error":{"message":"x","type":"BadRequestError","param":"max_tokens","code":400}}"#
        );
    }
}
