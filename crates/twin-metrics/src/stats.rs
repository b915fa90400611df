//! Plain input records for [`crate::MetricsRecorder`], shaped like the stats
//! objects vLLM hands `PrometheusStatLogger.record()`
//! (`vllm/v1/metrics/stats.py`, `vllm/v1/spec_decode/metrics.py`,
//! `vllm/v1/metrics/perf.py`).
//!
//! Field names carry units (`_s` for seconds, `_frac` for 0–1 fractions);
//! serde renames map them onto vLLM's attribute names, so the golden
//! `inputs.json` files deserialize into these types unchanged. Every field
//! has a default, so a producer sets only what it knows.

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Why a request finished (`vllm.v1.engine.FinishReason`, in enum order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FinishReason {
    Stop,
    Length,
    Abort,
    Error,
    Repetition,
}

impl FinishReason {
    /// Enum order: the order of the pre-created `request_success` children.
    pub const ALL: [FinishReason; 5] = [
        FinishReason::Stop,
        FinishReason::Length,
        FinishReason::Abort,
        FinishReason::Error,
        FinishReason::Repetition,
    ];

    /// `str(FinishReason.X)`: the `finished_reason` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Abort => "abort",
            FinishReason::Error => "error",
            FinishReason::Repetition => "repetition",
        }
    }
}

/// Cache tier that supplied prefix-cache hit tokens (`CacheHitSource`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheHitSource {
    Device,
    Host,
    P2p,
    Disk,
    ExternalUnspecified,
}

impl CacheHitSource {
    /// Enum order: the order of the pre-created children.
    pub const ALL: [CacheHitSource; 5] = [
        CacheHitSource::Device,
        CacheHitSource::Host,
        CacheHitSource::P2p,
        CacheHitSource::Disk,
        CacheHitSource::ExternalUnspecified,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CacheHitSource::Device => "device",
            CacheHitSource::Host => "host",
            CacheHitSource::P2p => "p2p",
            CacheHitSource::Disk => "disk",
            CacheHitSource::ExternalUnspecified => "external_unspecified",
        }
    }
}

/// Async KV-load stage of a waiting request (`KV_FETCH_STAGES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KvFetchStage {
    WaitingToStart,
    InProgress,
    CompletedWaiting,
}

impl KvFetchStage {
    pub const ALL: [KvFetchStage; 3] = [
        KvFetchStage::WaitingToStart,
        KvFetchStage::InProgress,
        KvFetchStage::CompletedWaiting,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            KvFetchStage::WaitingToStart => "waiting_to_start",
            KvFetchStage::InProgress => "in_progress",
            KvFetchStage::CompletedWaiting => "completed_waiting",
        }
    }
}

/// Queue limit that rejected an admission (`ADMISSION_REASONS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdmissionReason {
    MaxNumQueuedReqs,
    MaxNumQueuedTokens,
}

impl AdmissionReason {
    pub const ALL: [AdmissionReason; 2] = [
        AdmissionReason::MaxNumQueuedReqs,
        AdmissionReason::MaxNumQueuedTokens,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AdmissionReason::MaxNumQueuedReqs => "max_num_queued_reqs",
            AdmissionReason::MaxNumQueuedTokens => "max_num_queued_tokens",
        }
    }
}

/// Prefix-cache lookups of one step (`PrefixCacheStats`). The scheduler
/// records one entry per admission; re-admissions after preemption go to
/// the `preempted_*` fields, which vLLM does not export.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PrefixCacheStats {
    pub reset: bool,
    pub requests: u64,
    /// Queried tokens.
    pub queries: u64,
    /// Hit tokens.
    pub hits: u64,
    pub preempted_requests: u64,
    pub preempted_queries: u64,
    pub preempted_hits: u64,
    /// Connector stats only: hit tokens per tier.
    pub hits_by_source: BTreeMap<CacheHitSource, u64>,
}

