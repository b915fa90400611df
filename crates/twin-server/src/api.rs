//! Wire types of vLLM's OpenAI-compatible server, field for field in pydantic's declaration
//! order (serde keeps struct order). Requests accept and ignore fields the twin does not model
//! (vLLM logs and ignores unknown fields too). vLLM: `entrypoints/openai/*/protocol.py`,
//! `entrypoints/serve/engine/protocol.py`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

// ----------------------------------------------------------------------------------------
// Requests
// ----------------------------------------------------------------------------------------

/// `stream_options`. vLLM: `StreamOptions`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: Option<bool>,
    #[serde(default)]
    pub continuous_usage_stats: Option<bool>,
}

/// `stop`: a string or a list of strings.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

impl Stop {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s],
            Stop::Many(v) => v,
        }
    }
}

/// Sampling fields shared by both generation endpoints (the ones the twin honours).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct CommonParams {
    pub model: Option<String>,
    pub max_tokens: Option<i64>,
    pub min_tokens: Option<i64>,
    pub n: Option<i64>,
    /// Checked as vLLM checks them; the twin's "model" samples no logits.
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub repetition_penalty: Option<f64>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub stop: Option<Stop>,
    pub stop_token_ids: Option<Vec<u32>>,
    pub ignore_eos: Option<bool>,
    pub priority: Option<i64>,
    pub cache_salt: Option<String>,
    pub add_special_tokens: Option<bool>,
}

/// One chat message; content as a string or as a list of text parts.
#[derive(Clone, Debug, Deserialize)]
pub struct RawChatMessage {
    pub role: String,
    #[serde(default)]
    pub content: Option<MessageContent>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum MessageContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Clone, Debug, Deserialize)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub text: Option<String>,
}

/// A message with its text flattened (what the chat template sees).
#[derive(Clone, Debug)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl RawChatMessage {
    pub fn flatten(&self) -> ChatMessage {
        let content = match &self.content {
            None => String::new(),
            Some(MessageContent::Text(s)) => s.clone(),
            // vLLM joins text parts with a newline (`_parse_chat_message_content_parts`).
            Some(MessageContent::Parts(parts)) => parts
                .iter()
                .filter(|p| p.kind == "text")
                .filter_map(|p| p.text.as_deref())
                .collect::<Vec<_>>()
                .join("\n"),
        };
        ChatMessage {
            role: self.role.clone(),
            content,
        }
    }
}

/// `POST /v1/chat/completions`. vLLM: `ChatCompletionRequest`.
#[derive(Clone, Debug, Deserialize)]
pub struct ChatCompletionRequest {
    pub messages: Vec<RawChatMessage>,
    pub max_completion_tokens: Option<i64>,
    #[serde(default)]
    pub echo: Option<bool>,
    #[serde(default)]
    pub add_generation_prompt: Option<bool>,
    #[serde(flatten)]
    pub common: CommonParams,
}

/// `prompt`: text, a list of texts, token ids, or a list of token-id lists.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    Text(String),
    Texts(Vec<String>),
    Ids(Vec<u32>),
    IdLists(Vec<Vec<u32>>),
}

/// `POST /v1/completions`. vLLM: `CompletionRequest`.
#[derive(Clone, Debug, Deserialize)]
pub struct CompletionRequest {
    pub prompt: Prompt,
    #[serde(default)]
    pub echo: Option<bool>,
    #[serde(flatten)]
    pub common: CommonParams,
}

/// `POST /tokenize`: a completion prompt or chat messages. vLLM: `TokenizeRequest`.
#[derive(Clone, Debug, Deserialize)]
pub struct TokenizeRequest {
    pub model: Option<String>,
    pub prompt: Option<String>,
    pub messages: Option<Vec<RawChatMessage>>,
    pub add_special_tokens: Option<bool>,
    pub add_generation_prompt: Option<bool>,
    pub return_token_strs: Option<bool>,
}

