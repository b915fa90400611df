//! [`MetricsRecorder`]: the twin's `PrometheusStatLogger`. It owns the
//! registry state, applies vLLM 0.34's update rules to each `record()` call
//! and hands a collected snapshot to the encoders.
//!
//! Pure: no clock, no globals. `_created` comes from the creation time given
//! to [`MetricsRecorder::new`]; `vllm:lora_requests_info` (whose value is
//! "now" in vLLM) uses the time given to [`MetricsRecorder::set_clock`].

use crate::buckets::histogram_buckets;
use crate::exposition::{encode, encode_openmetrics, encode_text, Escaping, Format};
use crate::families::{
    registered_at_construction, spec, FamilyId, FamilySpec, Layout, MetricsConfig,
    KV_OFFLOAD_INFO_KEYS,
};
use crate::model::{Bucket, MetricFamily, MetricType, Series, SeriesValue};
use crate::stats::{
    AdmissionReason, CacheHitSource, ConnectorValue, IterationStats, KvConnectorStats,
    KvFetchStage, MultiModalCacheStats, SchedulerStats,
};
use std::fmt;

/// Why a call was refused. Nothing is changed when an error is returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordError {
    /// `engine_idx` is not one of the configured engine indexes (vLLM
    /// raises `KeyError`).
    UnknownEngine(u32),
    /// `log_engine_initialized()` ran twice (prometheus_client raises
    /// "Duplicated timeseries").
    AlreadyInitialized,
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordError::UnknownEngine(e) => write!(f, "engine index {e} is not configured"),
            RecordError::AlreadyInitialized => {
                write!(
                    f,
                    "log_engine_initialized() already registered vllm:cache_config_info"
                )
            }
        }
    }
}

impl std::error::Error for RecordError {}

#[derive(Debug, Clone)]
enum Value {
    Gauge(f64),
    Counter {
        total: f64,
        created_unix_s: f64,
    },
    /// Non-cumulative counts per bound (last bound is +Inf), as
    /// prometheus_client stores them.
    Histogram {
        counts: Vec<f64>,
        sum: f64,
        created_unix_s: f64,
    },
}

#[derive(Debug, Clone)]
struct SeriesState {
    labels: Vec<(String, String)>,
    value: Value,
}

#[derive(Debug, Clone)]
struct FamilyState {
    spec: &'static FamilySpec,
    /// Histogram upper bounds including the final +Inf.
    bounds: Vec<f64>,
    series: Vec<SeriesState>,
}

impl FamilyState {
    fn new_value(&self, created_unix_s: f64) -> Value {
        match self.spec.kind {
            MetricType::Gauge => Value::Gauge(0.0),
            MetricType::Counter => Value::Counter {
                total: 0.0,
                created_unix_s,
            },
            MetricType::Histogram => Value::Histogram {
                counts: vec![0.0; self.bounds.len()],
                sum: 0.0,
                created_unix_s,
            },
        }
    }
}

/// The twin's `PrometheusStatLogger` for one API server.
#[derive(Debug, Clone)]
pub struct MetricsRecorder {
    config: MetricsConfig,
    created_unix_s: f64,
    now_unix_s: f64,
    /// Configured engine indexes, deduplicated, in the configured order.
    engines: Vec<u32>,
    /// Families in registration order.
    families: Vec<FamilyState>,
    /// `FamilyId as usize` → position in `families`.
    slot: Vec<Option<usize>>,
}

impl MetricsRecorder {
    /// Build the logger: register every family `config` enables and
    /// pre-create all children (so zero-valued series are exposed from the
    /// start), then set the default sleep state (awake). `created_unix_s` is
    /// the `_created` value of every counter and histogram child.
    // vLLM: loggers.py PrometheusStatLogger.__init__()
    pub fn new(config: MetricsConfig, created_unix_s: f64) -> Self {
        let mut engines: Vec<u32> = Vec::new();
        for e in &config.engine_indexes {
            if !engines.contains(e) {
                engines.push(*e);
            }
        }
        let mut rec = Self {
            config,
            created_unix_s,
            now_unix_s: created_unix_s,
            engines,
            families: Vec::new(),
            slot: vec![None; crate::families::FAMILIES.len()],
        };
        for fam in registered_at_construction(&rec.config) {
            rec.register(fam);
        }
        rec.record_sleep_state(0, 0);
        rec
    }

    /// The configuration this recorder was built with.
    pub fn config(&self) -> &MetricsConfig {
        &self.config
    }

    /// Wall-clock time used where vLLM calls `set_to_current_time()`
    /// (`vllm:lora_requests_info`). Defaults to the creation time.
    pub fn set_clock(&mut self, now_unix_s: f64) {
        self.now_unix_s = now_unix_s;
    }