/// Multi-modal processor cache stats (`MultiModalCacheStats`), in items.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MultiModalCacheStats {
    pub reset: bool,
    pub requests: u64,
    pub queries: u64,
    pub hits: u64,
}

/// One sampled KV-block eviction (`KVCacheEvictionEvent`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct KvCacheEvictionEvent {
    #[serde(rename = "lifetime_seconds")]
    pub lifetime_s: f64,
    #[serde(rename = "idle_seconds")]
    pub idle_s: f64,
    #[serde(rename = "reuse_gaps_seconds")]
    pub reuse_gaps_s: Vec<f64>,
}

/// Speculative-decoding counts of one step (`SpecDecodingStats`).
///
/// Deserializes from vLLM's attribute form or from the golden generator's
/// `{num_spec_tokens, drafts: [[drafted, accepted], …]}` form, which is
/// replayed through [`SpecDecodingStats::observe_draft`].
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SpecDecodingStats {
    pub num_spec_tokens: usize,
    pub num_drafts: u64,
    pub num_draft_tokens: u64,
    pub num_accepted_tokens: u64,
    pub num_accepted_tokens_per_pos: Vec<u64>,
    pub num_draft_tokens_per_pos: Vec<u64>,
}

impl SpecDecodingStats {
    /// Empty stats for `k` speculative tokens.
    // vLLM: spec_decode/metrics.py SpecDecodingStats.new()
    pub fn new(num_spec_tokens: usize) -> Self {
        Self {
            num_spec_tokens,
            num_accepted_tokens_per_pos: vec![0; num_spec_tokens],
            num_draft_tokens_per_pos: vec![0; num_spec_tokens],
            ..Self::default()
        }
    }

    /// One request's verify step: `drafted` tokens proposed, the first
    /// `accepted` of them accepted. Positions beyond `k` are ignored rather
    /// than asserted, so bad input cannot panic.
    // vLLM: spec_decode/metrics.py SpecDecodingStats.observe_draft()
    pub fn observe_draft(&mut self, drafted: usize, accepted: usize) {
        self.num_drafts += 1;
        self.num_draft_tokens += drafted as u64;
        self.num_accepted_tokens += accepted as u64;
        for slot in self.num_accepted_tokens_per_pos.iter_mut().take(accepted) {
            *slot += 1;
        }
        for slot in self.num_draft_tokens_per_pos.iter_mut().take(drafted) {
            *slot += 1;
        }
    }
}

#[derive(Deserialize)]
struct SpecDecodingStatsAttrs {
    #[serde(default)]
    num_spec_tokens: usize,
    #[serde(default)]
    num_drafts: u64,
    #[serde(default)]
    num_draft_tokens: u64,
    #[serde(default)]
    num_accepted_tokens: u64,
    #[serde(default)]
    num_accepted_tokens_per_pos: Vec<u64>,
    #[serde(default)]
    num_draft_tokens_per_pos: Vec<u64>,
    /// Golden form: replay these through `observe_draft`.
    #[serde(default)]
    drafts: Option<Vec<(usize, usize)>>,
}

impl<'de> Deserialize<'de> for SpecDecodingStats {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let a = SpecDecodingStatsAttrs::deserialize(d)?;
        if let Some(drafts) = a.drafts {
            let mut s = SpecDecodingStats::new(a.num_spec_tokens);
            for (drafted, accepted) in drafts {
                s.observe_draft(drafted, accepted);
            }
            return Ok(s);
        }
        Ok(SpecDecodingStats {
            num_spec_tokens: a.num_spec_tokens,
            num_drafts: a.num_drafts,
            num_draft_tokens: a.num_draft_tokens,
            num_accepted_tokens: a.num_accepted_tokens,
            num_accepted_tokens_per_pos: a.num_accepted_tokens_per_pos,
            num_draft_tokens_per_pos: a.num_draft_tokens_per_pos,
        })
    }
}

/// Estimated work of one step (`PerfStats`, `--enable-mfu-metrics`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PerfStats {
    pub num_flops_per_gpu: u64,
    pub num_read_bytes_per_gpu: u64,
    pub num_write_bytes_per_gpu: u64,
}

