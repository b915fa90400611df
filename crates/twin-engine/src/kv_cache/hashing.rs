//! Chained block hashes for prefix caching.
//!
//! vLLM hashes `(parent_hash, block_tokens, extra_keys)` with sha256 of a pickle
//! (`kv_cache_utils.hash_block_tokens`). Only hit/miss behaviour is observable, so the
//! twin uses 128-bit xxh3 over the same inputs: same chaining, same extra keys
//! (cache_salt on the first block only, LoRA name on every block), far cheaper.

use std::hash::{BuildHasherDefault, Hasher};

use xxhash_rust::xxh3::{xxh3_128, Xxh3};

use crate::request::TokenId;

/// A block's identity in the prefix cache.
pub type BlockHash = u128;

/// The parent of a request's first block. vLLM: `NONE_HASH`.
pub const NONE_HASH: BlockHash = 0x766c_6c6d_2d6e_6f6e_652d_6861_7368_0001;

/// vLLM: `hash_block_tokens(parent, tokens, extra_keys)`.
pub fn hash_block(
    parent: BlockHash,
    tokens: &[TokenId],
    cache_salt: Option<&str>,
    lora_name: Option<&str>,
) -> BlockHash {
    // One-shot hashing of a stack buffer: far cheaper than streaming token by token.
    if cache_salt.is_none() && lora_name.is_none() {
        // Sized for the common block sizes first: zeroing the large buffer costs more
        // than hashing a 64-token block.
        if tokens.len() <= 64 {
            return hash_inline::<{ 24 + 4 * 64 }>(parent, tokens);
        }
        if tokens.len() <= 256 {
            return hash_inline::<{ 24 + 4 * 256 }>(parent, tokens);
        }
    }
    let mut h = Xxh3::new();
    h.update(&parent.to_le_bytes());
    h.update(&(tokens.len() as u64).to_le_bytes());
    for chunk in tokens.chunks(64) {
        let mut buf = [0u8; 256];
        for (i, t) in chunk.iter().enumerate() {
            buf[4 * i..4 * i + 4].copy_from_slice(&t.to_le_bytes());
        }
        h.update(&buf[..4 * chunk.len()]);
    }
    // Tagged and length-prefixed so that no two key sets share a byte stream.
    if let Some(lora) = lora_name {
        h.update(b"\x01lora");
        h.update(&(lora.len() as u64).to_le_bytes());
        h.update(lora.as_bytes());
    }
    if let Some(salt) = cache_salt {
        h.update(b"\x02cache_salt");
        h.update(&(salt.len() as u64).to_le_bytes());
        h.update(salt.as_bytes());
    }
    h.digest128()
}

/// `parent ‖ len ‖ tokens` (little-endian) hashed in one shot from a stack buffer of `N`
/// bytes (`24 + 4·len ≤ N`).
#[inline]
fn hash_inline<const N: usize>(parent: BlockHash, tokens: &[TokenId]) -> BlockHash {
    let mut buf = [0u8; N];
    buf[..16].copy_from_slice(&parent.to_le_bytes());
    buf[16..24].copy_from_slice(&(tokens.len() as u64).to_le_bytes());
    for (dst, t) in buf[24..24 + 4 * tokens.len()]
        .chunks_exact_mut(4)
        .zip(tokens)
    {
        dst.copy_from_slice(&t.to_le_bytes());
    }
    xxh3_128(&buf[..24 + 4 * tokens.len()])
}

/// Block hashes are already uniformly distributed: use their low bits directly.
#[derive(Default)]
pub struct BlockHashHasher(u64);

impl Hasher for BlockHashHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.0 ^= u64::from_le_bytes(b);
        }
    }
    fn write_u128(&mut self, v: u128) {
        self.0 = v as u64 ^ (v >> 64) as u64;
    }
}

pub type BuildBlockHashHasher = BuildHasherDefault<BlockHashHasher>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn salt_and_lora_change_the_hash() {
        let toks = [1, 2, 3, 4];
        let plain = hash_block(NONE_HASH, &toks, None, None);
        assert_ne!(plain, hash_block(NONE_HASH, &toks, Some("a"), None));
        assert_ne!(plain, hash_block(NONE_HASH, &toks, None, Some("a")));
        assert_ne!(
            hash_block(NONE_HASH, &toks, Some("a"), None),
            hash_block(NONE_HASH, &toks, None, Some("a"))
        );
        assert_eq!(plain, hash_block(NONE_HASH, &toks, None, None));
        // The streaming path (long blocks) and the inline path agree on content identity.
        let long: Vec<u32> = (0..300).collect();
        assert_eq!(
            hash_block(NONE_HASH, &long, None, None),
            hash_block(NONE_HASH, &long, None, None)
        );
        let mut other = long.clone();
        other[299] = 7;
        assert_ne!(
            hash_block(NONE_HASH, &long, None, None),
            hash_block(NONE_HASH, &other, None, None)
        );
        assert_ne!(plain, hash_block(plain, &toks, None, None));
    }
}