    fn register(&mut self, fam: &'static FamilySpec) {
        let bounds = match fam.buckets {
            Some(b) => {
                let mut v = histogram_buckets(
                    b,
                    self.config.max_model_len,
                    &self.config.custom_histogram_buckets,
                );
                // prometheus_client appends +Inf unless the list already ends with it.
                if v.last() != Some(&f64::INFINITY) {
                    v.push(f64::INFINITY);
                }
                v
            }
            None => Vec::new(),
        };
        let mut state = FamilyState {
            spec: fam,
            bounds,
            series: Vec::new(),
        };
        let model = self.config.served_model_name.clone();
        let engine_labels = |e: u32| -> Vec<(String, String)> {
            vec![
                ("model_name".to_string(), model.clone()),
                ("engine".to_string(), e.to_string()),
            ]
        };
        let mut children: Vec<Vec<(String, String)>> = Vec::new();
        match fam.layout {
            Layout::PerEngine => {
                for e in &self.engines {
                    children.push(engine_labels(*e));
                }
            }
            Layout::ExtraThenEngine => {
                let label = fam.extra_label.unwrap_or("");
                for v in fam.extra_values {
                    for e in &self.engines {
                        let mut l = engine_labels(*e);
                        l.push((label.to_string(), (*v).to_string()));
                        children.push(l);
                    }
                }
            }
            Layout::EngineThenExtra => {
                let label = fam.extra_label.unwrap_or("");
                for e in &self.engines {
                    for v in fam.extra_values {
                        let mut l = engine_labels(*e);
                        l.push((label.to_string(), (*v).to_string()));
                        children.push(l);
                    }
                }
            }
            Layout::EngineThenPosition => {
                let label = fam.extra_label.unwrap_or("");
                let k = self.config.num_speculative_tokens.unwrap_or(0);
                for e in &self.engines {
                    for pos in 0..k {
                        let mut l = engine_labels(*e);
                        l.push((label.to_string(), pos.to_string()));
                        children.push(l);
                    }
                }
            }
            Layout::NoEngine => {
                let label = fam.extra_label.unwrap_or("");
                for v in fam.extra_values {
                    children.push(vec![
                        ("model_name".to_string(), model.clone()),
                        (label.to_string(), (*v).to_string()),
                    ]);
                }
            }
            Layout::CacheConfig => {
                let base = self.config.cache_config.labels();
                for e in &self.engines {
                    let mut l = base.clone();
                    l.push(("engine".to_string(), e.to_string()));
                    children.push(l);
                }
            }
            // Children appear as adapter sets are reported, or on first use.
            Layout::Lora | Layout::OnFirstUse => {}
        }
        for labels in children {
            let value = state.new_value(self.created_unix_s);
            state.series.push(SeriesState { labels, value });
        }
        if fam.layout == Layout::CacheConfig {
            // An info gauge is permanently 1.
            for s in &mut state.series {
                s.value = Value::Gauge(1.0);
            }
        }
        self.slot[fam.id as usize] = Some(self.families.len());
        self.families.push(state);
    }

    /// Register `vllm:cache_config_info` (one child per engine, value 1), as
    /// `AsyncLLM.__init__` does once the engine cores are up.
    // vLLM: loggers.py PrometheusStatLogger.log_engine_initialized() / log_metrics_info()
    pub fn log_engine_initialized(&mut self) -> Result<(), RecordError> {
        if self.slot[FamilyId::CacheConfigInfo as usize].is_some() {
            return Err(RecordError::AlreadyInitialized);
        }
        self.register(spec(FamilyId::CacheConfigInfo));
        Ok(())
    }

    fn engine_pos(&self, engine_idx: u32) -> Result<usize, RecordError> {
        self.engines
            .iter()
            .position(|e| *e == engine_idx)
            .ok_or(RecordError::UnknownEngine(engine_idx))
    }

    fn family_mut(&mut self, id: FamilyId) -> Option<&mut FamilyState> {
        let i = self.slot[id as usize]?;
        self.families.get_mut(i)
    }

    /// Series index of (`extra`, engine position) under the family's layout.
    fn series_index(&self, fam: &FamilyState, extra: usize, epos: usize) -> usize {
        let n = self.engines.len();
        match fam.spec.layout {
            Layout::ExtraThenEngine => extra * n + epos,
            Layout::EngineThenExtra => epos * fam.spec.extra_values.len() + extra,
            Layout::EngineThenPosition => {
                epos * self.config.num_speculative_tokens.unwrap_or(0) + extra
            }
            Layout::NoEngine => extra,
            _ => epos,
        }
    }

    fn with_series(&mut self, id: FamilyId, extra: usize, epos: usize, f: impl FnOnce(&mut Value)) {
        let Some(i) = self.slot[id as usize] else {
            return;
        };
        let idx = self.series_index(&self.families[i], extra, epos);
        if let Some(s) = self.families[i].series.get_mut(idx) {
            f(&mut s.value);
        }
    }

    fn set(&mut self, id: FamilyId, extra: usize, epos: usize, v: f64) {
        self.with_series(id, extra, epos, |val| {
            if let Value::Gauge(g) = val {
                *g = v;
            }
        });
    }