/// Engine-core snapshot of one step (`SchedulerStats`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SchedulerStats {
    pub num_running_reqs: u64,
    /// Waiting for capacity (all waiting queues minus the deferred ones).
    pub num_waiting_reqs: u64,
    /// Deferred by a transient constraint (LoRA budget, KV transfer, …).
    pub num_skipped_waiting_reqs: u64,
    /// `1 − free/(num_gpu_blocks−1)`, 0–1.
    #[serde(rename = "kv_cache_usage")]
    pub kv_cache_usage_frac: f64,
    pub prefix_cache_stats: PrefixCacheStats,
    pub connector_prefix_cache_stats: Option<PrefixCacheStats>,
    pub kv_cache_eviction_events: Vec<KvCacheEvictionEvent>,
    pub spec_decoding_stats: Option<SpecDecodingStats>,
    pub perf_stats: Option<PerfStats>,
    pub num_kv_fetch_reqs_by_stage: BTreeMap<KvFetchStage, u64>,
    /// The KV connector's own stats (`KVConnectorStats.data`): the offloading connector's.
    pub kv_connector_stats: Option<KvConnectorStats>,
    /// Adapter names in the engine's order (a dict in vLLM; its keys are
    /// comma-joined into a label, so order matters).
    #[serde(deserialize_with = "ordered_keys")]
    pub waiting_lora_adapters: Vec<String>,
    #[serde(deserialize_with = "ordered_keys")]
    pub running_lora_adapters: Vec<String>,
}

/// Counts of prompt tokens by where their KV came from (`PromptTokenStats`),
/// summed over requests whose first output is in this batch.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PromptTokenStats {
    /// Prefilled locally (actual compute).
    pub computed: u64,
    pub local_cache_hit: u64,
    pub external_kv_transfer: u64,
    /// `local_cache_hit + external_kv_transfer`.
    pub cached_tokens: u64,
    /// Full prompt lengths, cached included.
    pub total: u64,
}

/// One finished sequence (`FinishedRequestStats`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FinishedRequestStats {
    pub finish_reason: FinishReason,
    pub request_id: Option<String>,
    #[serde(rename = "e2e_latency")]
    pub e2e_latency_s: f64,
    pub num_prompt_tokens: i64,
    pub num_preemptions: u64,
    pub num_generation_tokens: u64,
    /// The request's `max_tokens`; `None` or 0 is not observed.
    pub max_tokens_param: Option<u64>,
    #[serde(rename = "queued_time")]
    pub queued_time_s: f64,
    #[serde(rename = "prefill_time")]
    pub prefill_time_s: f64,
    #[serde(rename = "inference_time")]
    pub inference_time_s: f64,
    #[serde(rename = "decode_time")]
    pub decode_time_s: f64,
    /// TPOT: `decode_time / (num_generation_tokens − 1)`, 0 for one token.
    #[serde(rename = "mean_time_per_output_token")]
    pub mean_time_per_output_token_s: f64,
    pub is_corrupted: bool,
    /// Local + external prefix hits at first admission (may be −1: unknown).
    pub num_cached_tokens: i64,
}

impl Default for FinishedRequestStats {
    fn default() -> Self {
        Self {
            finish_reason: FinishReason::Stop,
            request_id: None,
            e2e_latency_s: 0.0,
            num_prompt_tokens: 0,
            num_preemptions: 0,
            num_generation_tokens: 0,
            max_tokens_param: None,
            queued_time_s: 0.0,
            prefill_time_s: 0.0,
            inference_time_s: 0.0,
            decode_time_s: 0.0,
            mean_time_per_output_token_s: 0.0,
            is_corrupted: false,
            num_cached_tokens: 0,
        }
    }
}

