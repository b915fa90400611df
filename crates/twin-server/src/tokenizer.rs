//! An offline tokenizer: OpenAI's cl100k_base BPE, which is the first 100,256 entries of Llama 3's
//! 128K vocabulary, plus Llama 3's special tokens and chat template. Real token ids mean
//! identical text prefixes give real prefix-cache hits.
//!
//! Encoding is GitHub's backtracking BPE (`bpe-openai`): linear in the text's length, where
//! tiktoken's merge loop is quadratic in the length of one pre-tokenized piece (an 80 KB prompt
//! without spaces took seconds). The ids are tiktoken's (tested against it).
//!
//! Decoding never panics: every id has a byte string (unknown ids decode to nothing), and
//! [`IncrementalDecoder`] holds back incomplete UTF-8 sequences the way vLLM's incremental
//! detokenizer holds back partial characters.

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

/// cl100k_base's ordinary ranks are exactly 0..100256.
const NUM_ORDINARY_TOKENS: u32 = 100_256;

/// The deterministic filler the twin "generates" (cycled token by token).
const FILLER_TEXT: &str = "The quick brown fox jumps over the lazy dog while the scheduler \
batches the next decode step, the key value cache fills block by block, and the prefill of a \
long prompt waits its turn in the token budget. ";

/// The embedded BPE ranks are not cl100k_base's.
#[derive(Debug, thiserror::Error)]
#[error("tokenizer: the embedded cl100k_base has {found} ordinary tokens, expected {expected}")]
pub struct TokenizerError {
    found: usize,
    expected: u32,
}