    fn inc(&mut self, id: FamilyId, extra: usize, epos: usize, amount: f64) {
        self.with_series(id, extra, epos, |val| {
            if let Value::Counter { total, .. } = val {
                *total += amount;
            }
        });
    }

    fn observe(&mut self, id: FamilyId, epos: usize, amount: f64) {
        // vLLM: prometheus_client Histogram.observe(): sum first, then the first bucket
        // with amount <= bound (NaN lands nowhere).
        self.observe_n(id, epos, amount, 1);
    }

    /// `count` observations of `amount`: what `count` calls of [`Self::observe`] leave
    /// (the sum is accumulated one addition at a time, so it is bit-identical).
    fn observe_n(&mut self, id: FamilyId, epos: usize, amount: f64, count: u64) {
        if count == 0 {
            return;
        }
        if let Some(i) = self.slot[id as usize] {
            self.observe_at(i, epos, amount, count);
        }
    }

    /// `count` observations of `amount` on series `idx` of family position `fam`.
    fn observe_at(&mut self, fam: usize, idx: usize, amount: f64, count: u64) {
        let fam = &mut self.families[fam];
        let bounds = &fam.bounds;
        if let Some(s) = fam.series.get_mut(idx) {
            if let Value::Histogram { counts, sum, .. } = &mut s.value {
                let mut acc = *sum;
                for _ in 0..count {
                    acc += amount;
                }
                *sum = acc;
                if let Some(b) = bounds.iter().position(|le| amount <= *le) {
                    counts[b] += count as f64;
                }
            }
        }
    }

    /// The child of on-first-use family `id` for engine position `epos` with `extra` labels,
    /// made now if it is new (its `_created` is the clock's time).
    // vLLM: OffloadPromMetrics._get_prometheus_metric (`labels()` on first use)
    fn first_use_series(
        &mut self,
        id: FamilyId,
        epos: usize,
        extra: &[(String, String)],
    ) -> Option<&mut Value> {
        let (i, idx) = self.first_use_index(id, epos, extra)?;
        Some(&mut self.families[i].series[idx].value)
    }

    /// (family position, series index) of [`Self::first_use_series`]'s child.
    fn first_use_index(
        &mut self,
        id: FamilyId,
        epos: usize,
        extra: &[(String, String)],
    ) -> Option<(usize, usize)> {
        let i = self.slot[id as usize]?;
        let engine = self.engines[epos].to_string();
        let fam = &self.families[i];
        let found = fam.series.iter().position(|s| {
            s.labels.get(1).is_some_and(|(_, e)| *e == engine) && s.labels[2..] == *extra
        });
        let idx = match found {
            Some(idx) => idx,
            None => {
                let mut labels = vec![
                    (
                        "model_name".to_string(),
                        self.config.served_model_name.clone(),
                    ),
                    ("engine".to_string(), engine),
                ];
                labels.extend_from_slice(extra);
                let value = fam.new_value(self.now_unix_s);
                let fam = &mut self.families[i];
                fam.series.push(SeriesState { labels, value });
                fam.series.len() - 1
            }
        };
        Some((i, idx))
    }

