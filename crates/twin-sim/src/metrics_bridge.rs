//! The frontend's side of vLLM's metrics: turns the driver's events into the
//! `SchedulerStats` / `IterationStats` that `PrometheusStatLogger.record()` takes, and
//! keeps a [`MetricsRecorder`] (optionally taking Prometheus-style scrapes in sim time).
//! vLLM: `v1/engine/output_processor.py` + `v1/metrics/stats.py IterationStats`.

use twin_metrics::dcgm::{dcgm_families, DcgmGpu, DcgmSample};
use twin_metrics::stats as ms;
use twin_metrics::{CacheConfigInfo, MetricsConfig, MetricsRecorder, OpenMetricsTimeline};

use crate::driver::{RequestTimes, Startup};
use crate::observe::{FinishedRequest, Observer, StepSample};
use crate::output_processor::Finished;

/// Simulated time 0 on the wall clock of the scrapes (2026-01-01T00:00:00Z).
pub const SIM_EPOCH_UNIX_S: f64 = 1_767_225_600.0;

pub struct MetricsObserver {
    recorder: MetricsRecorder,
    pending: Vec<ms::IterationStats>,
    has_outputs: Vec<bool>,
    scrape_interval_s: Option<f64>,
    next_scrape_s: f64,
    timeline: OpenMetricsTimeline,
    num_scrapes: usize,
    dcgm: DcgmState,
    /// `--enable-mfu-metrics`: feed the estimated FLOPs/bytes counters.
    mfu: bool,
    /// `vllm:kv_offload_config_info`'s labels (`--kv-offloading-size` only).
    kv_offload_info: Option<Vec<(String, String)>>,
    /// Labels Prometheus adds to every series at scrape time (a fleet's `pod`, `instance`);
    /// none for one engine, whose /metrics is what vLLM itself serves.
    target_labels: Vec<(String, String)>,
}

/// Busy-time-weighted GPU activity per engine since the last scrape (dcgm-exporter reads
/// averages over its sampling interval).
struct DcgmState {
    gpus_per_engine: usize,
    gpus: Vec<DcgmGpu>,
    idle_watts: f64,
    fb_used_mib: u64,
    fb_free_mib: u64,
    /// Per engine: (busy s, Σ sm·dur, Σ tensor·dur, Σ dram·dur, Σ power·dur).
    acc: Vec<[f64; 5]>,
}

pub use crate::output_processor::finish_reason;

impl MetricsObserver {
    /// `vllm:cache_config_info` and bucket edges follow the started engine(s).
    pub fn new(
        startup: &Startup,
        served_model_name: &str,
        num_engines: usize,
        kv_cache_metrics: bool,
        scrape_interval_s: Option<f64>,
    ) -> Self {
        let config = metrics_config(startup, served_model_name, num_engines, kv_cache_metrics);
        let gpu = twin_cost::gpu::lookup(startup.plan.gpu_key).ok();
        let gpus_per_engine = (startup.plan.config.tensor_parallel_size
            * startup.plan.config.pipeline_parallel_size)
            .max(1) as usize;
        let mib = |b: u64| b / (1024 * 1024);
        let total = gpu.map_or(0, |g| g.memory_bytes);
        let used = startup.plan.requested_memory_bytes.min(total);
        let dcgm = DcgmState {
            gpus_per_engine,
            gpus: (0..(gpus_per_engine * num_engines) as u32)
                .map(|index| DcgmGpu {
                    index,
                    model_name: gpu.map_or("unknown", |g| g.device_name).to_string(),
                    hostname: "vllm-twin".into(),
                })
                .collect(),
            idle_watts: gpu.map_or(0.0, |g| g.idle_watts),
            fb_used_mib: mib(used),
            fb_free_mib: mib(total - used),
            acc: vec![[0.0; 5]; num_engines],
        };
        let mut recorder = MetricsRecorder::new(config, SIM_EPOCH_UNIX_S);
        // Only fails when called twice.
        let _ = recorder.log_engine_initialized();
        MetricsObserver {
            recorder,
            pending: vec![ms::IterationStats::default(); num_engines],
            has_outputs: vec![false; num_engines],
            scrape_interval_s,
            next_scrape_s: 0.0,
            timeline: OpenMetricsTimeline::new(),
            num_scrapes: 0,
            dcgm,
            mfu: false,
            kv_offload_info: kv_offload_info(startup),
            target_labels: Vec::new(),
        }
    }

