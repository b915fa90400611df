//! Histogram bucket edges of vLLM 0.34 (`vllm/v1/metrics/buckets.py`).
//!
//! Each core histogram draws its edges from exactly one bucket family; the
//! `+Inf` bucket is appended by the exposition model, not listed here.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// End-to-end, queue, inference, prefill and decode time (seconds).
pub const REQUEST_LATENCY_S: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];
/// Time to first token (seconds).
pub const TIME_TO_FIRST_TOKEN_S: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// Inter-token latency and per-request TPOT (seconds).
pub const INTER_TOKEN_LATENCY_S: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
/// Tokens per engine step.
pub const ITERATION_TOKENS: &[f64] = &[
    1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0,
];
/// The `n` sampling parameter.
pub const REQUEST_PARAMS_N: &[f64] = &[1.0, 2.0, 5.0, 10.0, 20.0];
/// Preemptions per finished request (0 lands in `le="1.0"`).
pub const REQUEST_NUM_PREEMPTIONS: &[f64] = &[1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0];
/// KV-cache block residency (seconds), `--kv-cache-metrics` only.
pub const KV_CACHE_RESIDENCY_S: &[f64] = &[
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0,
    120.0, 300.0, 600.0, 1200.0, 1800.0,
];

/// The bucket families vLLM names (`BucketFamilyKey`); the keys of
/// `--custom-histogram-buckets`.
// vLLM: distributed/kv_transfer/kv_connector/v1/offloading/metrics.py (TRANSFER_SIZE_BUCKETS,
// the lookup delay buckets) and v1/kv_offload/cpu/spec.py (allocation sizes).
pub const KV_OFFLOAD_TRANSFER_SIZE_BYTES: &[f64] =
    &[1e6, 5e6, 10e6, 20e6, 40e6, 60e6, 80e6, 100e6, 150e6, 200e6];
pub const KV_OFFLOAD_LOOKUP_SYNC_DELAY_S: &[f64] = &[
    1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 0.01, 0.05, 0.1, 0.5, 1.0,
];
pub const KV_OFFLOAD_LOOKUP_ASYNC_DELAY_S: &[f64] =
    &[1e-4, 5e-4, 1e-3, 5e-3, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0];
pub const KV_OFFLOAD_CPU_ALLOCATION_SIZE: &[f64] = &[
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0,
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BucketFamily {
    RequestLatency,
    TimeToFirstToken,
    InterTokenLatency,
    IterationTokens,
    RequestParamsN,
    RequestNumPreemptions,
    /// `build_1_2_5_buckets(max_model_len)`.
    RequestTokens,
    KvCacheResidency,
    KvOffloadTransferSize,
    KvOffloadLookupSyncDelay,
    KvOffloadLookupAsyncDelay,
    KvOffloadCpuAllocationSize,
}

/// `build_buckets(mantissas, max_value)`: each mantissa times 1, 10, 100, …
/// while the value stays `<= max_value`.
// vLLM: buckets.py build_buckets()
pub fn build_buckets(mantissas: &[u64], max_value: u64) -> Vec<f64> {
    let mut out = Vec::new();
    if mantissas.is_empty() || mantissas.iter().all(|m| *m == 0) {
        return out; // vLLM would loop forever; an empty list is the sane answer.
    }
    let mut scale: u64 = 1;
    loop {
        for m in mantissas {
            match m.checked_mul(scale) {
                Some(v) if v <= max_value => out.push(v as f64),
                _ => return out,
            }
        }
        scale = match scale.checked_mul(10) {
            Some(s) => s,
            None => return out,
        };
    }
}

/// `build_1_2_5_buckets(max_model_len)`: 1, 2, 5, 10, 20, 50, … `<= max`.
// vLLM: buckets.py build_1_2_5_buckets()
pub fn build_1_2_5_buckets(max_value: u64) -> Vec<f64> {
    build_buckets(&[1, 2, 5], max_value)
}

/// Edges for one family: an override replaces the defaults verbatim.
// vLLM: buckets.py histogram_buckets()
pub fn histogram_buckets(
    family: BucketFamily,
    max_model_len: u64,
    overrides: &BTreeMap<BucketFamily, Vec<f64>>,
) -> Vec<f64> {
    if let Some(custom) = overrides.get(&family) {
        return custom.clone();
    }
    match family {
        BucketFamily::RequestLatency => REQUEST_LATENCY_S.to_vec(),
        BucketFamily::TimeToFirstToken => TIME_TO_FIRST_TOKEN_S.to_vec(),
        BucketFamily::InterTokenLatency => INTER_TOKEN_LATENCY_S.to_vec(),
        BucketFamily::IterationTokens => ITERATION_TOKENS.to_vec(),
        BucketFamily::RequestParamsN => REQUEST_PARAMS_N.to_vec(),
        BucketFamily::RequestNumPreemptions => REQUEST_NUM_PREEMPTIONS.to_vec(),
        BucketFamily::RequestTokens => build_1_2_5_buckets(max_model_len),
        BucketFamily::KvCacheResidency => KV_CACHE_RESIDENCY_S.to_vec(),
        BucketFamily::KvOffloadTransferSize => KV_OFFLOAD_TRANSFER_SIZE_BYTES.to_vec(),
        BucketFamily::KvOffloadLookupSyncDelay => KV_OFFLOAD_LOOKUP_SYNC_DELAY_S.to_vec(),
        BucketFamily::KvOffloadLookupAsyncDelay => KV_OFFLOAD_LOOKUP_ASYNC_DELAY_S.to_vec(),
        BucketFamily::KvOffloadCpuAllocationSize => KV_OFFLOAD_CPU_ALLOCATION_SIZE.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_two_five_series() {
        assert_eq!(
            build_1_2_5_buckets(8192),
            vec![1., 2., 5., 10., 20., 50., 100., 200., 500., 1000., 2000., 5000.]
        );
        let b = build_1_2_5_buckets(131072);
        assert_eq!(b.len(), 16);
        assert_eq!(b.last().copied(), Some(100000.0));
        assert_eq!(build_1_2_5_buckets(100).last().copied(), Some(100.0));
        assert!(build_1_2_5_buckets(0).is_empty());
        // No overflow panic at the top of the range.
        assert!(!build_1_2_5_buckets(u64::MAX).is_empty());
    }
}