    /// The offloading connector's payload: its config facts, then each series; transfer
    /// bytes, times and sizes also feed the deprecated `transfer_type` families.
    // vLLM: OffloadPromMetrics.observe (_observe_info, _increase_counter, _set_gauge,
    // _observe_histogram)
    fn record_kv_connector(&mut self, kc: &KvConnectorStats, e: usize) {
        use FamilyId as F;
        if let Some(info) = &kc.info {
            for series in info {
                let labels: Vec<(String, String)> = KV_OFFLOAD_INFO_KEYS
                    .iter()
                    .map(|k| {
                        let v = series
                            .iter()
                            .find(|(name, _)| name == k)
                            .map(|(_, v)| v.clone())
                            .unwrap_or_default();
                        (k.to_string(), v)
                    })
                    .collect();
                if let Some(Value::Gauge(g)) =
                    self.first_use_series(F::KvOffloadConfigInfo, e, &labels)
                {
                    *g = 1.0;
                }
            }
        }
        // Deprecated `transfer_type` children: CPU_to_GPU = 0, GPU_to_CPU = 1.
        for (name, v) in &kc.values {
            let (id, deprecated) = match name.as_str() {
                "vllm:kv_offload_cpu_cache_usage_perc" => (F::KvOffloadCpuCacheUsagePerc, None),
                "vllm:kv_offload_cpu_cache_write_usage_perc" => {
                    (F::KvOffloadCpuCacheWriteUsagePerc, None)
                }
                "vllm:kv_offload_cpu_cache_read_usage_perc" => {
                    (F::KvOffloadCpuCacheReadUsagePerc, None)
                }
                "vllm:kv_offload_cpu_allocation_size" => (F::KvOffloadCpuAllocationSize, None),
                "vllm:kv_offload_load_bytes" => {
                    (F::KvOffloadLoadBytes, Some((F::KvOffloadTotalBytes, 0)))
                }
                "vllm:kv_offload_load_time" => {
                    (F::KvOffloadLoadTime, Some((F::KvOffloadTotalTime, 0)))
                }
                "vllm:kv_offload_load_size" => (F::KvOffloadLoadSize, Some((F::KvOffloadSize, 0))),
                "vllm:kv_offload_store_bytes" => {
                    (F::KvOffloadStoreBytes, Some((F::KvOffloadTotalBytes, 1)))
                }
                "vllm:kv_offload_store_time" => {
                    (F::KvOffloadStoreTime, Some((F::KvOffloadTotalTime, 1)))
                }
                "vllm:kv_offload_store_size" => {
                    (F::KvOffloadStoreSize, Some((F::KvOffloadSize, 1)))
                }
                "vllm:kv_offload_lookup_sync_delay_seconds" => {
                    (F::KvOffloadLookupSyncDelaySeconds, None)
                }
                "vllm:kv_offload_lookup_async_delay_seconds" => {
                    (F::KvOffloadLookupAsyncDelaySeconds, None)
                }
                "vllm:kv_offload_allocation_failure" => (F::KvOffloadAllocationFailure, None),
                // vLLM asserts every key is one of its definitions; an unknown one is dropped.
                _ => continue,
            };
            match v {
                ConnectorValue::Counter(x) => {
                    if let Some(Value::Counter { total, .. }) = self.first_use_series(id, e, &[]) {
                        *total += x;
                    }
                    if let Some((dep, t)) = deprecated {
                        self.inc(dep, t, e, *x);
                    }
                }
                ConnectorValue::Gauge(x) => {
                    if let Some(Value::Gauge(g)) = self.first_use_series(id, e, &[]) {
                        *g = *x;
                    }
                }
                ConnectorValue::Histogram(xs) => {
                    // The child exists once used, even for an empty list.
                    let Some((i, idx)) = self.first_use_index(id, e, &[]) else {
                        continue;
                    };
                    let dep = deprecated.and_then(|(dep, t)| {
                        let di = self.slot[dep as usize]?;
                        Some((di, self.series_index(&self.families[di], t, e)))
                    });
                    for &x in xs {
                        self.observe_at(i, idx, x, 1);
                        if let Some((di, didx)) = dep {
                            self.observe_at(di, didx, x, 1);
                        }
                    }
                }
            }
        }
    }

    /// Apply one engine step / output batch. Any argument may be absent, as
    /// in vLLM: scheduler stats arrive every step, iteration stats only for
    /// batches with at least one request output.
    // vLLM: loggers.py PrometheusStatLogger.record()
    pub fn record(
        &mut self,
        scheduler_stats: Option<&SchedulerStats>,
        iteration_stats: Option<&IterationStats>,
        mm_cache_stats: Option<&MultiModalCacheStats>,
        engine_idx: u32,
    ) -> Result<(), RecordError> {
        let e = self.engine_pos(engine_idx)?;
        if let Some(ss) = scheduler_stats {
            self.record_scheduler(ss, e);
        }
        if let Some(mm) = mm_cache_stats {
            self.inc(FamilyId::MmCacheQueries, 0, e, mm.queries as f64);
            self.inc(FamilyId::MmCacheHits, 0, e, mm.hits as f64);
        }
        if let Some(it) = iteration_stats {
            self.record_iteration(it, e);
        }
        Ok(())
    }