    /// Label every series as Prometheus' Kubernetes discovery would a pod's target.
    pub fn with_target_labels(mut self, pod: &str, instance: &str) -> Self {
        self.target_labels = vec![
            ("pod".to_string(), pod.to_string()),
            ("instance".to_string(), instance.to_string()),
        ];
        self.dcgm.set_hostname(pod);
        self
    }

    /// The recorder's families with the target labels in front of each series' own.
    pub fn labelled_families(&self) -> Vec<twin_metrics::MetricFamily> {
        let mut families = self.recorder.families();
        self.label(&mut families);
        families
    }

    fn label(&self, families: &mut [twin_metrics::MetricFamily]) {
        if self.target_labels.is_empty() {
            return;
        }
        for f in families {
            for s in &mut f.series {
                let own = std::mem::take(&mut s.labels);
                s.labels = self.target_labels.iter().cloned().chain(own).collect();
            }
        }
    }

    /// The scrapes taken so far, including the final one `scrapes_openmetrics` adds.
    pub fn timeline(&self) -> &OpenMetricsTimeline {
        &self.timeline
    }

    /// Also record vLLM's estimated FLOPs / bytes counters (`--enable-mfu-metrics`).
    pub fn with_mfu(mut self, on: bool) -> Self {
        self.mfu = on;
        self
    }

    pub fn recorder(&self) -> &MetricsRecorder {
        &self.recorder
    }

    /// Scrapes taken so far plus a final one at `end_s` (the run's last output), as
    /// OpenMetrics with timestamps (`# EOF` terminated).
    pub fn scrapes_openmetrics(&mut self, end_s: f64) -> String {
        self.finish_scrapes(end_s);
        self.timeline.encode()
    }

    /// Take the scrapes due up to `end_s` and a final one at `end_s` (see [`Self::timeline`]).
    pub fn finish_scrapes(&mut self, end_s: f64) {
        self.scrape_until(end_s);
        if let Some(every) = self.scrape_interval_s {
            let last = self.next_scrape_s - every;
            if end_s > last + 1e-3 {
                let window = end_s - last;
                let mut families = self.recorder.families();
                families.extend(self.dcgm.take_families(window));
                self.label(&mut families);
                self.timeline.push(SIM_EPOCH_UNIX_S + end_s, &families);
                self.num_scrapes += 1;
                self.next_scrape_s = end_s + every;
            }
        }
    }

    pub fn num_scrapes(&self) -> usize {
        self.num_scrapes
    }

    fn scrape_until(&mut self, t_s: f64) {
        let Some(every) = self.scrape_interval_s else {
            return;
        };
        while self.next_scrape_s <= t_s {
            let mut families = self.recorder.families();
            families.extend(self.dcgm.take_families(every));
            self.label(&mut families);
            self.timeline
                .push(SIM_EPOCH_UNIX_S + self.next_scrape_s, &families);
            self.num_scrapes += 1;
            self.next_scrape_s += every;
        }
    }
}

impl DcgmState {
    fn set_hostname(&mut self, hostname: &str) {
        for g in &mut self.gpus {
            g.hostname = hostname.to_string();
        }
    }

    /// Averages over the last `window_s` (idle time at idle power), then reset.
    fn take_families(&mut self, window_s: f64) -> Vec<twin_metrics::MetricFamily> {
        let mut samples = Vec::with_capacity(self.gpus.len());
        for a in &mut self.acc {
            let busy = a[0].min(window_s);
            let s = DcgmSample {
                gpu_util: busy / window_s,
                sm_active: a[1] / window_s,
                tensor_active: a[2] / window_s,
                dram_active: a[3] / window_s,
                power_w: (a[4] + self.idle_watts * (window_s - busy).max(0.0)) / window_s,
                fb_used_mib: self.fb_used_mib,
                fb_free_mib: self.fb_free_mib,
            };
            samples.extend(std::iter::repeat_n(s, self.gpus_per_engine));
            *a = [0.0; 5];
        }
        dcgm_families(&self.gpus, &samples)
    }
}

