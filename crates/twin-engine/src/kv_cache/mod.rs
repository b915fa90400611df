//! Paged KV cache: block pool, prefix hashing, and the manager the scheduler calls.

pub mod block_pool;
pub mod hashing;
pub mod manager;
pub mod offload;
pub mod residency;

pub use block_pool::{BlockPool, KvCacheEvent, KvEvents, NULL_BLOCK_ID};
pub use manager::{AllocateSlots, KVCacheManager};
pub use residency::{KVCacheMetricsCollector, KvCacheEvictionEvent};