    fn record_scheduler(&mut self, ss: &SchedulerStats, e: usize) {
        use FamilyId as F;
        self.set(F::NumRequestsRunning, 0, e, ss.num_running_reqs as f64);
        // Both waiting queues count as waiting; the split is by reason.
        let total_waiting = ss
            .num_waiting_reqs
            .saturating_add(ss.num_skipped_waiting_reqs);
        self.set(F::NumRequestsWaiting, 0, e, total_waiting as f64);
        self.set(
            F::NumRequestsWaitingByReason,
            0,
            e,
            ss.num_waiting_reqs as f64,
        );
        self.set(
            F::NumRequestsWaitingByReason,
            1,
            e,
            ss.num_skipped_waiting_reqs as f64,
        );
        for (i, stage) in KvFetchStage::ALL.iter().enumerate() {
            let n = ss
                .num_kv_fetch_reqs_by_stage
                .get(stage)
                .copied()
                .unwrap_or(0);
            self.set(F::NumRequestsKvFetchByStage, i, e, n as f64);
        }
        self.set(F::KvCacheUsagePerc, 0, e, ss.kv_cache_usage_frac);

        // Only first admissions count; `preempted_*` is not exported.
        let pc = &ss.prefix_cache_stats;
        self.inc(F::PrefixCacheQueries, 0, e, pc.queries as f64);
        self.inc(F::PrefixCacheHits, 0, e, pc.hits as f64);
        self.inc(
            F::PromptTokensCachedBySource,
            tier_index(CacheHitSource::Device),
            e,
            pc.hits as f64,
        );

        if let Some(cc) = &ss.connector_prefix_cache_stats {
            self.inc(F::ExternalPrefixCacheQueries, 0, e, cc.queries as f64);
            self.inc(F::ExternalPrefixCacheHits, 0, e, cc.hits as f64);
            for (tier, n) in &cc.hits_by_source {
                self.inc(
                    F::PromptTokensCachedBySource,
                    tier_index(*tier),
                    e,
                    *n as f64,
                );
            }
        }

        // vLLM: spec_decode/metrics.py SpecDecodingProm.observe()
        if let Some(sd) = &ss.spec_decoding_stats {
            if self.config.num_speculative_tokens.is_some() {
                self.inc(F::SpecDecodeNumDrafts, 0, e, sd.num_drafts as f64);
                self.inc(
                    F::SpecDecodeNumDraftTokens,
                    0,
                    e,
                    sd.num_draft_tokens as f64,
                );
                self.inc(
                    F::SpecDecodeNumAcceptedTokens,
                    0,
                    e,
                    sd.num_accepted_tokens as f64,
                );
                let k = self.config.num_speculative_tokens.unwrap_or(0);
                for pos in 0..k {
                    // vLLM would IndexError on a short list; count it as 0.
                    let n = sd
                        .num_accepted_tokens_per_pos
                        .get(pos)
                        .copied()
                        .unwrap_or(0);
                    self.inc(F::SpecDecodeNumAcceptedTokensPerPos, pos, e, n as f64);
                }
            }
        }

        // vLLM: perf.py PerfMetricsProm.observe() (skips all-zero stats)
        if let Some(kc) = &ss.kv_connector_stats {
            self.record_kv_connector(kc, e);
        }
        if let Some(ps) = &ss.perf_stats {
            if ps.num_flops_per_gpu != 0
                || ps.num_read_bytes_per_gpu != 0
                || ps.num_write_bytes_per_gpu != 0
            {
                self.inc(F::EstimatedFlopsPerGpu, 0, e, ps.num_flops_per_gpu as f64);
                self.inc(
                    F::EstimatedReadBytesPerGpu,
                    0,
                    e,
                    ps.num_read_bytes_per_gpu as f64,
                );
                self.inc(
                    F::EstimatedWriteBytesPerGpu,
                    0,
                    e,
                    ps.num_write_bytes_per_gpu as f64,
                );
            }
        }

        if self.config.kv_cache_metrics {
            for ev in &ss.kv_cache_eviction_events {
                self.observe(F::KvBlockLifetimeSeconds, e, ev.lifetime_s);
                self.observe(F::KvBlockIdleBeforeEvictSeconds, e, ev.idle_s);
                for gap in &ev.reuse_gaps_s {
                    self.observe(F::KvBlockReuseGapSeconds, e, *gap);
                }
            }
        }

        if let Some(max_lora) = self.config.lora_max_loras {
            let labels = vec![
                ("max_lora".to_string(), max_lora.to_string()),
                (
                    "waiting_lora_adapters".to_string(),
                    ss.waiting_lora_adapters.join(","),
                ),
                (
                    "running_lora_adapters".to_string(),
                    ss.running_lora_adapters.join(","),
                ),
            ];
            let now = self.now_unix_s;
            if let Some(fam) = self.family_mut(F::LoraRequestsInfo) {
                match fam.series.iter_mut().find(|s| s.labels == labels) {
                    Some(s) => s.value = Value::Gauge(now),
                    None => fam.series.push(SeriesState {
                        labels,
                        value: Value::Gauge(now),
                    }),
                }
            }
        }
    }

