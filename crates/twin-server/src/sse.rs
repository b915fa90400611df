//! Server-sent events as vLLM's OpenAI server frames them: `data: {json}\n\n` per chunk and
//! `data: [DONE]\n\n` last. One chunk per engine output (a step's tokens arrive together).
//! vLLM: `OpenAIServingChat.chat_completion_stream_generator`,
//! `OpenAIServingCompletion.completion_stream_generator`.

use axum::body::Bytes;
use serde::Serialize;
use serde_json::Value;

use crate::api::{
    ChatChunk, ChatStreamChoice, CompletionChunk, CompletionStreamChoice, Delta, Nullable,
    PromptTokensDetails, Usage, UsageChunk,
};
use crate::engine::{Event, Finish, StopReason};

/// `data: {json}\n\n`.
pub fn frame<T: Serialize>(v: &T) -> Bytes {
    let mut buf = Vec::with_capacity(256);
    buf.extend_from_slice(b"data: ");
    // Serializing plain structs into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut buf, v);
    buf.extend_from_slice(b"\n\n");
    Bytes::from(buf)
}

pub const DONE: &[u8] = b"data: [DONE]\n\n";

/// `stop_reason` as JSON: a token id or the matched stop string.
pub fn stop_reason_json(f: &Finish) -> Option<Value> {
    match &f.stop_reason {
        None => None,
        Some(StopReason::Token(t)) => Some(Value::from(*t)),
        Some(StopReason::Text(s)) => Some(Value::from(s.clone())),
    }
}

/// What every chunk (and the non-streaming response) of one request repeats.
/// vLLM: the `id`, `object`, `created` and `model` fields of the response types.
#[derive(Clone, Debug)]
pub struct ResponseIdentity {
    /// `/v1/chat/completions` (else `/v1/completions`).
    pub chat: bool,
    pub id: String,
    pub created: u64,
    pub model: String,
}

/// Which usage a stream reports. vLLM: `should_include_usage` and
/// `--enable-prompt-tokens-details`.
#[derive(Clone, Copy, Debug)]
pub struct UsageOptions {
    pub include_usage: bool,
    pub continuous_usage: bool,
    pub prompt_tokens_details: bool,
}

/// One stream's framing state.
#[derive(Clone, Debug)]
pub struct StreamState {
    pub resp: ResponseIdentity,
    pub role: &'static str,
    pub usage: UsageOptions,
    pub num_prompt_tokens: usize,
    pub num_output_tokens: usize,
    pub num_cached_tokens: usize,
    first: bool,
}

impl StreamState {
    pub fn new(
        resp: ResponseIdentity,
        role: &'static str,
        usage: UsageOptions,
        num_prompt_tokens: usize,
    ) -> Self {
        StreamState {
            resp,
            role,
            usage,
            num_prompt_tokens,
            num_output_tokens: 0,
            num_cached_tokens: 0,
            first: true,
        }
    }

    fn usage_now(&self, with_details: bool) -> Usage {
        let mut u = Usage::new(
            self.num_prompt_tokens,
            self.num_output_tokens,
            if self.resp.chat {
                Nullable::Null
            } else {
                Nullable::Skip
            },
        );
        if with_details && self.usage.prompt_tokens_details {
            u.prompt_tokens_details = Some(PromptTokensDetails {
                cached_tokens: self.num_cached_tokens,
            });
        }
        u
    }

    /// The frames one engine output produces (the chat role chunk comes with the first).
    pub fn on_event(&mut self, ev: &Event, out: &mut Vec<Bytes>) {
        self.num_cached_tokens = ev.num_cached_tokens;
        if self.resp.chat && self.first {
            self.first = false;
            // vLLM sends the role only once the first output exists.
            let chunk = ChatChunk {
                id: &self.resp.id,
                object: "chat.completion.chunk",
                created: self.resp.created,
                model: &self.resp.model,
                choices: vec![ChatStreamChoice {
                    index: 0,
                    delta: Delta {
                        role: Some(self.role),
                        content: String::new(),
                    },
                    logprobs: None,
                    finish_reason: None,
                    stop_reason: None,
                    token_ids: Nullable::Skip,
                    weight_versions: Nullable::Skip,
                }],
                usage: self.usage.continuous_usage.then(|| self.usage_now(true)),
                prompt_token_ids: Nullable::Null,
                prompt_text: Nullable::Null,
                kv_transfer_params: Nullable::Skip,
            };
            out.push(frame(&chunk));
        }
        self.first = false;
        self.num_output_tokens += ev.num_new_tokens;
        if ev.text.is_empty() && ev.num_new_tokens == 0 && ev.finish.is_none() {
            return;
        }
        let finish_reason = ev.finish.as_ref().map(|f| f.reason.to_string());
        let stop_reason = ev.finish.as_ref().map(stop_reason_json);
        let mut usage = self.usage.continuous_usage.then(|| self.usage_now(false));
        if self.resp.chat {
            let chunk = ChatChunk {
                id: &self.resp.id,
                object: "chat.completion.chunk",
                created: self.resp.created,
                model: &self.resp.model,
                choices: vec![ChatStreamChoice {
                    index: 0,
                    delta: Delta {
                        role: None,
                        content: ev.text.clone(),
                    },
                    logprobs: None,
                    finish_reason,
                    stop_reason,
                    token_ids: Nullable::Null,
                    weight_versions: if ev.finish.is_some() {
                        Nullable::Null
                    } else {
                        Nullable::Skip
                    },
                }],
                usage: usage.take(),
                prompt_token_ids: Nullable::Skip,
                prompt_text: Nullable::Skip,
                kv_transfer_params: Nullable::Null,
            };
            out.push(frame(&chunk));
        } else {
            let chunk = CompletionChunk {
                id: &self.resp.id,
                object: "text_completion",
                created: self.resp.created,
                model: &self.resp.model,
                choices: vec![CompletionStreamChoice {
                    index: 0,
                    text: ev.text.clone(),
                    logprobs: None,
                    finish_reason,
                    stop_reason: stop_reason.flatten(),
                    prompt_token_ids: None,
                    token_ids: None,
                    weight_versions: None,
                }],
                usage: usage.take(),
                kv_transfer_params: Nullable::Null,
            };
            out.push(frame(&chunk));
        }
    }

    /// After the last output: the usage chunk (when asked for) and `[DONE]`.
    pub fn on_end(&mut self, out: &mut Vec<Bytes>) {
        if self.usage.include_usage {
            let mut usage = self.usage_now(true);
            // The trailing chunk is dumped with exclude_none: no null details.
            usage.completion_tokens_details = Nullable::Skip;
            let chunk = UsageChunk {
                id: &self.resp.id,
                object: if self.resp.chat {
                    "chat.completion.chunk"
                } else {
                    "text_completion"
                },
                created: self.resp.created,
                model: &self.resp.model,
                choices: [],
                usage,
            };
            out.push(frame(&chunk));
        }
        out.push(Bytes::from_static(DONE));
    }
}