/// Frontend stats of one engine-output batch (`IterationStats`). vLLM makes
/// one only when the batch holds at least one request output.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct IterationStats {
    /// Σ new tokens over the batch's outputs.
    pub num_generation_tokens: u64,
    pub prompt_token_stats: PromptTokenStats,
    /// PREEMPTED events shipped with this batch's outputs.
    pub num_preempted_reqs: u64,
    pub finished_requests: Vec<FinishedRequestStats>,
    /// Per finished parent: max generation tokens over its n children.
    pub max_num_generation_tokens_iter: Vec<u64>,
    /// Per finished parent: its `n`.
    pub n_params_iter: Vec<u64>,
    #[serde(rename = "time_to_first_tokens_iter")]
    pub time_to_first_tokens_iter_s: Vec<f64>,
    #[serde(rename = "inter_token_latencies_iter")]
    pub inter_token_latencies_iter_s: Vec<f64>,
    /// More inter-token latencies, run-length encoded: `(interval, count)` stands for
    /// `count` equal entries appended to `inter_token_latencies_iter_s` (the recorder
    /// observes them after that list, in order, with the same buckets and the same
    /// float sum). A simulator's decode step gives every running request the same
    /// interval, so this keeps a batch of N outputs at one entry instead of N.
    #[serde(
        rename = "inter_token_latency_runs",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub inter_token_latency_runs_s: Vec<(f64, u64)>,
    pub num_corrupted_reqs: u64,
    pub num_watermarked_reqs: u64,
    pub num_watermark_skipped_reqs: u64,
    pub num_not_watermarked_reqs: u64,
}

impl IterationStats {
    /// Back to `IterationStats::default()`, keeping the lists' allocations (a caller that
    /// fills one per engine step reuses it).
    pub fn clear(&mut self) {
        let IterationStats {
            num_generation_tokens,
            prompt_token_stats,
            num_preempted_reqs,
            finished_requests,
            max_num_generation_tokens_iter,
            n_params_iter,
            time_to_first_tokens_iter_s,
            inter_token_latencies_iter_s,
            inter_token_latency_runs_s,
            num_corrupted_reqs,
            num_watermarked_reqs,
            num_watermark_skipped_reqs,
            num_not_watermarked_reqs,
        } = self;
        *num_generation_tokens = 0;
        *prompt_token_stats = PromptTokenStats::default();
        *num_preempted_reqs = 0;
        finished_requests.clear();
        max_num_generation_tokens_iter.clear();
        n_params_iter.clear();
        time_to_first_tokens_iter_s.clear();
        inter_token_latencies_iter_s.clear();
        inter_token_latency_runs_s.clear();
        *num_corrupted_reqs = 0;
        *num_watermarked_reqs = 0;
        *num_watermark_skipped_reqs = 0;
        *num_not_watermarked_reqs = 0;
    }
}

/// Accept a JSON object (keys in document order) or a list of names.
fn ordered_keys<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    struct KeysVisitor;
    impl<'de> Visitor<'de> for KeysVisitor {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a map of adapter names, a list of names, or null")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut keys = Vec::new();
            while let Some((k, _)) = map.next_entry::<String, de::IgnoredAny>()? {
                keys.push(k);
            }
            Ok(keys)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut keys = Vec::new();
            while let Some(k) = seq.next_element::<String>()? {
                keys.push(k);
            }
            Ok(keys)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
    }
    d.deserialize_any(KeysVisitor)
}

/// One series value of a KV connector's stats payload.
#[derive(Debug, Clone, PartialEq)]
pub enum ConnectorValue {
    /// Added to the counter.
    Counter(f64),
    /// The gauge's new value.
    Gauge(f64),
    /// Observations, in order.
    Histogram(Vec<f64>),
}

/// A KV connector's stats for one step (`SchedulerStats.kv_connector_stats`, vLLM's
/// `OffloadingConnectorStats.data`): its unlabelled series by metric name, in payload order,
/// and its config facts on the first step (`info`: label name -> value, one map per series).
/// In JSON: `{"types": {name: type}, "data": {name: [[labels, value], ...]}, "info": [...]}`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KvConnectorStats {
    pub values: Vec<(String, ConnectorValue)>,
    pub info: Option<Vec<Vec<(String, String)>>>,
}

