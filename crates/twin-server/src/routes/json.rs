//! Request extractors that answer every rejection in vLLM's error shape, never axum's plain
//! text: [`VllmJson`] (the body) and [`Arrival`] (when the request reached the server).

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use serde::de::DeserializeOwned;

use super::state::Shared;
use crate::errors::{self, ApiError};

/// A JSON body read the way vLLM's routes read one: the media type first
/// (`validate_json_request`), then the body within `--max-request-body-bytes`, then
/// pydantic-style validation. Each failure is a vLLM error body.
#[derive(Debug)]
pub struct VllmJson<T>(pub T);

impl<S, T> FromRequest<S> for VllmJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        // Checked before the body is read: a refused request costs no buffering.
        if !is_json_media_type(req.headers()) {
            return Err(errors::unsupported_media_type());
        }
        let body = Bytes::from_request(req, state)
            .await
            .map_err(body_rejection)?;
        parse_body(&body).map(VllmJson)
    }
}

/// vLLM: `validate_json_request` (the media type before any `;`, lower-cased, must be exactly
/// `application/json`; a missing Content-Type fails too).
fn is_json_media_type(headers: &HeaderMap) -> bool {
    let Some(v) = headers.get(header::CONTENT_TYPE) else {
        return false;
    };
    let v = String::from_utf8_lossy(v.as_bytes()).to_ascii_lowercase();
    v.split(';').next() == Some("application/json")
}

fn body_rejection(r: BytesRejection) -> ApiError {
    if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
        errors::body_too_large()
    } else {
        // The client stopped sending mid-body: nobody reads the answer, but it is JSON too.
        ApiError::validation(r.body_text(), None)
    }
}

/// Parse a JSON body into `T`, answering 400 the way FastAPI's validation does.
fn parse_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    match serde_json::from_slice::<serde_json::Value>(body) {
        Err(e) => Err(errors::from_serde(&e, false)),
        Ok(v) => serde_json::from_value::<T>(v).map_err(|e| errors::from_serde(&e, true)),
    }
}

/// The engine-clock time the request arrived, taken before its body is read (TTFT and E2E
/// count from here).
#[derive(Clone, Copy, Debug)]
pub struct Arrival(pub f64);

impl FromRequestParts<Shared> for Arrival {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(_: &mut Parts, st: &Shared) -> Result<Self, Self::Rejection> {
        Ok(Arrival(st.clock.now_s()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn the_media_type_is_checked_as_vllm_checks_it() {
        let with = |ct: Option<&'static str>| {
            let mut h = HeaderMap::new();
            if let Some(ct) = ct {
                h.insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
            }
            is_json_media_type(&h)
        };
        assert!(with(Some("application/json")));
        assert!(with(Some("Application/JSON; charset=utf-8")));
        assert!(!with(None));
        assert!(!with(Some("text/plain")));
        assert!(!with(Some("application/json-patch+json")));
        assert!(!with(Some("application/x-www-form-urlencoded")));
    }
}