/// `POST /detokenize`. vLLM: `DetokenizeRequest`.
#[derive(Clone, Debug, Deserialize)]
pub struct DetokenizeRequest {
    pub model: Option<String>,
    pub tokens: Vec<i64>,
}

// ----------------------------------------------------------------------------------------
// Responses
// ----------------------------------------------------------------------------------------

/// vLLM: `UsageInfo` (`prompt_tokens_details` is left out when None).
#[derive(Clone, Debug, Serialize)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub total_tokens: usize,
    pub completion_tokens: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
    /// Serialized as null where vLLM sets it explicitly; skipped where vLLM excludes None.
    #[serde(skip_serializing_if = "is_skip")]
    pub completion_tokens_details: Nullable,
}

/// vLLM: `PromptTokenUsageInfo` (`--enable-prompt-tokens-details`).
#[derive(Clone, Debug, Serialize)]
pub struct PromptTokensDetails {
    pub cached_tokens: usize,
}

/// A field pydantic would write as `null` (`Null`) or leave out (`Skip`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nullable {
    Null,
    Skip,
}

fn is_skip(n: &Nullable) -> bool {
    *n == Nullable::Skip
}

impl Serialize for Nullable {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_none()
    }
}

impl Usage {
    pub fn new(prompt: usize, completion: usize, details: Nullable) -> Self {
        Usage {
            prompt_tokens: prompt,
            total_tokens: prompt + completion,
            completion_tokens: completion,
            prompt_tokens_details: None,
            completion_tokens_details: details,
        }
    }
}

/// vLLM: `ChatMessage` as `model_dump()` writes it (`tool_calls` dropped when empty,
/// `annotations` excluded when None).
#[derive(Clone, Debug, Serialize)]
pub struct ResponseMessage {
    pub role: String,
    pub content: String,
    pub refusal: Option<String>,
    pub audio: Option<Value>,
    pub function_call: Option<Value>,
    pub reasoning: Option<String>,
}

/// vLLM: `ChatCompletionResponseChoice`.
#[derive(Clone, Debug, Serialize)]
pub struct ChatChoice {
    pub index: usize,
    pub message: ResponseMessage,
    pub logprobs: Option<Value>,
    pub finish_reason: Option<String>,
    pub stop_reason: Option<Value>,
    pub token_ids: Option<Vec<u32>>,
    pub routed_experts: Option<String>,
    pub weight_versions: Option<Value>,
}

/// vLLM: `ChatCompletionResponse`.
#[derive(Clone, Debug, Serialize)]
pub struct ChatCompletionResponse {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatChoice>,
    pub service_tier: Option<String>,
    pub system_fingerprint: Option<String>,
    pub usage: Usage,
    pub prompt_logprobs: Option<Value>,
    pub prompt_token_ids: Option<Vec<u32>>,
    pub prompt_text: Option<String>,
    pub kv_transfer_params: Option<Value>,
    pub ec_transfer_params: Option<Value>,
    pub metrics: Option<Value>,
}

/// vLLM: `CompletionResponseChoice`.
#[derive(Clone, Debug, Serialize)]
pub struct CompletionChoice {
    pub index: usize,
    pub text: String,
    pub logprobs: Option<Value>,
    pub finish_reason: Option<String>,
    pub stop_reason: Option<Value>,
    pub token_ids: Option<Vec<u32>>,
    pub prompt_logprobs: Option<Value>,
    pub prompt_token_ids: Option<Vec<u32>>,
    pub routed_experts: Option<String>,
    pub weight_versions: Option<Value>,
}

/// vLLM: `CompletionResponse`.
#[derive(Clone, Debug, Serialize)]
pub struct CompletionResponse {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<CompletionChoice>,
    pub service_tier: Option<String>,
    pub system_fingerprint: Option<String>,
    pub usage: Usage,
    pub kv_transfer_params: Option<Value>,
    pub ec_transfer_params: Option<Value>,
    pub metrics: Option<Value>,
}

/// `delta` of a chat chunk (`exclude_unset`: only what vLLM set).
#[derive(Clone, Debug, Serialize)]
pub struct Delta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    pub content: String,
}