/// The tokenizer shared by the HTTP handlers and the engine thread.
pub struct Tokenizer {
    bpe: &'static bpe_openai::Tokenizer,
    /// Byte string of every ordinary id, concatenated; `offsets[id]..offsets[id + 1]`.
    bytes: Vec<u8>,
    offsets: Vec<u32>,
    filler: Vec<u32>,
    max_chars_per_token: usize,
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
        let bpe = bpe_openai::cl100k_base();
        let found = bpe.bpe.num_tokens();
        if found != NUM_ORDINARY_TOKENS as usize {
            return Err(TokenizerError {
                found,
                expected: NUM_ORDINARY_TOKENS,
            });
        }
        let mut bytes = Vec::with_capacity(800_000);
        let mut offsets = Vec::with_capacity(found + 1);
        offsets.push(0u32);
        for id in 0..NUM_ORDINARY_TOKENS {
            bytes.extend_from_slice(bpe.bpe.token_bytes(id));
            offsets.push(bytes.len() as u32);
        }
        // vLLM: `max_chars_per_token` over the vocabulary, special tokens included. A byte-level
        // vocabulary spells a token with one character per byte.
        let max_chars_per_token = offsets
            .windows(2)
            .map(|w| (w[1] - w[0]) as usize)
            .chain(SPECIALS.iter().map(|(_, s)| s.chars().count()))
            .max()
            .unwrap_or(1);
        let filler = bpe.encode(FILLER_TEXT);
        Ok(Tokenizer {
            bpe,
            bytes,
            offsets,
            filler,
            max_chars_per_token,
        })
    }

    /// The longest token, in characters (vLLM: `TokenizerLike.max_chars_per_token`): a text of
    /// more than `n × max_chars_per_token` characters cannot fit in `n` tokens.
    pub fn max_chars_per_token(&self) -> usize {
        self.max_chars_per_token
    }

    /// Plain text → ids, no special tokens.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        self.bpe.encode(text)
    }

    /// Plain text → at most `limit` ids (a prefix of [`Self::encode`]'s), stopping early.
    fn encode_into(&self, text: &str, ids: &mut Vec<u32>, limit: usize) {
        for piece in self.bpe.split(text) {
            if ids.len() >= limit {
                break;
            }
            ids.extend(self.bpe.bpe.encode_via_backtracking(piece.as_bytes()));
        }
        ids.truncate(limit);
    }

    /// A completion prompt as the HF tokenizer gives it (`add_special_tokens`: BOS first).
    pub fn encode_prompt(&self, text: &str, add_special_tokens: bool) -> Vec<u32> {
        self.encode_prompt_truncated(text, add_special_tokens, usize::MAX)
    }

    /// [`Self::encode_prompt`] cut to `max_length` ids, as vLLM tokenizes with
    /// `truncation=True, max_length=max_input_tokens + 1` (`TokenizeParams.get_encode_kwargs`):
    /// a prompt too long is known to be too long without tokenizing all of it.
    pub fn encode_prompt_truncated(
        &self,
        text: &str,
        add_special_tokens: bool,
        max_length: usize,
    ) -> Vec<u32> {
        let mut ids = Vec::with_capacity((text.len() / 3 + 1).min(max_length));
        if add_special_tokens && max_length > 0 {
            ids.push(BOS_TOKEN_ID);
        }
        self.encode_into(text, &mut ids, max_length);
        ids
    }

    /// Llama 3's chat template with `add_generation_prompt=True`.
    /// vLLM: `apply_hf_chat_template` rendering the model's Jinja template.
    pub fn encode_chat(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Vec<u32> {
        self.encode_chat_truncated(messages, add_generation_prompt, usize::MAX)
    }

    /// [`Self::encode_chat`] cut to `max_length` ids (see [`Self::encode_prompt_truncated`]).
    pub fn encode_chat_truncated(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        max_length: usize,
    ) -> Vec<u32> {
        let mut ids = vec![BOS_TOKEN_ID];
        let turns = messages
            .iter()
            .map(|m| (m.role.as_str(), m.content.trim()))
            .chain(add_generation_prompt.then_some(("assistant", "")));
        for (i, (role, content)) in turns.enumerate() {
            if ids.len() >= max_length {
                break;
            }
            ids.push(START_HEADER_ID);
            self.encode_into(role, &mut ids, max_length);
            ids.push(END_HEADER_ID);
            self.encode_into("\n\n", &mut ids, max_length);
            // The generation prompt is a header only.
            if i < messages.len() {
                self.encode_into(content, &mut ids, max_length);
                ids.push(EOS_TOKEN_ID);
            }
        }
        ids.truncate(max_length);
        ids
    }

    /// The length in characters of the text Llama 3's template renders (what vLLM's
    /// `_text_len_check` measures), without rendering it.
    pub fn chat_template_chars(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> usize {
        let header = "<|start_header_id|>".len() + "<|end_header_id|>".len() + 2;
        let turns: usize = messages
            .iter()
            .map(|m| {
                header
                    + m.role.chars().count()
                    + m.content.trim().chars().count()
                    + "<|eot_id|>".len()
            })
            .sum();
        let generation = if add_generation_prompt {
            header + "assistant".len()
        } else {
            0
        };
        "<|begin_of_text|>".len() + turns + generation
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

    /// Texts that exercise every branch of cl100k's pre-tokenizer: contractions, numbers in
    /// threes, punctuation runs, newlines, trailing and repeated whitespace, non-Latin scripts,
    /// emoji and combining marks, and long runs without spaces.
    fn samples() -> Vec<String> {
        let mut v: Vec<String> = [
            "Hello world",
            "The quick brown fox jumps over the lazy dog.",
            "I'm sure they'll've done it; we'd, you're, it's, she's",
            "1234567890 3.14159 1,000,000 0x7fff_ffff",
            "def f(x):\n    return x ** 2  # square\n\n\n",
            "   leading and trailing   \t\n",
            "naïve café résumé — “quotes” ‘single’ … ¿qué? ¡sí!",
            "日本語のテキストと中文文本，한국어 텍스트",
            "Здравствуй, мир! Γειά σου Κόσμε! مرحبا بالعالم שלום עולם",
            "emoji 🙂🚀👨‍👩‍👧‍👦 flags 🇫🇷 and e\u{301} combining",
            "<|endoftext|> <|begin_of_text|> are plain text here",
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "\r\n\r\n  \u{a0}\u{2003}spaces\u{3000}of kinds",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        // A spaceless run: one pre-tokenizer piece (tiktoken's quadratic case), kept short
        // enough for tiktoken to answer quickly.
        v.push("thequickbrownfox".repeat(200));
        v.push("混合テキスト".repeat(300));
        // Deterministic pseudo-random strings over a mixed alphabet.
        let alphabet: Vec<char> = "abcXYZ019 \n\t.,;'\"-_()é日本🙂Ж\u{301}".chars().collect();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for len in [1usize, 2, 3, 7, 16, 64, 255, 1000] {
            for _ in 0..8 {
                let s: String = (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        alphabet[(x % alphabet.len() as u64) as usize]
                    })
                    .collect();
                v.push(s);
            }
        }
        v
    }

    #[test]
    fn ids_are_tiktokens() {
        let t = Tokenizer::new().unwrap();
        let tiktoken = tiktoken_rs::cl100k_base().unwrap();
        for s in samples() {
            assert_eq!(t.encode(&s), tiktoken.encode_ordinary(&s), "{s:?}");
        }
        assert_eq!(t.filler(), tiktoken.encode_ordinary(FILLER_TEXT));
        // The byte table is tiktoken's too.
        let ids: Vec<u32> = (0..NUM_ORDINARY_TOKENS).collect();
        for (id, piece) in ids
            .iter()
            .zip(tiktoken._decode_native_and_split(ids.clone()))
        {
            assert_eq!(t.token_bytes(*id), &piece[..], "{id}");
        }
    }

    #[test]
    fn truncated_encodings_are_prefixes() {
        let t = Tokenizer::new().unwrap();
        let msgs = |s: &str| {
            vec![
                ChatMessage {
                    role: "system".into(),
                    content: "Be brief.".into(),
                },
                ChatMessage {
                    role: "user".into(),
                    content: s.into(),
                },
            ]
        };
        for s in samples() {
            for special in [true, false] {
                let full = t.encode_prompt(&s, special);
                for limit in [0, 1, 2, 5, full.len(), full.len() + 1] {
                    let cut = t.encode_prompt_truncated(&s, special, limit);
                    assert_eq!(cut, full[..limit.min(full.len())], "{s:?} {limit}");
                }
            }
            for gen in [true, false] {
                let full = t.encode_chat(&msgs(&s), gen);
                for limit in [1, 3, 9, full.len() - 1, full.len(), full.len() + 1] {
                    let cut = t.encode_chat_truncated(&msgs(&s), gen, limit);
                    assert_eq!(cut, full[..limit.min(full.len())], "{s:?} {limit}");
                }
            }
        }
    }

    #[test]
    fn chat_template_chars_counts_the_rendered_template() {
        let t = Tokenizer::new().unwrap();
        let msgs = vec![
            ChatMessage {
                role: "system".into(),
                content: "  Soyez bref. ".into(),
            },
            ChatMessage {
                role: "user".into(),
                content: "日本語 🙂\n".into(),
            },
        ];
        for gen in [true, false] {
            let mut text = String::from("<|begin_of_text|>");
            for m in &msgs {
                text += &format!(
                    "<|start_header_id|>{}<|end_header_id|>\n\n{}<|eot_id|>",
                    m.role,
                    m.content.trim()
                );
            }
            if gen {
                text += "<|start_header_id|>assistant<|end_header_id|>\n\n";
            }
            assert_eq!(t.chat_template_chars(&msgs, gen), text.chars().count());
        }
        // cl100k's longest token is a run of 128 bytes; the specials are shorter.
        assert_eq!(t.max_chars_per_token(), 128);
    }
}
