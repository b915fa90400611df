//! An offline tokenizer: OpenAI's cl100k_base BPE (embedded in `tiktoken-rs`), which is the
//! first 100,256 entries of Llama 3's 128K vocabulary, plus Llama 3's special tokens and chat
//! template. Real token ids mean identical text prefixes give real prefix-cache hits.
//!
//! Decoding never panics: every id has a byte string (unknown ids decode to nothing), and
//! [`IncrementalDecoder`] holds back incomplete UTF-8 sequences the way vLLM's incremental
//! detokenizer holds back partial characters.

use tiktoken_rs::CoreBPE;

use crate::api::ChatMessage;

/// `<|begin_of_text|>` (Llama 3).
pub const BOS_TOKEN_ID: u32 = 128_000;
/// `<|eot_id|>`: the end-of-turn token Llama-3 instruct models stop on (their EOS).
pub const EOS_TOKEN_ID: u32 = 128_009;
const START_HEADER_ID: u32 = 128_006;
const END_HEADER_ID: u32 = 128_007;

/// Llama 3 special tokens, by id; they decode to nothing (vLLM's `skip_special_tokens=True`).
const SPECIALS: &[(u32, &str)] = &[
    (128_000, "<|begin_of_text|>"),
    (128_001, "<|end_of_text|>"),
    (128_006, "<|start_header_id|>"),
    (128_007, "<|end_header_id|>"),
    (128_008, "<|eom_id|>"),
    (128_009, "<|eot_id|>"),
];

/// The deterministic filler the twin "generates" (cycled token by token).
const FILLER_TEXT: &str = "The quick brown fox jumps over the lazy dog while the scheduler \
batches the next decode step, the key value cache fills block by block, and the prefill of a \
long prompt waits its turn in the token budget. ";

/// The embedded BPE ranks did not load.
#[derive(Debug, thiserror::Error)]
#[error("tokenizer: cannot load cl100k_base: {0}")]
pub struct TokenizerError(String);

/// The tokenizer shared by the HTTP handlers and the engine thread.
pub struct Tokenizer {
    bpe: CoreBPE,
    /// Byte string of every ordinary id, concatenated; `offsets[id]..offsets[id + 1]`.
    bytes: Vec<u8>,
    offsets: Vec<u32>,
    filler: Vec<u32>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab", &(self.offsets.len().saturating_sub(1)))
            .finish()
    }
}

impl Tokenizer {
    /// Build from the embedded cl100k_base ranks (no file, no network).
    pub fn new() -> Result<Self, TokenizerError> {
        let bpe = tiktoken_rs::cl100k_base().map_err(|e| TokenizerError(e.to_string()))?;
        // cl100k_base's ordinary ranks are exactly 0..100256.
        const N: u32 = 100_256;
        let mut bytes = Vec::with_capacity(800_000);
        let mut offsets = Vec::with_capacity(N as usize + 1);
        offsets.push(0u32);
        for piece in bpe._decode_native_and_split((0..N).collect()) {
            bytes.extend_from_slice(&piece);
            offsets.push(bytes.len() as u32);
        }
        let filler = bpe.encode_ordinary(FILLER_TEXT);
        Ok(Tokenizer {
            bpe,
            bytes,
            offsets,
            filler,
        })
    }