/// A chat stream choice under `exclude_unset=True`: the first chunk sets four fields, token
/// chunks add `token_ids`, the final one `stop_reason` and `weight_versions` too.
#[derive(Clone, Debug, Serialize)]
pub struct ChatStreamChoice {
    pub index: usize,
    pub delta: Delta,
    pub logprobs: Option<Value>,
    pub finish_reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<Option<Value>>,
    #[serde(skip_serializing_if = "is_skip")]
    pub token_ids: Nullable,
    #[serde(skip_serializing_if = "is_skip")]
    pub weight_versions: Nullable,
}

/// vLLM: `ChatCompletionStreamResponse` under `exclude_unset=True`.
#[derive(Clone, Debug, Serialize)]
pub struct ChatChunk<'a> {
    pub id: &'a str,
    pub object: &'static str,
    pub created: u64,
    pub model: &'a str,
    pub choices: Vec<ChatStreamChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// First chunk only (set explicitly to None there).
    #[serde(skip_serializing_if = "is_skip")]
    pub prompt_token_ids: Nullable,
    #[serde(skip_serializing_if = "is_skip")]
    pub prompt_text: Nullable,
    /// Token chunks (set explicitly to None there).
    #[serde(skip_serializing_if = "is_skip")]
    pub kv_transfer_params: Nullable,
}

/// vLLM: `CompletionResponseStreamChoice` (every field set explicitly).
#[derive(Clone, Debug, Serialize)]
pub struct CompletionStreamChoice {
    pub index: usize,
    pub text: String,
    pub logprobs: Option<Value>,
    pub finish_reason: Option<String>,
    pub stop_reason: Option<Value>,
    pub prompt_token_ids: Option<Vec<u32>>,
    pub token_ids: Option<Vec<u32>>,
    pub weight_versions: Option<Value>,
}

/// vLLM: `CompletionStreamResponse` under `exclude_unset=True`.
#[derive(Clone, Debug, Serialize)]
pub struct CompletionChunk<'a> {
    pub id: &'a str,
    pub object: &'static str,
    pub created: u64,
    pub model: &'a str,
    pub choices: Vec<CompletionStreamChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(skip_serializing_if = "is_skip")]
    pub kv_transfer_params: Nullable,
}

/// The trailing usage chunk of either stream (`choices: []`, None fields excluded).
#[derive(Clone, Debug, Serialize)]
pub struct UsageChunk<'a> {
    pub id: &'a str,
    pub object: &'static str,
    pub created: u64,
    pub model: &'a str,
    pub choices: [u8; 0],
    pub usage: Usage,
}

/// vLLM: `ModelPermission`.
#[derive(Clone, Debug, Serialize)]
pub struct ModelPermission {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub allow_create_engine: bool,
    pub allow_sampling: bool,
    pub allow_logprobs: bool,
    pub allow_search_indices: bool,
    pub allow_view: bool,
    pub allow_fine_tuning: bool,
    pub organization: &'static str,
    pub group: Option<String>,
    pub is_blocking: bool,
}

/// vLLM: `ModelCard`.
#[derive(Clone, Debug, Serialize)]
pub struct ModelCard {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub owned_by: &'static str,
    pub root: Option<String>,
    pub parent: Option<String>,
    pub max_model_len: Option<usize>,
    pub permission: Vec<ModelPermission>,
}

/// vLLM: `ModelList`.
#[derive(Clone, Debug, Serialize)]
pub struct ModelList {
    pub object: &'static str,
    pub data: Vec<ModelCard>,
}

/// vLLM: `TokenizeResponse`.
#[derive(Clone, Debug, Serialize)]
pub struct TokenizeResponse {
    pub count: usize,
    pub max_model_len: usize,
    pub tokens: Vec<u32>,
    pub token_strs: Option<Vec<String>>,
}

/// vLLM: `DetokenizeResponse`.
#[derive(Clone, Debug, Serialize)]
pub struct DetokenizeResponse {
    pub prompt: String,
}