/// Python's `str()` of a JSON scalar (the info labels' values).
fn py_str(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Null => "None".to_string(),
        serde_json::Value::Bool(b) => if *b { "True" } else { "False" }.to_string(),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => i.to_string(),
            (None, Some(f)) => crate::pyfmt::py_float_repr(f),
            _ => n.to_string(),
        },
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl<'de> Deserialize<'de> for KvConnectorStats {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde_json::Value;
        let v = Value::deserialize(d)?;
        let types = v.get("types").and_then(Value::as_object);
        let mut values = Vec::new();
        if let Some(data) = v.get("data").and_then(Value::as_object) {
            for (name, pairs) in data {
                let kind = types
                    .and_then(|t| t.get(name))
                    .and_then(Value::as_str)
                    .ok_or_else(|| de::Error::custom(format!("{name}: no type in \"types\"")))?;
                let pairs = pairs.as_array().ok_or_else(|| {
                    de::Error::custom(format!("{name}: expected [[labels, value], ...]"))
                })?;
                for pair in pairs {
                    let value = pair.get(1).ok_or_else(|| {
                        de::Error::custom(format!("{name}: expected [labels, value]"))
                    })?;
                    if pair
                        .get(0)
                        .and_then(Value::as_array)
                        .is_some_and(|l| !l.is_empty())
                    {
                        return Err(de::Error::custom(format!(
                            "{name}: labelled connector series are not modelled"
                        )));
                    }
                    let num = |x: &Value| {
                        x.as_f64()
                            .ok_or_else(|| de::Error::custom(format!("{name}: expected a number")))
                    };
                    let cv = match kind {
                        "counter" => ConnectorValue::Counter(num(value)?),
                        "gauge" => ConnectorValue::Gauge(num(value)?),
                        "histogram" => ConnectorValue::Histogram(
                            value
                                .as_array()
                                .ok_or_else(|| {
                                    de::Error::custom(format!("{name}: expected a list"))
                                })?
                                .iter()
                                .map(num)
                                .collect::<Result<_, _>>()?,
                        ),
                        other => {
                            return Err(de::Error::custom(format!(
                                "{name}: unknown type {other:?}"
                            )))
                        }
                    };
                    values.push((name.clone(), cv));
                }
            }
        }
        let info = match v.get("info") {
            None | Some(Value::Null) => None,
            Some(Value::Array(series)) => Some(
                series
                    .iter()
                    .map(|s| {
                        s.as_object()
                            .map(|m| m.iter().map(|(k, x)| (k.clone(), py_str(x))).collect())
                            .ok_or_else(|| de::Error::custom("info: expected objects"))
                    })
                    .collect::<Result<_, _>>()?,
            ),
            Some(_) => return Err(de::Error::custom("info: expected a list or null")),
        };
        Ok(KvConnectorStats { values, info })
    }
}

impl Serialize for KvConnectorStats {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde_json::{json, Map, Value};
        let mut types = Map::new();
        let mut data = Map::new();
        for (name, v) in &self.values {
            let (kind, value) = match v {
                ConnectorValue::Counter(x) => ("counter", json!(x)),
                ConnectorValue::Gauge(x) => ("gauge", json!(x)),
                ConnectorValue::Histogram(xs) => ("histogram", json!(xs)),
            };
            types.insert(name.clone(), json!(kind));
            data.entry(name.clone())
                .or_insert_with(|| Value::Array(Vec::new()))
                .as_array_mut()
                .expect("an array")
                .push(json!([[], value]));
        }
        let info = self.info.as_ref().map(|series| {
            series
                .iter()
                .map(|m| Value::Object(m.iter().map(|(k, v)| (k.clone(), json!(v))).collect()))
                .collect::<Vec<_>>()
        });
        json!({"types": types, "data": data, "info": info}).serialize(s)
    }
}