impl Observer for MetricsObserver {
    fn on_first_token(
        &mut self,
        engine: usize,
        t: &RequestTimes,
        _client_seen_s: f64,
        num_prompt_tokens: usize,
    ) {
        self.has_outputs[engine] = true;
        // vLLM's TTFT ends when the API server takes the step up, not when the client has it.
        t.record_first_token(
            &mut self.pending[engine],
            t.stats_stamp_s,
            num_prompt_tokens,
        );
    }

    fn on_inter_tokens(&mut self, engine: usize, itl_s: f64, count: usize, _t_s: f64) {
        self.has_outputs[engine] = true;
        // vLLM observes one interval per request output; the recorder sees each of them,
        // handed over as one (interval, count) run (same buckets, same float sum).
        self.pending[engine]
            .inter_token_latency_runs_s
            .push((itl_s, count as u64));
    }

    fn on_finished(&mut self, engine: usize, r: &FinishedRequest<'_>) {
        self.has_outputs[engine] = true;
        r.times.record_finished(
            &mut self.pending[engine],
            &Finished {
                reason: r.finish_reason,
                // Stamped as the TTFT is (`update_from_finished_request`).
                e2e_s: r.times.stats_stamp_s - r.times.arrival_s,
                num_prompt_tokens: r.num_prompt_tokens,
                max_tokens_param: Some(r.max_tokens as u64),
            },
        );
    }

    fn on_rejected(&mut self, _engine: usize, _req: &twin_workload::RequestSpec) {}

    fn on_step(&mut self, engine: usize, s: &StepSample) {
        if let Some(c) = &s.cost {
            let d = c.gpu_time_s;
            let u = &c.utilisation;
            let a = &mut self.dcgm.acc[engine];
            a[0] += d * u.gpu_util;
            a[1] += d * u.sm_active;
            a[2] += d * u.tensor_active;
            a[3] += d * u.dram_active;
            a[4] += d * u.power_w;
        }
        let Some(st) = &s.stats else { return };
        self.scrape_until(s.t_s);
        let perf = self.mfu.then(|| {
            let c = s.cost.as_ref();
            ms::PerfStats {
                num_flops_per_gpu: c.map_or(0, |c| c.flops as u64),
                num_read_bytes_per_gpu: c.map_or(0, |c| c.bytes_read as u64),
                num_write_bytes_per_gpu: c.map_or(0, |c| c.bytes_written as u64),
            }
        });
        let sched = scheduler_stats(st, perf, self.kv_offload_info.as_deref());
        // An IterationStats exists only when the batch carried request outputs.
        let with_outputs = self.has_outputs[engine] || s.num_outputs > 0;
        let it = &mut self.pending[engine];
        if with_outputs {
            it.num_generation_tokens = s.num_generated_tokens as u64;
            it.num_preempted_reqs = s.num_preempted_events as u64;
        }
        self.has_outputs[engine] = false;
        // Series made on first use (the offloading connector's) are created now.
        self.recorder.set_clock(SIM_EPOCH_UNIX_S + s.t_s);
        // Engine indexes are exactly those configured, so this cannot fail.
        let _ = self.recorder.record(
            Some(&sched),
            with_outputs.then_some(&*it),
            None,
            engine as u32,
        );
        // Recycled for the next step (its lists keep their capacity).
        if with_outputs {
            it.clear();
        }
    }
}

/// vLLM's `SchedulerStats` (as `PrometheusStatLogger.record` takes it) from the engine's.
/// [U] One offloading lookup's scheduler time: vLLM 0.34's
/// `OffloadingConnectorScheduler.get_num_new_matched_tokens` measured 12 µs median (p90 16 µs)
/// over the 212 lookups of two offloading oracle scenarios on this project's CPU host.
pub const OFFLOAD_LOOKUP_S: f64 = 12e-6;

