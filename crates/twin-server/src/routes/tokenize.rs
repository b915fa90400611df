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
    // vLLM's /tokenize has no length bound; the twin bounds it as it bounds a prompt, so a
    // request cannot hold a blocking thread for longer than a generation request can.
    let text = match (req.prompt, req.messages) {
        (Some(p), _) => {
            st.check_prompt_text(&p)?;
            TokenizeInput::Prompt(p)
        }
        (None, Some(m)) => {
            let msgs: Vec<ChatMessage> = m.iter().map(RawChatMessage::flatten).collect();
            let add_generation_prompt = req.add_generation_prompt.unwrap_or(true);
            let chars = st.tokenizer.chat_template_chars(&msgs, add_generation_prompt);
            st.check_prompt_chars(chars)?;
            TokenizeInput::Chat(msgs, add_generation_prompt)
        }
        (None, None) => {
            return Err(ApiError::validation(
                "1 validation error:\n  {'type': 'missing', 'loc': 'body.prompt', 'msg': 'Field required'}",
                Some("body.prompt"),
            ))
        }
    };
    let add_special_tokens = req.add_special_tokens.unwrap_or(true);
    let return_token_strs = req.return_token_strs.unwrap_or(false);
    let (tokens, token_strs) = st
        .tokenize(move |tok| {
            let tokens = match text {
                TokenizeInput::Prompt(p) => tok.encode_prompt(&p, add_special_tokens),
                TokenizeInput::Chat(msgs, gen) => tok.encode_chat(&msgs, gen),
            };
            let strs =
                return_token_strs.then(|| tokens.iter().map(|&t| tok.token_str(t)).collect());
            (tokens, strs)
        })
        .await?;
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

/// What `/tokenize` was given.
enum TokenizeInput {
    Prompt(String),
    /// Messages and `add_generation_prompt`.
    Chat(Vec<ChatMessage>, bool),
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
        prompt: st.tokenize(move |tok| tok.decode(&ids)).await?,
    };
    Ok(errors::json_response(
        StatusCode::OK,
        serde_json::to_string(&r).unwrap_or_default(),
    ))
}