    /// Plain text → ids, no special tokens.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        self.bpe.encode_ordinary(text)
    }

    /// A completion prompt as the HF tokenizer gives it (`add_special_tokens`: BOS first).
    pub fn encode_prompt(&self, text: &str, add_special_tokens: bool) -> Vec<u32> {
        let mut ids = Vec::with_capacity(text.len() / 3 + 1);
        if add_special_tokens {
            ids.push(BOS_TOKEN_ID);
        }
        ids.extend(self.bpe.encode_ordinary(text));
        ids
    }

    /// Llama 3's chat template with `add_generation_prompt=True`.
    /// vLLM: `apply_hf_chat_template` rendering the model's Jinja template.
    pub fn encode_chat(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Vec<u32> {
        let mut ids = vec![BOS_TOKEN_ID];
        for m in messages {
            ids.push(START_HEADER_ID);
            ids.extend(self.bpe.encode_ordinary(&m.role));
            ids.push(END_HEADER_ID);
            ids.extend(self.bpe.encode_ordinary("\n\n"));
            ids.extend(self.bpe.encode_ordinary(m.content.trim()));
            ids.push(EOS_TOKEN_ID);
        }
        if add_generation_prompt {
            ids.push(START_HEADER_ID);
            ids.extend(self.bpe.encode_ordinary("assistant"));
            ids.push(END_HEADER_ID);
            ids.extend(self.bpe.encode_ordinary("\n\n"));
        }
        ids
    }

    /// The bytes of one id (special and unknown ids: none).
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        let i = id as usize;
        match (self.offsets.get(i), self.offsets.get(i + 1)) {
            (Some(&a), Some(&b)) => &self.bytes[a as usize..b as usize],
            _ => &[],
        }
    }

    /// The string form of one id, as `/tokenize`'s `token_strs` shows it.
    pub fn token_str(&self, id: u32) -> String {
        if let Some((_, s)) = SPECIALS.iter().find(|(i, _)| *i == id) {
            return (*s).to_string();
        }
        String::from_utf8_lossy(self.token_bytes(id)).into_owned()
    }

    /// Ids → text, skipping special tokens; invalid UTF-8 becomes U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> String {
        let mut buf = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            buf.extend_from_slice(self.token_bytes(id));
        }
        String::from_utf8_lossy(&buf).into_owned()
    }

    /// The filler token sequence generated text cycles through.
    pub fn filler(&self) -> &[u32] {
        &self.filler
    }
}

/// Streaming detokenization: bytes are released only as whole UTF-8 characters.
/// vLLM: `IncrementalDetokenizer` (`vllm/v1/engine/detokenizer.py`).
#[derive(Debug, Default)]
pub struct IncrementalDecoder {
    pending: Vec<u8>,
}

impl IncrementalDecoder {
    /// Append `ids` and push the newly complete text onto `out`.
    pub fn push(&mut self, tok: &Tokenizer, ids: &[u32], out: &mut String) {
        for &id in ids {
            self.pending.extend_from_slice(tok.token_bytes(id));
        }
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return;
                }
                Err(e) => {
                    let good = e.valid_up_to();
                    // Valid by construction (valid_up_to).
                    out.push_str(std::str::from_utf8(&self.pending[..good]).unwrap_or(""));
                    match e.error_len() {
                        // An incomplete character at the end: keep it for the next token.
                        None => {
                            self.pending.drain(..good);
                            return;
                        }
                        // An invalid sequence: replace it, as `errors="replace"` does.
                        Some(n) => {
                            out.push('\u{FFFD}');
                            self.pending.drain(..good + n);
                        }
                    }
                }
            }
        }
    }

    /// End of stream: whatever is held back, lossily.
    pub fn finish(&mut self, out: &mut String) {
        if !self.pending.is_empty() {
            out.push_str(&String::from_utf8_lossy(&self.pending));
            self.pending.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_prefix_stability() {
        let t = Tokenizer::new().unwrap();
        let ids = t.encode("Hello, world! héllo");
        assert_eq!(t.decode(&ids), "Hello, world! héllo");
        let a = t.encode_prompt("You are a helpful assistant. Question one?", true);
        let b = t.encode_prompt("You are a helpful assistant. Question two?", true);
        assert_eq!(a[..7], b[..7]);
        assert_eq!(t.decode(&[BOS_TOKEN_ID, EOS_TOKEN_ID, 4_000_000]), "");
    }

    #[test]
    fn incremental_decoder_holds_back_partial_characters() {
        let t = Tokenizer::new().unwrap();
        let ids = t.encode("日本語のテキスト🙂");
        let mut d = IncrementalDecoder::default();
        let mut out = String::new();
        for id in &ids {
            d.push(&t, std::slice::from_ref(id), &mut out);
            assert!(!out.contains('\u{FFFD}'), "{out}");
        }
        d.finish(&mut out);
        assert_eq!(out, "日本語のテキスト🙂");
    }
}