/// The label values of `vllm:kv_offload_config_info` for this deployment
/// (`CPUOffloadingInfo.as_config_info`); `None` without `--kv-offloading-size`.
pub fn kv_offload_info(startup: &Startup) -> Option<Vec<(String, String)>> {
    let n = startup.scheduler.kv_offload_cpu_blocks? as u64;
    let block_bytes = startup.kv_offload_cpu_block_bytes;
    let mml = startup.scheduler.max_model_len as u64;
    let bs = startup.scheduler.block_size as u64;
    let tokens = (n * mml).checked_div(mml.div_ceil(bs)).unwrap_or(0);
    Some(vec![
        ("cpu_num_chunks".into(), n.to_string()),
        ("cpu_blocks_per_chunk".into(), "1".into()),
        (
            "cpu_kv_cache_size_bytes".into(),
            (n * block_bytes).to_string(),
        ),
        ("cpu_kv_cache_size_tokens".into(), tokens.to_string()),
    ])
}

/// The offloading connector's payload (`OffloadingConnectorStats.data`) from the engine's.
fn kv_connector_stats(
    o: &twin_engine::sched::offload::KvOffloadStats,
    info: Option<&[(String, String)]>,
) -> ms::KvConnectorStats {
    use ms::ConnectorValue::{Counter, Gauge, Histogram};
    let mut values: Vec<(String, ms::ConnectorValue)> = Vec::new();
    let mut push = |name: &str, v: ms::ConnectorValue| values.push((name.to_string(), v));
    if o.num_lookups > 0 {
        push(
            "vllm:kv_offload_lookup_sync_delay_seconds",
            Histogram(vec![OFFLOAD_LOOKUP_S; o.num_lookups as usize]),
        );
    }
    if !o.lookup_async_delays_s.is_empty() {
        push(
            "vllm:kv_offload_lookup_async_delay_seconds",
            Histogram(o.lookup_async_delays_s.clone()),
        );
    }
    if o.allocation_failures > 0 {
        push(
            "vllm:kv_offload_allocation_failure",
            Counter(o.allocation_failures as f64),
        );
    }
    for (is_store, dir) in [(false, "load"), (true, "store")] {
        let jobs = o.transfers.iter().filter(|t| t.is_store == is_store);
        let sizes: Vec<f64> = jobs.clone().map(|t| t.bytes as f64).collect();
        if sizes.is_empty() {
            continue;
        }
        push(
            &format!("vllm:kv_offload_{dir}_bytes"),
            Counter(sizes.iter().sum()),
        );
        push(
            &format!("vllm:kv_offload_{dir}_time"),
            Counter(jobs.map(|t| t.time_s).sum()),
        );
        push(&format!("vllm:kv_offload_{dir}_size"), Histogram(sizes));
    }
    push(
        "vllm:kv_offload_cpu_cache_usage_perc",
        Gauge(o.pinned_usage),
    );
    if !o.allocation_sizes.is_empty() {
        push(
            "vllm:kv_offload_cpu_allocation_size",
            Histogram(o.allocation_sizes.iter().map(|&n| n as f64).collect()),
        );
    }
    push(
        "vllm:kv_offload_cpu_cache_write_usage_perc",
        Gauge(o.write_usage),
    );
    push(
        "vllm:kv_offload_cpu_cache_read_usage_perc",
        Gauge((o.pinned_usage - o.write_usage).max(0.0)),
    );
    ms::KvConnectorStats {
        values,
        info: o
            .config_info
            .then(|| info.map(|i| vec![i.to_vec()]))
            .flatten(),
    }
}