    fn record_iteration(&mut self, it: &IterationStats, e: usize) {
        use FamilyId as F;
        self.inc(F::CorruptedRequests, 0, e, it.num_corrupted_reqs as f64);
        self.inc(F::WatermarkRequests, 0, e, it.num_watermarked_reqs as f64);
        self.inc(
            F::WatermarkRequests,
            1,
            e,
            it.num_watermark_skipped_reqs as f64,
        );
        self.inc(
            F::WatermarkRequests,
            2,
            e,
            it.num_not_watermarked_reqs as f64,
        );
        self.inc(F::NumPreemptions, 0, e, it.num_preempted_reqs as f64);

        let pts = &it.prompt_token_stats;
        self.inc(F::PromptTokens, 0, e, pts.total as f64);
        self.inc(F::PromptTokensBySource, 0, e, pts.computed as f64);
        self.inc(F::PromptTokensBySource, 1, e, pts.local_cache_hit as f64);
        self.inc(
            F::PromptTokensBySource,
            2,
            e,
            pts.external_kv_transfer as f64,
        );
        self.inc(F::PromptTokensCached, 0, e, pts.cached_tokens as f64);
        self.inc(F::GenerationTokens, 0, e, it.num_generation_tokens as f64);
        // 0.34 counts computed (not cached) prompt tokens per step.
        let iter_tokens = pts.computed.saturating_add(it.num_generation_tokens);
        self.observe(F::IterationTokensTotal, e, iter_tokens as f64);

        for v in &it.max_num_generation_tokens_iter {
            self.observe(F::RequestMaxNumGenerationTokens, e, *v as f64);
        }
        for v in &it.n_params_iter {
            self.observe(F::RequestParamsN, e, *v as f64);
        }
        for v in &it.time_to_first_tokens_iter_s {
            self.observe(F::TimeToFirstTokenSeconds, e, *v);
        }
        for v in &it.inter_token_latencies_iter_s {
            self.observe(F::InterTokenLatencySeconds, e, *v);
        }
        for &(v, n) in &it.inter_token_latency_runs_s {
            self.observe_n(F::InterTokenLatencySeconds, e, v, n);
        }

        for fr in &it.finished_requests {
            let reason = crate::stats::FinishReason::ALL
                .iter()
                .position(|r| *r == fr.finish_reason)
                .unwrap_or(0);
            self.inc(F::RequestSuccess, reason, e, 1.0);
            self.observe(F::E2eRequestLatencySeconds, e, fr.e2e_latency_s);
            self.observe(F::RequestQueueTimeSeconds, e, fr.queued_time_s);
            self.observe(F::RequestPrefillTimeSeconds, e, fr.prefill_time_s);
            self.observe(F::RequestInferenceTimeSeconds, e, fr.inference_time_s);
            self.observe(F::RequestDecodeTimeSeconds, e, fr.decode_time_s);
            self.observe(F::RequestNumPreemptions, e, fr.num_preemptions as f64);
            // New KV computed during prefill: prompt minus (non-negative) hits.
            let kv_computed =
                (fr.num_prompt_tokens as i128 - (fr.num_cached_tokens.max(0)) as i128) as f64;
            self.observe(F::RequestPrefillKvComputedTokens, e, kv_computed);
            self.observe(F::RequestPromptTokens, e, fr.num_prompt_tokens as f64);
            self.observe(
                F::RequestGenerationTokens,
                e,
                fr.num_generation_tokens as f64,
            );
            self.observe(
                F::RequestTimePerOutputTokenSeconds,
                e,
                fr.mean_time_per_output_token_s,
            );
            // Only a truthy max_tokens is observed: None and 0 are skipped.
            if let Some(mt) = fr.max_tokens_param.filter(|m| *m != 0) {
                self.observe(F::RequestParamsMaxTokens, e, mt as f64);
            }
        }
    }

    /// One API-server 503 rejection. This family has no `engine` label.
    // vLLM: loggers.py PrometheusStatLogger.record_admission_rejection()
    pub fn record_admission_rejection(&mut self, reason: AdmissionReason) {
        let i = AdmissionReason::ALL
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(0);
        self.inc(FamilyId::AdmissionRejections, i, 0, 1.0);
    }

    /// `sleep == 1` puts every engine to sleep at `level` 1 (weights
    /// offloaded) or 2 (discard all); anything else means awake.
    // vLLM: loggers.py PrometheusStatLogger.record_sleep_state()
    pub fn record_sleep_state(&mut self, sleep: i64, level: i64) {
        let asleep = sleep == 1;
        let awake = if asleep { 0.0 } else { 1.0 };
        let weights_offloaded = if asleep && level == 1 { 1.0 } else { 0.0 };
        let discard_all = if asleep && level == 2 { 1.0 } else { 0.0 };
        for e in 0..self.engines.len() {
            self.set(FamilyId::EngineSleepState, 2, e, discard_all);
            self.set(FamilyId::EngineSleepState, 1, e, weights_offloaded);
            self.set(FamilyId::EngineSleepState, 0, e, awake);
        }
    }

    /// The collected registry: families in registration order, children in
    /// creation order, histogram buckets cumulative.
    // vLLM: prometheus_client registry.collect()
    pub fn families(&self) -> Vec<MetricFamily> {
        self.families
            .iter()
            .map(|f| MetricFamily {
                name: f.spec.name().to_string(),
                help: f.spec.help.to_string(),
                kind: f.spec.kind,
                series: f
                    .series
                    .iter()
                    .map(|s| Series {
                        labels: s.labels.clone(),
                        value: snapshot_value(&s.value, &f.bounds),
                    })
                    .collect(),
            })
            .collect()
    }

    /// Classic text: the body of vLLM's `GET /metrics`.
    pub fn encode_text(&self) -> String {
        encode_text(&self.families())
    }

    /// What parsing [`Self::encode_text`] gives, without the text
    /// ([`crate::exposition::scrape_text`]): a scrape of this recorder, read.
    pub fn scrape(&self) -> crate::parser::Scrape {
        crate::exposition::scrape_text(&self.families())
    }

