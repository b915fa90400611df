//! `POST /tokenize` and `POST /detokenize`. vLLM: `OpenAIServingTokenization`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::check_model;
use super::json::VllmJson;
use super::state::Shared;
use crate::api::*;
use crate::errors::{self, ApiError};

/// `POST /tokenize`. vLLM: `OpenAIServingTokenization.create_tokenize`.
pub(super) async fn tokenize(
    State(st): State<Shared>,
    VllmJson(req): VllmJson<TokenizeRequest>,
) -> Result<Response, ApiError> {
    check_model(&st, &req.model)?;
    let tokens = match (&req.prompt, &req.messages) {
        (Some(p), _) => st
            .tokenizer
            .encode_prompt(p, req.add_special_tokens.unwrap_or(true)),
        (None, Some(m)) => {
            let msgs: Vec<ChatMessage> = m.iter().map(RawChatMessage::flatten).collect();
            st.tokenizer
                .encode_chat(&msgs, req.add_generation_prompt.unwrap_or(true))
        }
        (None, None) => {
            return Err(ApiError::validation(
                "1 validation error:\n  {'type': 'missing', 'loc': 'body.prompt', 'msg': 'Field required'}",
                Some("body.prompt"),
            ))
        }
    };
    let token_strs = req
        .return_token_strs
        .unwrap_or(false)
        .then(|| tokens.iter().map(|&t| st.tokenizer.token_str(t)).collect());
    let r = TokenizeResponse {
        count: tokens.len(),
        max_model_len: st.opts.max_model_len,
        tokens,
        token_strs,
    };
    Ok(errors::json_response(
        StatusCode::OK,
        serde_json::to_string(&r).unwrap_or_default(),
    ))
}

/// `POST /detokenize`. vLLM: `OpenAIServingTokenization.create_detokenize`.
pub(super) async fn detokenize(
    State(st): State<Shared>,
    VllmJson(req): VllmJson<DetokenizeRequest>,
) -> Result<Response, ApiError> {
    check_model(&st, &req.model)?;
    if let Some(bad) = req.tokens.iter().find(|&&t| t < 0 || t > u32::MAX as i64) {
        return Err(ApiError::bad_request(
            format!("Token id {bad} is out of vocabulary"),
            Some("tokens"),
        ));
    }
    let ids: Vec<u32> = req.tokens.iter().map(|&t| t as u32).collect();
    let r = DetokenizeResponse {
        prompt: st.tokenizer.decode(&ids),
    };
    Ok(errors::json_response(
        StatusCode::OK,
        serde_json::to_string(&r).unwrap_or_default(),
    ))
}