pub fn scheduler_stats(
    st: &twin_engine::SchedulerStats,
    perf: Option<ms::PerfStats>,
    kv_offload_info: Option<&[(String, String)]>,
) -> ms::SchedulerStats {
    let pcs = &st.prefix_cache_stats;
    ms::SchedulerStats {
        num_running_reqs: st.num_running_reqs as u64,
        num_waiting_reqs: st.num_waiting_reqs as u64,
        num_skipped_waiting_reqs: st.num_skipped_waiting_reqs as u64,
        kv_cache_usage_frac: st.kv_cache_usage,
        prefix_cache_stats: ms::PrefixCacheStats {
            requests: pcs.requests,
            queries: pcs.queries,
            hits: pcs.hits,
            preempted_requests: pcs.preempted_requests,
            preempted_queries: pcs.preempted_queries,
            preempted_hits: pcs.preempted_hits,
            ..Default::default()
        },
        connector_prefix_cache_stats: st.connector_prefix_cache_stats.map(|c| {
            // The CPU tier is the only connector cache the twin models: its hits come from
            // the host (`OffloadingConnectorScheduler.get_external_cache_hit_sources`).
            let mut hits_by_source = std::collections::BTreeMap::new();
            if c.hits > 0 {
                hits_by_source.insert(ms::CacheHitSource::Host, c.hits);
            }
            ms::PrefixCacheStats {
                requests: c.requests,
                queries: c.queries,
                hits: c.hits,
                preempted_requests: c.preempted_requests,
                preempted_queries: c.preempted_queries,
                preempted_hits: c.preempted_hits,
                hits_by_source,
                ..Default::default()
            }
        }),
        kv_connector_stats: st
            .kv_offload
            .as_ref()
            .map(|o| kv_connector_stats(o, kv_offload_info)),
        kv_cache_eviction_events: st
            .kv_cache_eviction_events
            .iter()
            .map(|e| ms::KvCacheEvictionEvent {
                lifetime_s: e.lifetime_s,
                idle_s: e.idle_s,
                reuse_gaps_s: e.reuse_gaps_s.clone(),
            })
            .collect(),
        perf_stats: perf,
        spec_decoding_stats: st
            .spec_decoding_stats
            .as_ref()
            .map(|sd| ms::SpecDecodingStats {
                num_spec_tokens: sd.num_accepted_tokens_per_pos.len(),
                num_drafts: sd.num_drafts,
                num_draft_tokens: sd.num_draft_tokens,
                num_accepted_tokens: sd.num_accepted_tokens,
                num_accepted_tokens_per_pos: sd.num_accepted_tokens_per_pos.clone(),
                num_draft_tokens_per_pos: sd.num_draft_tokens_per_pos.clone(),
            }),
        num_kv_fetch_reqs_by_stage: ms::KvFetchStage::ALL
            .iter()
            .zip(st.num_kv_fetch_reqs_by_stage)
            .map(|(&stage, n)| (stage, n as u64))
            .collect(),
        ..Default::default()
    }
}

/// The metrics configuration `vllm serve` registers for these engine(s): model name,
/// bucket edges from max_model_len, spec-decode and residency families,
/// `vllm:cache_config_info` after the start-up handshake.
pub fn metrics_config(
    startup: &Startup,
    served_model_name: &str,
    num_engines: usize,
    kv_cache_metrics: bool,
) -> MetricsConfig {
    let s = &startup.scheduler;
    let mut cache_config = CacheConfigInfo::after_handshake(
        (s.num_gpu_blocks * num_engines) as u64,
        s.block_size as u64,
        startup.plan.kv_cache_tokens,
        s.max_model_len as u64,
    );
    cache_config.enable_prefix_caching = s.enable_prefix_caching;
    cache_config.gpu_memory_utilization = Some(startup.plan.config.gpu_memory_utilization);
    cache_config.cache_dtype = startup.plan.config.kv_cache_dtype.name().to_string();
    cache_config.kv_offloading_size = startup.kv_offloading_size_gib;
    MetricsConfig {
        served_model_name: served_model_name.to_string(),
        max_model_len: s.max_model_len as u64,
        engine_indexes: (0..num_engines as u32).collect(),
        kv_cache_metrics,
        num_speculative_tokens: (s.num_speculative_tokens > 0).then_some(s.num_speculative_tokens),
        kv_consumer: startup.scheduler.kv_consumer,
        kv_offload: startup.scheduler.kv_offload_cpu_blocks.is_some(),
        cache_config,
        ..MetricsConfig::default()
    }
}