    /// OpenMetrics 1.0.0 under `escaping`.
    pub fn encode_openmetrics(&self, escaping: Escaping) -> String {
        encode_openmetrics(&self.families(), escaping)
    }

    /// Any supported format (see [`crate::exposition::negotiate`]).
    pub fn encode(&self, format: Format) -> String {
        encode(&self.families(), format)
    }

    /// Current value of a gauge or counter child whose labels include `want`
    /// (`engine` given as a string, as exposed).
    pub fn value(&self, id: FamilyId, want: &[(&str, &str)]) -> Option<f64> {
        let i = self.slot[id as usize]?;
        let s = self.families[i].series.iter().find(|s| {
            want.iter()
                .all(|(k, v)| s.labels.iter().any(|(lk, lv)| lk == k && lv == v))
        })?;
        match &s.value {
            Value::Gauge(v) => Some(*v),
            Value::Counter { total, .. } => Some(*total),
            Value::Histogram { counts, .. } => Some(counts.iter().sum()),
        }
    }
}

fn tier_index(t: CacheHitSource) -> usize {
    CacheHitSource::ALL
        .iter()
        .position(|x| *x == t)
        .unwrap_or(0)
}

fn snapshot_value(v: &Value, bounds: &[f64]) -> SeriesValue {
    match v {
        Value::Gauge(g) => SeriesValue::Gauge { value: *g },
        Value::Counter {
            total,
            created_unix_s,
        } => SeriesValue::Counter {
            total: *total,
            created_unix_s: *created_unix_s,
        },
        Value::Histogram {
            counts,
            sum,
            created_unix_s,
        } => {
            // prometheus_client accumulates as float, bucket by bucket.
            let mut acc = 0.0;
            let buckets = bounds
                .iter()
                .zip(counts)
                .map(|(le, c)| {
                    acc += *c;
                    Bucket {
                        le: *le,
                        cumulative_count: acc,
                    }
                })
                .collect();
            SeriesValue::Histogram {
                buckets,
                count: acc,
                sum: *sum,
                created_unix_s: *created_unix_s,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::FinishedRequestStats;

    fn all_flags() -> MetricsConfig {
        MetricsConfig {
            engine_indexes: vec![0, 1, 0],
            kv_cache_metrics: true,
            num_speculative_tokens: Some(2),
            kv_consumer: true,
            compute_nans_in_logits: true,
            watermark: true,
            lora_max_loras: Some(4),
            ..MetricsConfig::default()
        }
    }

    #[test]
    fn optional_families_register_in_vllm_order() {
        let mut rec = MetricsRecorder::new(all_flags(), 1.0);
        rec.log_engine_initialized().expect("first");
        assert_eq!(
            rec.log_engine_initialized(),
            Err(RecordError::AlreadyInitialized)
        );
        let names: Vec<String> = rec.families().into_iter().map(|f| f.name).collect();
        assert_eq!(
            names.first().map(String::as_str),
            Some("vllm:spec_decode_num_drafts")
        );
        assert_eq!(
            names.last().map(String::as_str),
            Some("vllm:cache_config_info")
        );
        let pos = |n: &str| names.iter().position(|x| x == n).unwrap_or(usize::MAX);
        assert!(
            pos("vllm:num_requests_waiting_by_reason") < pos("vllm:num_requests_kv_fetch_by_stage")
        );
        assert!(pos("vllm:num_requests_kv_fetch_by_stage") < pos("vllm:engine_sleep_state"));
        assert!(pos("vllm:kv_cache_usage_perc") < pos("vllm:corrupted_requests"));
        assert!(pos("vllm:watermark_requests") < pos("vllm:prefix_cache_queries"));
        assert!(pos("vllm:kv_block_reuse_gap_seconds") < pos("vllm:lora_requests_info"));
        // Duplicate engine indexes collapse, as the per-engine dicts do.
        let fams = rec.families();
        let running = fams.iter().find(|f| f.name == "vllm:num_requests_running");
        assert_eq!(running.map(|f| f.series.len()), Some(2));
        let per_pos = fams
            .iter()
            .find(|f| f.name == "vllm:spec_decode_num_accepted_tokens_per_pos")
            .map(|f| {
                f.series
                    .iter()
                    .map(|s| s.labels[1].1.clone() + &s.labels[2].1)
                    .collect::<Vec<_>>()
            });
        assert_eq!(
            per_pos,
            Some(vec!["00".into(), "01".into(), "10".into(), "11".into()])
        );
    }

    #[test]
    fn unknown_engine_changes_nothing() {
        let mut rec = MetricsRecorder::new(MetricsConfig::default(), 1.0);
        let before = rec.encode_text();
        let ss = SchedulerStats {
            num_running_reqs: 5,
            ..Default::default()
        };
        assert_eq!(
            rec.record(Some(&ss), None, None, 7),
            Err(RecordError::UnknownEngine(7))
        );
        assert_eq!(rec.encode_text(), before);
    }

    #[test]
    fn lora_watermark_corrupted_and_kv_fetch() {
        let mut rec = MetricsRecorder::new(all_flags(), 100.0);
        rec.set_clock(1767225600.5);
        let mut ss = SchedulerStats {
            running_lora_adapters: vec!["b".into(), "a".into()],
            ..Default::default()
        };
        ss.num_kv_fetch_reqs_by_stage
            .insert(KvFetchStage::InProgress, 3);
        let it = IterationStats {
            num_corrupted_reqs: 2,
            num_watermarked_reqs: 1,
            num_not_watermarked_reqs: 4,
            finished_requests: vec![FinishedRequestStats {
                max_tokens_param: Some(0),
                ..Default::default()
            }],
            ..Default::default()
        };
        rec.record(Some(&ss), Some(&it), None, 1).expect("engine 1");
        let text = rec.encode_text();
        assert!(text.contains("vllm:lora_requests_info{max_lora=\"4\",running_lora_adapters=\"b,a\",waiting_lora_adapters=\"\"} 1.7672256005e+09\n"), "{text}");
        assert_eq!(
            rec.value(FamilyId::CorruptedRequests, &[("engine", "1")]),
            Some(2.0)
        );
        assert_eq!(
            rec.value(
                FamilyId::WatermarkRequests,
                &[("engine", "1"), ("status", "not_watermarked")]
            ),
            Some(4.0)
        );
        assert_eq!(
            rec.value(
                FamilyId::NumRequestsKvFetchByStage,
                &[("engine", "1"), ("stage", "in_progress")]
            ),
            Some(3.0)
        );
        // max_tokens 0 is falsy in vLLM: not observed.
        assert_eq!(
            rec.value(FamilyId::RequestParamsMaxTokens, &[("engine", "1")]),
            Some(0.0)
        );
        assert_eq!(
            rec.value(
                FamilyId::RequestSuccess,
                &[("engine", "1"), ("finished_reason", "stop")]
            ),
            Some(1.0)
        );
    }

    #[test]
    fn custom_buckets_replace_defaults() {
        let mut cfg = MetricsConfig::default();
        cfg.custom_histogram_buckets.insert(
            crate::buckets::BucketFamily::TimeToFirstToken,
            vec![0.5, 1e6],
        );
        let rec = MetricsRecorder::new(cfg, 1.0);
        let text = rec.encode_text();
        assert!(text.contains("vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"1e+06\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 0.0\n"));
        assert!(!text.contains("time_to_first_token_seconds_bucket{engine=\"0\",le=\"0.001\""));
    }

    #[test]
    fn inter_token_runs_expose_exactly_like_the_expanded_list() {
        // Intervals whose repeated sum is not `interval * count` in floating point, one on
        // a bucket edge, one past the last finite edge, and a zero count.
        let runs = [
            (0.1, 7u64),
            (0.025, 3),
            (0.3, 0),
            (1e-3, 5),
            (1234.5, 2),
            (0.07, 41),
        ];
        let mut expanded = MetricsRecorder::new(all_flags(), 100.0);
        let mut packed = MetricsRecorder::new(all_flags(), 100.0);
        for step in 0..3 {
            let mut list = IterationStats {
                inter_token_latencies_iter_s: vec![0.2 + step as f64],
                ..Default::default()
            };
            let mut rle = list.clone();
            for &(v, n) in &runs {
                list.inter_token_latencies_iter_s
                    .extend(std::iter::repeat_n(v * (1.0 + step as f64), n as usize));
                rle.inter_token_latency_runs_s
                    .push((v * (1.0 + step as f64), n));
            }
            expanded
                .record(None, Some(&list), None, 0)
                .expect("engine 0");
            packed.record(None, Some(&rle), None, 0).expect("engine 0");
        }
        let text = packed.encode_text();
        assert_eq!(text, expanded.encode_text());
        // Not vacuous: the runs were observed (3 + 3 × 58 intervals).
        assert!(
            text.contains("vllm:inter_token_latency_seconds_count{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 177.0\n"),
            "{text}"
        );
        let naive: f64 = (0..3)
            .map(|k| {
                let f = 1.0 + k as f64;
                0.2 + k as f64 + runs.iter().map(|&(v, n)| v * f * n as f64).sum::<f64>()
            })
            .sum();
        let sum = expanded
            .families()
            .into_iter()
            .find(|f| f.name == "vllm:inter_token_latency_seconds")
            .and_then(|f| match &f.series[0].value {
                SeriesValue::Histogram { sum, .. } => Some(*sum),
                _ => None,
            })
            .expect("histogram");
        // The one-addition-at-a-time sum differs from the multiplied one in the last bits,
        // which is why observe_n adds one at a time.
        assert!((sum - naive).abs() < 1e-9);
    }
}
