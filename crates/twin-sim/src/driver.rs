//! The virtual-time loop: workload → (DP balancer) → EngineCore per engine, with each
//! step's duration from the cost model. vLLM's latency intervals are computed the way
//! `vllm/v1/metrics/stats.py` computes them (see [`RequestTimes`]).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::ops::Range;
use twin_cost::{
    BatchShape, CostModel, GpuSpec, MemoryPlan, ModelSpec, ServeConfig, SpecMethod, StepCost,
};
use twin_engine::sched::offload::OffloadWorker;
use twin_engine::synthetic::{SyntheticModelRunner, TokenPlan};

use twin_engine::{
    EngineCore, KvTransfer, NewRequest, ReqHandle, SamplingParams, SchedulerConfig,
    SchedulingPolicy, StepReport,
};
use twin_workload::{RequestSpec, Workload, WorkloadSpec};

use crate::api_server::ApiServer;
use crate::observe::{FinishedRequest, Observer, ReplicaUp, StepSample, TimedOutRequest};
use crate::output_processor::{fill_batch_shape, StepTimeline, TokenTiming};
use crate::SimError;

/// API-server work outside the engine: `twin_cost::frontend`'s named constants. TTFT and
/// E2E include them, as vLLM measures from the frontend's arrival.
pub use twin_cost::frontend;

/// Scheduler knobs that are not part of the start-up memory plan.
#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerKnobs {
    pub max_num_active_seqs: Option<usize>,
    pub long_prefill_token_threshold: usize,
    pub long_prefill_token_threshold_adaptive: bool,
    pub enable_prefix_caching: bool,
    pub policy: SchedulingPolicy,
    pub watermark: f64,
    pub scheduler_reserve_full_isl: bool,
    pub prefill_schedule_interval: usize,
    pub cache_aware_admission_window: usize,
    pub cache_aware_admission_threshold: f64,
    /// `--kv-offloading-size` (GiB over all ranks; native backend): CPU KV offloading.
    pub kv_offloading_size_gib: Option<f64>,
    /// `--api-server-count` (vLLM's default: `--data-parallel-size`).
    pub api_server_count: Option<usize>,
    /// `--stream-interval`: the API server streams a chunk every this many tokens.
    pub stream_interval: usize,
    /// `--renderer-num-workers`: threads per API server that tokenize prompts.
    pub renderer_num_workers: usize,
}

impl Default for SchedulerKnobs {
    /// vLLM 0.34's defaults, read from its flag table (`vllm_flags`): what an empty command
    /// line gives.
    fn default() -> Self {
        let none = clap::ArgMatches::default();
        crate::engine_args::scheduler_knobs(&crate::engine_args::VllmValues::new(&none))
            .expect("vLLM's defaults are valid knobs (tested)")
    }
}

/// Everything a simulation needs.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub model: ModelSpec,
    pub gpu: GpuSpec,
    pub serve: ServeConfig,
    pub knobs: SchedulerKnobs,
    pub data_parallel_size: usize,
    pub workload: WorkloadSpec,
    pub seed: u64,
    /// `--kv-cache-metrics` (with `--kv-cache-metrics-sample`, default 0.01).
    pub kv_cache_metrics_sample: Option<f64>,
    /// `--enable-mfu-metrics`: estimated FLOPs / bytes per GPU from the cost model.
    pub enable_mfu_metrics: bool,
    /// Let plain decodes coast (`Scheduler::enable_coasting`): the same steps, batches and
    /// blocks, without visiting every decode every step. Off only to check that claim.
    pub coast_decodes: bool,
    /// `--calibration FILE`: the cost model's terms fitted to a deployment (identity unless given).
    pub calibration: twin_cost::CostCalibration,
}

/// What start-up produced: the plan and the scheduler configuration derived from it.
#[derive(Clone, Debug)]
pub struct Startup {
    pub plan: MemoryPlan,
    pub scheduler: SchedulerConfig,
    /// `--kv-offloading-size` as given (GiB), for `vllm:cache_config_info`.
    pub kv_offloading_size_gib: Option<f64>,
    /// One CPU block's bytes ([`kv_offload_cpu_block_bytes`]).
    pub kv_offload_cpu_block_bytes: u64,
}

/// When the engine's pool is not vLLM's block count (a hybrid model's KV cache groups, which
/// the twin folds into one group holding the same bytes), the line that says so; else `None`.
pub fn modelled_blocks_note(startup: &Startup) -> Option<String> {
    let plan = &startup.plan;
    let modelled = startup.scheduler.num_gpu_blocks as u64;
    (modelled != plan.num_gpu_blocks).then(|| {
        format!(
            "note: vLLM splits these {} blocks between {} KV cache groups (full and sliding-window \
             attention); the twin's scheduler keeps one group of {modelled} blocks holding the \
             same bytes (docs/fidelity.md), so its block counts and KV usage are that pool's",
            plan.num_gpu_blocks,
            plan.num_full_groups + plan.num_sliding_groups
        )
    })
}

/// The speculative-decoding assumption a run rests on, in words (`None` without one): the
/// acceptance the synthetic model draws from is the method's typical curve unless the user gave
/// `acceptance_rate` in `--speculative-config`.
pub fn spec_decode_note(startup: &Startup) -> Option<String> {
    let s = startup.plan.config.speculative.as_ref()?;
    let per_position: Vec<String> = (0..s.num_speculative_tokens as usize)
        .map(|i| format!("{:.2}", s.acceptance(i)))
        .collect();
    Some(format!(
        "note: speculative decoding ({}, {} tokens) assumes a conditional acceptance of {} per \
         draft position ({:.2} accepted drafts per step); set \"acceptance_rate\" (a number or \
         one per position) in --speculative-config to your deployment's measured figures",
        s.method.name(),
        s.num_speculative_tokens,
        per_position.join(", "),
        s.expected_accepted_drafts()
    ))
}

impl Startup {
    /// The GPUs one `vllm serve` of this start-up takes, as a person says it:
    /// `1 × h100-sxm`, `8 × h100-sxm (TP 4, DP 2)`.
    pub fn gpus_phrase(&self, data_parallel_size: usize) -> String {
        let c = &self.plan.config;
        let (tp, pp, dp) = (
            c.tensor_parallel_size as usize,
            c.pipeline_parallel_size as usize,
            data_parallel_size.max(1),
        );
        let parts: Vec<String> = [("TP", tp), ("PP", pp), ("DP", dp)]
            .into_iter()
            .filter(|&(_, n)| n > 1)
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let split = if parts.is_empty() {
            String::new()
        } else {
            format!(" ({})", parts.join(", "))
        };
        format!("{} × {}{split}", tp * pp * dp, self.plan.gpu_key)
    }
}

/// `vllm serve` start-up: memory plan (which may refuse to start) → scheduler config.
pub fn startup(cfg: &SimConfig) -> Result<Startup, SimError> {
    let plan = twin_cost::plan_memory(&cfg.model, &cfg.gpu, &cfg.serve)?;
    let r = &plan.config;
    let (k, lookahead, draft_slots) = match &r.speculative {
        None => (0, 0, 0),
        Some(s) => {
            let k = s.num_speculative_tokens as usize;
            match s.method {
                SpecMethod::Ngram => (k, 0, 0),
                SpecMethod::DraftModel => (k, k, 1),
                _ => (k, k, 0),
            }
        }
    };
    let mnbt = r.max_num_batched_tokens as usize;
    let cpu_block_bytes = kv_offload_cpu_block_bytes(&cfg.model, &cfg.gpu, &plan);
    let scheduler = SchedulerConfig {
        block_size: r.block_size as usize,
        // The engine models one full-attention KV group (docs/fidelity.md).
        num_gpu_blocks: plan.single_group_num_blocks() as usize,
        max_num_batched_tokens: mnbt,
        max_num_scheduled_tokens: mnbt,
        max_num_seqs: r.max_num_seqs as usize,
        max_num_active_seqs: cfg.knobs.max_num_active_seqs,
        long_prefill_token_threshold: cfg.knobs.long_prefill_token_threshold,
        long_prefill_token_threshold_adaptive: cfg.knobs.long_prefill_token_threshold_adaptive,
        enable_prefix_caching: cfg.knobs.enable_prefix_caching,
        enable_chunked_prefill: cfg.serve.enable_chunked_prefill,
        max_model_len: r.max_model_len as usize,
        policy: cfg.knobs.policy,
        watermark: cfg.knobs.watermark,
        scheduler_reserve_full_isl: cfg.knobs.scheduler_reserve_full_isl,
        prefill_schedule_interval: cfg.knobs.prefill_schedule_interval,
        cache_aware_admission_window: cfg.knobs.cache_aware_admission_window,
        cache_aware_admission_threshold: cfg.knobs.cache_aware_admission_threshold,
        num_speculative_tokens: k,
        num_lookahead_tokens: lookahead,
        draft_slots,
        async_scheduling: r.async_scheduling,
        pipeline_parallel_size: r.pipeline_parallel_size as usize,
        kv_cache_metrics_sample: cfg.kv_cache_metrics_sample,
        kv_cache_metrics_seed: cfg.seed,
        // vLLM runs its OffloadingConnector as `kv_both`: a consumer too.
        kv_consumer: cfg.knobs.kv_offloading_size_gib.is_some(),
        kv_offload_cpu_blocks: cfg
            .knobs
            .kv_offloading_size_gib
            .map(|gib| kv_offload_cpu_blocks(cpu_block_bytes, gib)),
    };
    scheduler.validate().map_err(|e| SimError::Config {
        field: format!("--{}", e.field.replace('_', "-")),
        message: e.message,
    })?;
    Ok(Startup {
        plan,
        scheduler,
        kv_offloading_size_gib: cfg.knobs.kv_offloading_size_gib,
        kv_offload_cpu_block_bytes: cpu_block_bytes,
    })
}

/// One engine block's KV bytes on one rank (the twin's single KV group: every attention layer
/// of the rank).
fn rank_block_bytes(plan: &MemoryPlan) -> u64 {
    plan.limiting().kv_bytes_per_token * u64::from(plan.block_size())
}

/// CPU blocks `--kv-offloading-size` buys (the size spans every rank) at `cpu_block_bytes`
/// each. vLLM: `CPUOffloadingSpec.__init__` (`cpu_bytes_to_use // aligned bytes per chunk`).
pub fn kv_offload_cpu_blocks(cpu_block_bytes: u64, size_gib: f64) -> usize {
    let size_bytes = (size_gib * (1u64 << 30) as f64) as u64;
    size_bytes.checked_div(cpu_block_bytes).unwrap_or(0) as usize
}

/// One CPU block's bytes: the scheduler's KV cache config (the first pipeline stage's) gives
/// one rank's bytes per GPU block; every rank keeps its own copy, except MLA's replicated
/// latent under tensor parallelism alone on CUDA (one copy); page-aligned. vLLM:
/// `build_offloading_config` (`worker_kv_bytes_per_block`, `replicated_layout`) and
/// `CPUOffloadingSpec.__init__` (`round_up(kv_bytes_per_chunk, 4096)`).
pub fn kv_offload_cpu_block_bytes(model: &ModelSpec, gpu: &GpuSpec, plan: &MemoryPlan) -> u64 {
    let c = &plan.config;
    let stage0 = plan.ranks[0].kv_bytes_per_token * u64::from(plan.block_size());
    let replicated = model.is_mla()
        && c.tensor_parallel_size > 1
        && c.pipeline_parallel_size == 1
        && !gpu.is_rocm();
    let copies = if replicated { 1 } else { world_size(plan) };
    (stage0 * copies).div_ceil(4096) * 4096
}

fn world_size(plan: &MemoryPlan) -> u64 {
    u64::from(plan.config.tensor_parallel_size * plan.config.pipeline_parallel_size)
}

/// CPU KV offloading's worker for one engine: each rank copies its share of a block over its
/// own host link. The fixed cost of a job ([U] 10 µs: a batch of DMA copies and its event).
pub fn offload_worker(cfg: &SimConfig, startup: &Startup) -> Option<OffloadWorker> {
    startup.scheduler.kv_offload_cpu_blocks?;
    let bytes = rank_block_bytes(&startup.plan);
    let s_per_block = bytes as f64 / cfg.gpu.host_link_bytes_per_s();
    Some(OffloadWorker::new(
        s_per_block,
        s_per_block,
        OFFLOAD_JOB_LATENCY_S,
        bytes,
        world_size(&startup.plan) as u32,
    ))
}

/// [U] The fixed cost of one offloading job (see [`offload_worker`]).
pub const OFFLOAD_JOB_LATENCY_S: f64 = 10e-6;

pub use crate::output_processor::RequestTimes;

/// What the driver keeps per request in the engine. Split hot/cold: the output loop reads
/// `times` every step, the spec and kept outputs only at the end (and for sessions).
struct Tracked {
    times: RequestTimes,
    keeps_outputs: bool,
}

/// The part of a tracked request's state a plain decode output touches, dense by handle
/// (16 bytes, four to a cache line): most outputs need nothing else.
#[derive(Clone, Copy, Default)]
struct DecodeState {
    /// Mirrors `RequestTimes::last_token_s` / `num_generation_tokens`, which are brought
    /// up to date from here before any other use.
    last_token_s: f64,
    num_generation_tokens: u32,
    tracked: bool,
    started: bool,
    keeps_outputs: bool,
    /// Its inter-token intervals go to `TrackedCold::itls_s` (latencies by request).
    keeps_itls: bool,
}

struct TrackedCold {
    spec: RequestSpec,
    /// Output tokens, kept only when a later session turn needs them.
    outputs: Vec<u32>,
    /// Inter-token intervals, kept only when latencies are counted by request: a request
    /// whose client gives up counts in none, and each counts in its own stage.
    itls_s: Vec<f32>,
    pd: PdPhase,
    /// A P/D prefill keeps the client's prompt and `max_tokens` for the decode half.
    handoff_prompt: Vec<u32>,
    handoff_max_tokens: usize,
}

/// A request's part in P/D disaggregation, as the driver tracks it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) enum PdPhase {
    /// Prefill and decode on one instance.
    #[default]
    Whole,
    /// The proxy's `max_tokens=1` request to a prefill instance (`do_remote_decode`).
    Prefill,
    /// The client's request on a decode instance, its prompt's KV pulled from the prefill
    /// instance's `prefill_handle` (`do_remote_prefill`).
    Decode {
        client_arrival_s: f64,
        prefill_engine: usize,
        prefill_handle: ReqHandle,
    },
}

/// A prefill that finished: the proxy now sends the client's request to a decode instance.
pub(crate) struct Handoff {
    pub(crate) spec: RequestSpec,
    pub(crate) t_s: f64,
    pub(crate) prefill_engine: usize,
    pub(crate) prefill_handle: ReqHandle,
}

pub(crate) struct EngineSlot {
    core: EngineCore,
    runner: SyntheticModelRunner,
    cost: CostModel,
    batch: BatchShape,
    /// When this engine next takes a step.
    clock_s: f64,
    /// When the last outputs came out (coasting decodes' previous token).
    last_out_s: f64,
    timeline: StepTimeline,
    tracked: Vec<Option<Tracked>>,
    tracked_cold: Vec<Option<TrackedCold>>,
    decode: Vec<DecodeState>,
    num_in_system: usize,
    /// The frontend's limit: longer prompts are refused before they reach the engine.
    max_model_len: usize,
    /// Bumped each time the engine is queued in [`Engines`]; older queue entries are stale.
    queue_generation: u32,
    /// GPU busy time so far (what DCGM_FI_DEV_GPU_UTIL averages over a scrape).
    busy_s: f64,
    /// P/D prefills finished since the dispatcher last took them.
    pub(crate) handoffs: Vec<Handoff>,
    /// Its last step did nothing and only a KV transfer can change that: it waits to be
    /// woken (an admission, a load landing, blocks read) instead of stepping in place.
    blocked: bool,
    /// The client's timeout (`--request-timeout`): a request that ends later timed out.
    request_timeout_s: Option<f64>,
    /// Keep each request's inter-token intervals (`--stages` or `--request-timeout`).
    keeps_itls: bool,
    /// Its share of the API server, which hands its outputs to the clients.
    api_server: ApiServer,
    /// Requests the frontend accepted that have not reached the engine core yet, by `add_s`.
    pending: VecDeque<PendingRequest>,
}

impl EngineSlot {
    /// A started engine: `rank` is its data-parallel rank, `seed` the replica's seed.
    pub(crate) fn new(
        cfg: &SimConfig,
        startup: &Startup,
        rank: usize,
        seed: u64,
    ) -> Result<Self, SimError> {
        let mut runner =
            SyntheticModelRunner::new(seed ^ (rank as u64) << 32, cfg.model.vocab_size as u32);
        if let Some(s) = &startup.plan.config.speculative {
            runner.acceptance_per_position = (0..s.num_speculative_tokens as usize)
                .map(|i| s.acceptance(i))
                .collect();
        }
        runner.offload_worker = offload_worker(cfg, startup);
        let mut core =
            EngineCore::new(startup.scheduler.clone()).map_err(|e| SimError::Config {
                field: e.field.to_string(),
                message: e.message,
            })?;
        let cost = CostModel::from_plan_with_calibration(
            &cfg.model,
            &cfg.gpu,
            &startup.plan,
            &cfg.calibration,
        )?;
        // Coasting decodes need the cost model's closed form and the runner's tokens.
        if cfg.coast_decodes && cost.costs_decode_groups() {
            if let Some(tokens) = runner.plan.position_keyed() {
                core.enable_coasting(tokens);
            }
        }
        Ok(EngineSlot {
            core,
            runner,
            cost,
            batch: BatchShape::with_capacity(startup.scheduler.max_num_seqs),
            clock_s: 0.0,
            last_out_s: 0.0,
            timeline: StepTimeline::default(),
            tracked: Vec::new(),
            tracked_cold: Vec::new(),
            decode: Vec::new(),
            num_in_system: 0,
            max_model_len: startup.scheduler.max_model_len,
            queue_generation: 0,
            busy_s: 0.0,
            handoffs: Vec::new(),
            blocked: false,
            request_timeout_s: cfg.workload.request_timeout_s,
            keeps_itls: keeps_request_itls(&cfg.workload),
            pending: VecDeque::new(),
            api_server: ApiServer::new(
                cfg.knobs
                    .api_server_count
                    .unwrap_or(cfg.data_parallel_size.max(1)),
                cfg.data_parallel_size,
                cfg.knobs.stream_interval,
                cfg.knobs.renderer_num_workers,
            ),
        })
    }

    pub(crate) fn core(&self) -> &EngineCore {
        &self.core
    }

    pub(crate) fn core_mut(&mut self) -> &mut EngineCore {
        &mut self.core
    }

    /// Requests added and not yet finished.
    pub(crate) fn num_in_system(&self) -> usize {
        self.num_in_system
    }

    /// GPU busy seconds since start-up.
    pub(crate) fn busy_s(&self) -> f64 {
        self.busy_s
    }

    /// The P/D part of tracked request `h`.
    pub(crate) fn pd_phase(&self, h: ReqHandle) -> PdPhase {
        match self.tracked_cold.get(h.index()) {
            Some(Some(c)) => c.pd,
            _ => PdPhase::Whole,
        }
    }

    /// When the engine can next step: a working engine at its clock (taking what reached it by
    /// then), an idle or blocked one when its next request reaches it; `None` with neither.
    fn next_step_s(&self) -> Option<f64> {
        if self.core.has_work() && !self.blocked {
            Some(self.clock_s)
        } else {
            self.pending.front().map(|p| p.add_s.max(self.clock_s))
        }
    }

    /// A dummy batch in a lockstep forward starting at `start_s` (vLLM:
    /// `execute_dummy_batch`): its GPU is busy for the forward and its next batch starts after.
    fn run_dummy_batch(
        &mut self,
        start_s: f64,
        step_s: f64,
        gpu_s: f64,
        engine: usize,
        observer: &mut dyn Observer,
    ) {
        self.timeline.occupy_until(start_s + step_s);
        self.busy_s += gpu_s;
        observer.on_dummy_batch(engine, gpu_s);
    }

    /// Wake the engine at `t_s` (a KV load landed, its blocks were read): it steps no
    /// earlier.
    pub(crate) fn wake_at(&mut self, t_s: f64) {
        self.clock_s = self.clock_s.max(t_s);
        self.blocked = false;
    }
}

/// Latencies are counted by request (success only, by stage) when the client may give up
/// or the run has stages; otherwise as the engine emits them.
pub(crate) fn keeps_request_itls(w: &WorkloadSpec) -> bool {
    w.request_timeout_s.is_some() || matches!(w.arrivals, twin_workload::Arrivals::Staged(_))
}

/// A time as a heap key: simulated times are finite, ordered by `total_cmp`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct TimeKey(pub(crate) f64);

impl Eq for TimeKey {}

impl PartialOrd for TimeKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for TimeKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// Every engine of the run (a fleet's replicas' DP ranks, in order), with the ones that
/// have work queued by their next step time: the earliest first, the lowest index on a tie.
#[derive(Default)]
pub(crate) struct Engines {
    pub(crate) slots: Vec<EngineSlot>,
    next_step: BinaryHeap<Reverse<(TimeKey, usize, u32)>>,
    /// Per engine, the lockstep group it belongs to (an MoE model's DP engines).
    lockstep: Vec<Option<usize>>,
    groups: Vec<LockstepGroup>,
    /// Each lockstep engine's step this round (reused: no allocation per step).
    planned: Vec<Option<PlannedStep>>,
    /// Requests that reached their engines since the run loop last looked.
    entered: Vec<Entered>,
}

impl Engines {
    pub(crate) fn push(&mut self, slot: EngineSlot) -> usize {
        self.slots.push(slot);
        self.lockstep.push(None);
        self.slots.len() - 1
    }

    /// Engines `group` are one `vllm serve`'s DP engines of an MoE model: they step in
    /// lockstep (vLLM: `DPEngineCoreProc`; a dense model's DP engines are independent).
    pub(crate) fn lock_step_if_moe(&mut self, group: Range<usize>) {
        if group.len() <= 1 || self.slots[group.start].cost.dp_lockstep_size() <= 1 {
            return;
        }
        let prefill_schedule_interval = self.slots[group.start]
            .core
            .scheduler()
            .config()
            .prefill_schedule_interval as u64;
        for e in group.clone() {
            self.lockstep[e] = Some(self.groups.len());
            self.slots[e].core.coordinate_prefill_cadence_across_dp();
        }
        self.groups.push(LockstepGroup {
            engines: group,
            step_counter: 0,
            running: false,
            prefill_schedule_interval,
        });
    }

    /// Queue engine `e` at its clock if it has work (after anything that changed either).
    pub(crate) fn requeue(&mut self, e: usize) {
        let slot = &mut self.slots[e];
        slot.queue_generation = slot.queue_generation.wrapping_add(1);
        if let Some(t) = slot.next_step_s() {
            self.next_step
                .push(Reverse((TimeKey(t), e, slot.queue_generation)));
        }
    }

    /// The engine that steps next and when, dropping stale queue entries.
    fn peek_next(&mut self) -> Option<(usize, f64)> {
        while let Some(&Reverse((TimeKey(t), e, generation))) = self.next_step.peek() {
            if self.slots[e].queue_generation == generation {
                return Some((e, t));
            }
            self.next_step.pop();
        }
        None
    }
}

/// vLLM's `--dp-sync-interval` default: DP engines agree whether any has work every this
/// many steps (`_has_global_unfinished_reqs`).
const DP_SYNC_INTERVAL: u64 = 16;

/// An MoE model's DP engines, which step together (vLLM: `DPEngineCoreProc`).
struct LockstepGroup {
    engines: Range<usize>,
    /// Steps since the wave began (vLLM: `step_counter`, shared by the engines).
    step_counter: u64,
    /// Some engine had work after the last step: the wave goes on.
    running: bool,
    prefill_schedule_interval: u64,
}

/// Where requests go and what else happens between steps: one replica's DP balancer for
/// `run`, the fleet's router and autoscaler for `fleet::run_fleet`.
pub(crate) trait Dispatch {
    /// The engine a new request is added to.
    fn route(&mut self, spec: &RequestSpec, engines: &Engines) -> usize;
    /// After engine `e` stepped at `t_s` (its KV cache events, started KV loads and P/D
    /// handoffs are there to take).
    fn after_step(&mut self, _e: usize, _slot: &mut EngineSlot, _t_s: f64) {}
    /// The next request the fleet itself sends (a P/D proxy's decode request), if any.
    fn next_internal_arrival_s(&self) -> Option<f64> {
        None
    }
    /// That request, the engine it goes to and its P/D part.
    fn pop_internal_arrival(
        &mut self,
        _engines: &Engines,
    ) -> Option<(RequestSpec, usize, PdPhase)> {
        None
    }
    /// When the next KV pull lands (P/D), the one timer that can wake a sleeping engine.
    fn next_transfer_s(&self) -> Option<f64> {
        None
    }
    /// The P/D part of a client's request routed to engine `e` (a prefill pool's: `Prefill`).
    fn phase_of_arrival(&self, _e: usize) -> PdPhase {
        PdPhase::Whole
    }
    /// The next control-loop time (autoscaler sync, scrape), if any.
    fn next_timer_s(&self) -> Option<f64> {
        None
    }
    /// Run the control loop due at `t_s`; it may start or drain replicas.
    fn on_timer(
        &mut self,
        _t_s: f64,
        _engines: &mut Engines,
        _observer: &mut dyn Observer,
    ) -> Result<(), SimError> {
        Ok(())
    }
}

/// One `vllm serve` with `--data-parallel-size` engines: vLLM's DP balancer.
struct DataParallel;

impl Dispatch for DataParallel {
    fn route(&mut self, _spec: &RequestSpec, engines: &Engines) -> usize {
        pick_engine(&engines.slots, 0..engines.slots.len())
    }
}

/// Run the simulation to completion, reporting to `observer`.
pub fn run(
    cfg: &SimConfig,
    startup: &Startup,
    observer: &mut dyn Observer,
) -> Result<(), SimError> {
    let mut workload = Workload::new(cfg.workload.clone())?;
    let dp = cfg.data_parallel_size.max(1);
    let mut engines = Engines::default();
    for rank in 0..dp {
        engines.push(EngineSlot::new(cfg, startup, rank, cfg.seed)?);
    }
    engines.lock_step_if_moe(0..dp);
    observer.on_replica_up(&ReplicaUp {
        replica: 0,
        pool: 0,
        name: "vllm",
        engines: 0..dp,
        t_s: 0.0,
        serves_clients: true,
    });
    run_loop(&mut workload, &mut engines, &mut DataParallel, observer)
}

/// The event loop: arrivals, control-loop timers and engine steps, earliest first (a timer
/// before an arrival before a step at the same time).
pub(crate) fn run_loop(
    workload: &mut Workload,
    engines: &mut Engines,
    dispatch: &mut dyn Dispatch,
    observer: &mut dyn Observer,
) -> Result<(), SimError> {
    let mut in_flight_total = 0usize;
    let request_timeout_s = workload.spec().request_timeout_s;
    // Clients' give-up times: (deadline, engine, handle, request id); entries of requests
    // that ended first are skipped when they come due.
    let mut deadlines: BinaryHeap<Reverse<(TimeKey, usize, ReqHandle, u64)>> = BinaryHeap::new();
    loop {
        if observer.should_stop() {
            break;
        }
        let next_client = workload.next_time();
        let next_internal = dispatch.next_internal_arrival_s();
        let next_arrival = match (next_client, next_internal) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let next_engine = engines.peek_next();
        if next_arrival.is_none() && next_engine.is_none() {
            // Every engine waits on a KV pull (P/D): its landing is the next thing to happen.
            if let Some(t) = dispatch.next_transfer_s().filter(|_| in_flight_total > 0) {
                dispatch.on_timer(t, engines, observer)?;
                continue;
            }
            if in_flight_total == 0 || workload.is_exhausted() {
                break;
            }
            return Err(SimError::Stuck);
        }
        let next_work_s = match (next_arrival, next_engine) {
            (Some(a), Some((_, s))) => a.min(s),
            (Some(a), None) => a,
            (None, Some((_, s))) => s,
            (None, None) => unreachable!("checked above"),
        };
        if let Some(timer_s) = dispatch.next_timer_s().filter(|&t| t <= next_work_s) {
            dispatch.on_timer(timer_s, engines, observer)?;
            continue;
        }
        if let Some(&Reverse((TimeKey(d), e, h, id))) = deadlines.peek() {
            if d <= next_work_s {
                deadlines.pop();
                if time_out(&mut engines.slots[e], e, h, id, d, observer, workload) {
                    in_flight_total -= 1;
                    engines.requeue(e);
                }
                continue;
            }
        }
        match (next_arrival, next_engine) {
            (Some(t), engine) if engine.is_none_or(|(_, te)| t <= te) => {
                let (spec, e, phase) = if next_internal == Some(t) {
                    dispatch
                        .pop_internal_arrival(engines)
                        .expect("a due internal arrival")
                } else {
                    let spec = workload.pop_due(t).expect("due arrival");
                    let e = dispatch.route(&spec, engines);
                    (spec, e, dispatch.phase_of_arrival(e))
                };
                let deadline_s = request_timeout_s
                    .filter(|_| phase == PdPhase::Whole)
                    .map(|limit| spec.arrival_time_s + limit);
                let slot = &mut engines.slots[e];
                if admit(slot, e, spec, phase, t, deadline_s, observer, workload) {
                    in_flight_total += 1;
                    engines.requeue(e);
                } else if let PdPhase::Decode {
                    prefill_engine,
                    prefill_handle,
                    ..
                } = phase
                {
                    // The decoder refused it: nothing will read the prefill's blocks, so they
                    // go back now (vLLM: NIXL frees them for a request rejected on the D side).
                    let p = &mut engines.slots[prefill_engine];
                    p.core.finish_kv_send(prefill_handle);
                    p.wake_at(t);
                    engines.requeue(prefill_engine);
                }
            }
            (_, Some((e, t))) => {
                if let Some(group) = engines.lockstep[e] {
                    in_flight_total -=
                        step_lockstep(engines, group, t, dispatch, observer, workload);
                } else {
                    let slot = &mut engines.slots[e];
                    enter_due(slot, e, t, observer, workload, &mut engines.entered);
                    if slot.core.has_work() && !slot.blocked {
                        let finished = step_engine(slot, e, t, observer, workload);
                        in_flight_total -= finished;
                        slot.num_in_system -= finished;
                        dispatch.after_step(e, slot, t);
                    }
                    engines.requeue(e);
                }
                for x in engines.entered.drain(..) {
                    match x {
                        Entered::Deadline(d, e, h, id) => {
                            deadlines.push(Reverse((TimeKey(d), e, h, id)));
                        }
                        Entered::TimedOut => in_flight_total -= 1,
                    }
                }
            }
            (Some(_), None) => unreachable!("handled by the arrival arm"),
            (None, None) => unreachable!("checked above"),
        }
    }
    Ok(())
}

/// The client of request `id` (handle `h` on `engine`) gave up at `t_s`: abort it as vLLM
/// does on a client disconnect (`AsyncLLM.abort`: the output processor drops the request
/// with no finished stats, then `EngineCore.abort_requests` frees its blocks and takes it
/// out of the queue). Returns whether it was still in the engine.
fn time_out(
    slot: &mut EngineSlot,
    engine: usize,
    h: ReqHandle,
    id: u64,
    t_s: f64,
    observer: &mut dyn Observer,
    workload: &mut Workload,
) -> bool {
    let idx = h.index();
    if !matches!(slot.tracked_cold.get(idx), Some(Some(c)) if c.spec.id == id) {
        return false;
    }
    slot.core.abort_request(h);
    slot.runner.forget(h);
    slot.decode[idx].tracked = false;
    slot.tracked[idx] = None;
    let cold = slot.tracked_cold[idx].take().expect("checked above");
    slot.num_in_system -= 1;
    slot.blocked = false;
    observer.on_timed_out(
        engine,
        &TimedOutRequest {
            spec: &cold.spec,
            t_s,
        },
    );
    workload.on_finished(&cold.spec, None, t_s);
    true
}

/// A request the frontend accepted, on its way to the engine core (`add_s`).
struct PendingRequest {
    spec: RequestSpec,
    pd: PdPhase,
    arrival_s: f64,
    add_s: f64,
    /// When its client gives up (`--request-timeout`).
    deadline_s: Option<f64>,
}

/// What the driver learns when pending requests reach their engine.
pub(crate) enum Entered {
    /// Its client's deadline, to watch.
    Deadline(f64, usize, ReqHandle, u64),
    /// Its client gave up before it reached the engine.
    TimedOut,
}

/// An arrived request: refused as vLLM's frontend does (a 400 when the prompt does not fit
/// `max_model_len`), or accepted and on its way to `slot`'s engine, which it reaches after the
/// frontend's time (`frontend_request_s`, then its turn on the renderer). Returns whether it
/// was accepted.
#[allow(clippy::too_many_arguments)]
fn admit(
    slot: &mut EngineSlot,
    engine: usize,
    spec: RequestSpec,
    pd: PdPhase,
    t_s: f64,
    deadline_s: Option<f64>,
    observer: &mut dyn Observer,
    workload: &mut Workload,
) -> bool {
    // The decode half of a P/D request reaches this frontend from the proxy now; the
    // client sent it at `spec.arrival_time_s`.
    let arrival_s = match pd {
        PdPhase::Decode { .. } => t_s,
        _ => spec.arrival_time_s,
    };
    let prompt_len = spec.prompt_token_ids.len();
    if prompt_len == 0 || prompt_len >= slot.max_model_len {
        // vLLM's frontend answers 400: the decoder prompt is longer than max_model_len.
        observer.on_rejected(engine, &spec);
        workload.on_finished(&spec, None, spec.arrival_time_s);
        return false;
    }
    // The request's own path (HTTP, chat template, the hops) runs concurrently with others';
    // tokenization waits its turn on the renderer's worker.
    let ready_s = arrival_s + slot.cost.calibration().frontend_request_s();
    let add_s = slot.api_server.tokenize(ready_s, prompt_len);
    // The frontend keeps arrival order: none overtakes an earlier one on its way in.
    slot.pending.push_back(PendingRequest {
        spec,
        pd,
        arrival_s,
        add_s,
        deadline_s,
    });
    slot.num_in_system += 1;
    true
}

/// Hand `slot`'s pending requests that have reached the engine by `t_s` to its core (vLLM:
/// `EngineCore.add_request` when the input queue is read).
fn enter_due(
    slot: &mut EngineSlot,
    engine: usize,
    t_s: f64,
    observer: &mut dyn Observer,
    workload: &mut Workload,
    entered: &mut Vec<Entered>,
) {
    while slot.pending.front().is_some_and(|p| p.add_s <= t_s) {
        let p = slot.pending.pop_front().expect("checked");
        if let Some(d) = p.deadline_s.filter(|&d| d <= p.add_s) {
            // Its client left before it reached the engine.
            slot.num_in_system -= 1;
            observer.on_timed_out(
                engine,
                &TimedOutRequest {
                    spec: &p.spec,
                    t_s: d,
                },
            );
            workload.on_finished(&p.spec, None, d);
            entered.push(Entered::TimedOut);
            continue;
        }
        let id = p.spec.id;
        let deadline_s = p.deadline_s;
        let h = enter_engine(slot, p);
        if let Some(d) = deadline_s {
            entered.push(Entered::Deadline(d, engine, h, id));
        }
    }
}

/// Add a request that reached `slot`'s engine to its core and start tracking it.
fn enter_engine(slot: &mut EngineSlot, p: PendingRequest) -> ReqHandle {
    let PendingRequest {
        mut spec,
        pd,
        arrival_s,
        add_s,
        ..
    } = p;
    let max_model_len = slot.max_model_len;
    let prompt_len = spec.prompt_token_ids.len();
    let had_work = slot.core.has_work();
    // An unset max_tokens defaults to what fits; a forced one is capped the same way.
    let handoff_max_tokens = spec.max_tokens;
    let max_tokens = if pd == PdPhase::Prefill {
        // The P/D proxy asks the prefill instance for one token.
        1
    } else {
        spec.max_tokens.min(max_model_len - prompt_len)
    };
    let handoff_prompt = if pd == PdPhase::Prefill {
        spec.prompt_token_ids.clone()
    } else {
        Vec::new()
    };
    let h = slot.core.add_request(
        NewRequest {
            request_id: String::new(),
            // The engine owns the prompt; the tracker keeps only the metadata.
            prompt_token_ids: std::mem::take(&mut spec.prompt_token_ids),
            sampling: SamplingParams {
                max_tokens,
                min_tokens: 0,
                stop_token_ids: Vec::new(),
                eos_token_id: None,
            },
            arrival_time_s: arrival_s,
            priority: 0,
            cache_salt: None,
            lora_name: None,
        },
        add_s,
    );
    match pd {
        PdPhase::Whole => {}
        PdPhase::Prefill => slot.core.set_kv_transfer(h, KvTransfer::SendToRemote),
        PdPhase::Decode { .. } => slot.core.set_kv_transfer(h, KvTransfer::LoadFromRemote),
    }
    if slot.tracked.len() <= h.index() {
        slot.tracked.resize_with(h.index() + 1, || None);
        slot.tracked_cold.resize_with(h.index() + 1, || None);
        slot.decode.resize(h.index() + 1, DecodeState::default());
    }
    let keeps_outputs = spec.session.is_some();
    let keeps_itls = slot.keeps_itls;
    if keeps_outputs || keeps_itls {
        // A later turn's prompt is built from every output token; a request's own
        // intervals need every output of it.
        slot.core.never_coast(h);
    }
    slot.decode[h.index()] = DecodeState {
        tracked: true,
        keeps_outputs,
        keeps_itls,
        ..DecodeState::default()
    };
    slot.tracked[h.index()] = Some(Tracked {
        times: {
            let mut times = RequestTimes::new(arrival_s, add_s);
            if let PdPhase::Decode {
                client_arrival_s, ..
            } = pd
            {
                times.client_arrival_s = client_arrival_s;
            }
            times
        },
        keeps_outputs,
    });
    slot.tracked_cold[h.index()] = Some(TrackedCold {
        outputs: if keeps_outputs {
            Vec::with_capacity(max_tokens)
        } else {
            Vec::new()
        },
        itls_s: Vec::new(),
        spec,
        pd,
        handoff_prompt,
        handoff_max_tokens,
    });
    if !had_work {
        // An idle engine wakes for it; a busy one takes it at its next step.
        slot.clock_s = slot.clock_s.max(add_s);
    }
    slot.blocked = false;
    h
}

/// vLLM's DP load balancing among `ranks`: the engine with the fewest waiting (×4) plus
/// running requests. vLLM: `DPLBAsyncMPClient.get_core_engine_for_request`.
pub(crate) fn pick_engine(engines: &[EngineSlot], ranks: std::ops::Range<usize>) -> usize {
    let score = |e: &EngineSlot| {
        let s = e.core.scheduler();
        (s.num_waiting() + e.pending.len()) * 4 + s.running().len()
    };
    let first = ranks.start;
    ranks
        .min_by_key(|&i| (score(&engines[i]), i))
        .unwrap_or(first)
}

/// One lockstep forward of an MoE model's data-parallel engines, due at `t` (vLLM:
/// `DPEngineCoreProc.run_busy_loop`). It starts when every engine's GPU is free of the last
/// one (each MoE layer is a collective across them); every engine with work whose loop is
/// ready by then schedules a batch into it, at its own time (with async scheduling, while the
/// last forward still runs); the rest run a dummy batch (`execute_dummy_batch`). Every engine
/// takes the slowest one's time. Returns how many requests finished.
fn step_lockstep(
    engines: &mut Engines,
    group_index: usize,
    t: f64,
    dispatch: &mut dyn Dispatch,
    observer: &mut dyn Observer,
    workload: &mut Workload,
) -> usize {
    let group = engines.groups[group_index].engines.clone();
    let gpus_free_s = group
        .clone()
        .map(|e| engines.slots[e].timeline.gpu_free_s())
        .fold(0.0, f64::max);
    let start_s = t.max(gpus_free_s);
    let dummy_s = if gpus_free_s < t {
        let cost = &engines.slots[group.start].cost;
        let n = cost.dummy_batch_tokens();
        let all_dummies = cost.dp_step(std::iter::repeat_n(n, group.len()));
        cost.step_time_s_across_dp(&BatchShape::new(), all_dummies.for_engine(n))
            .step_time_s
    } else {
        0.0
    };
    let g = &mut engines.groups[group_index];
    if g.running && gpus_free_s < t {
        // The engines idled: vLLM's stepped dummy batches meanwhile, each counted, until a
        // sync point (step 1 or every `dp_sync_interval`-th) found them all idle.
        let idle_steps = ((t - gpus_free_s) / dummy_s).floor() as u64;
        let next_sync = if g.step_counter < 1 {
            1
        } else {
            (g.step_counter / DP_SYNC_INTERVAL + 1) * DP_SYNC_INTERVAL
        };
        if g.step_counter + idle_steps >= next_sync {
            g.running = false;
        } else {
            g.step_counter += idle_steps;
        }
    }
    if !g.running {
        // A new wave: the engines had paused (vLLM resets the counter then).
        g.step_counter = 0;
    }
    // `_should_throttle_prefills`: prefills only on cadence-aligned steps.
    let throttle = g.prefill_schedule_interval > 1
        && !g.step_counter.is_multiple_of(g.prefill_schedule_interval);
    g.step_counter += 1;
    let mut planned = std::mem::take(&mut engines.planned);
    planned.clear();
    // `sync_cudagraph_and_dp_padding`: each engine's tokens (a dummy batch runs a decode's
    // worth), padded to the largest when every engine's batch fits a CUDA graph.
    let dummy_tokens = engines.slots[group.start].cost.dummy_batch_tokens();
    for e in group.clone() {
        let slot = &mut engines.slots[e];
        // Ready by the forward's start.
        let ready_s = slot.next_step_s().filter(|&r| r <= start_s);
        if let Some(r) = ready_s {
            enter_due(slot, e, r.max(t), observer, workload, &mut engines.entered);
        }
        let steps = ready_s.is_some() && slot.core.has_work() && !slot.blocked;
        slot.core.set_throttle_prefills(throttle);
        let p = steps.then(|| {
            let mut p = plan_step(slot, slot.clock_s.max(t), false);
            p.sample.prefills_throttled = throttle;
            p
        });
        planned.push(p);
    }
    // Each engine's batch, its own or a dummy one, and its tokens.
    let dummy = BatchShape::new();
    let batch_of = |p: &Option<PlannedStep>, slot| lockstep_batch(p, slot, &dummy, dummy_tokens);
    let dp_step = engines.slots[group.start].cost.dp_step(
        group
            .clone()
            .enumerate()
            .map(|(i, e)| batch_of(&planned[i], &engines.slots[e]).1),
    );
    let mut step_s = 0.0f64;
    let mut gpu_s = 0.0f64;
    for (i, e) in group.clone().enumerate() {
        let slot = &engines.slots[e];
        let (batch, own) = batch_of(&planned[i], slot);
        let c = slot
            .cost
            .step_time_s_across_dp(batch, dp_step.for_engine(own));
        step_s = step_s.max(c.step_time_s);
        gpu_s = gpu_s.max(c.gpu_time_s);
        if let Some(p) = planned[i].as_mut().filter(|p| p.runs_batch) {
            p.cost = Some(c);
        }
    }
    let mut finished_total = 0;
    for (i, e) in group.clone().enumerate() {
        let slot = &mut engines.slots[e];
        // Its GPU waits for the others' before the forward's first collective.
        slot.timeline.occupy_until(start_s);
        match planned[i].take() {
            Some(mut p) => {
                if let Some(c) = &mut p.cost {
                    // It waits for the slowest engine at every MoE layer.
                    c.step_time_s = step_s;
                    c.gpu_time_s = gpu_s;
                    c.stage_time_s = step_s;
                }
                let ran = p.cost.is_some();
                let at_s = p.t_s;
                let finished = finish_step(slot, e, at_s, p, observer, workload);
                finished_total += finished;
                slot.num_in_system -= finished;
                if !ran {
                    slot.run_dummy_batch(start_s, step_s, gpu_s, e, observer);
                }
                dispatch.after_step(e, slot, at_s);
            }
            None => slot.run_dummy_batch(start_s, step_s, gpu_s, e, observer),
        }
        engines.requeue(e);
    }
    engines.planned = planned;
    let running = group.clone().any(|e| engines.slots[e].core.has_work());
    engines.groups[group_index].running = running;
    finished_total
}

/// An engine's part of a lockstep forward: its planned batch, or the dummy one, and its
/// tokens.
fn lockstep_batch<'a>(
    planned: &Option<PlannedStep>,
    slot: &'a EngineSlot,
    dummy: &'a BatchShape,
    dummy_tokens: u64,
) -> (&'a BatchShape, u64) {
    match planned {
        Some(p) if p.runs_batch => (&slot.batch, slot.batch.total_tokens()),
        _ => (dummy, dummy_tokens),
    }
}

/// A step an engine scheduled (and whose earlier outputs it applied) before its GPU time is
/// placed: a lockstep group prices every engine's batch together.
pub(crate) struct PlannedStep {
    /// When the engine scheduled it.
    t_s: f64,
    report: StepReport,
    sample: StepSample,
    /// Its batch has tokens (its shape is in `EngineSlot::batch`).
    runs_batch: bool,
    cost: Option<StepCost>,
}

/// One engine step at `t`; returns how many requests finished.
fn step_engine(
    slot: &mut EngineSlot,
    engine: usize,
    t: f64,
    observer: &mut dyn Observer,
    workload: &mut Workload,
) -> usize {
    let planned = plan_step(slot, t, true);
    finish_step(slot, engine, t, planned, observer, workload)
}

/// Schedule engine `slot`'s step at `t` (vLLM: `EngineCore.step` up to the forward), with its
/// batch priced on its own when `price`.
fn plan_step(slot: &mut EngineSlot, t: f64, price: bool) -> PlannedStep {
    let cost = &slot.cost;
    let batch = &mut slot.batch;
    let mut step_cost = None;
    let mut runs_batch = false;
    let mut sample = StepSample::default();
    slot.runner.now_s = t;
    let report = slot.core.step(&mut slot.runner, t, |sched, so| {
        fill_batch_shape(batch, so);
        if so.total_num_scheduled_tokens > 0 {
            runs_batch = true;
            if price {
                step_cost = Some(cost.step_time_s(batch));
            }
        }
        sample.num_scheduled_tokens = so.total_num_scheduled_tokens;
        sample.num_scheduled_reqs = so.scheduled.len() + so.num_coasting;
        sample.num_preempted = so.preempted.len();
        // A decode is one sampled token plus its drafts; anything wider is prefill work.
        sample.num_prefill_tokens = so
            .scheduled
            .iter()
            .filter(|e| !e.samples || e.num_scheduled_tokens > 1 + e.spec_range.len())
            .map(|e| e.num_scheduled_tokens)
            .sum();
        sample.at_token_budget =
            so.total_num_scheduled_tokens >= sched.config().max_num_scheduled_tokens;
    });
    PlannedStep {
        t_s: t,
        report,
        sample,
        runs_batch,
        cost: step_cost,
    }
}

/// Place a planned step's GPU time and deliver the outputs it applied; returns how many
/// requests finished.
fn finish_step(
    slot: &mut EngineSlot,
    engine: usize,
    t: f64,
    planned: PlannedStep,
    observer: &mut dyn Observer,
    workload: &mut Workload,
) -> usize {
    let PlannedStep {
        report,
        mut sample,
        cost: step_cost,
        ..
    } = planned;
    if report.scheduled {
        let (start, end) = slot
            .timeline
            .schedule(t, step_cost.as_ref().map(|c| c.step_time_s));
        sample.start_s = start;
        sample.end_s = end;
        if let Some(c) = &step_cost {
            slot.busy_s += c.gpu_time_s;
        }
        sample.cost = step_cost;
        if let Some(w) = &mut slot.runner.offload_worker {
            w.forward_ended(end);
        }
    }
    let mut finished = 0;
    let mut out_time = t;
    // Runs of equal inter-token intervals, reported as one call each.
    let mut itl_run: Option<(f64, usize)> = None;
    if report.updated_step.is_some() {
        out_time = slot.timeline.pop_outputs(t);
        let outs = slot.core.outputs();
        // When the API server takes them up (/metrics' TTFT and E2E end there) and when the
        // clients have them (theirs end there); the ITL is the engine's.
        // Requests whose first output this is (the engine marks it with the prefill's stats)
        // prime their detokenizers on the whole prompt.
        let first_prompt_tokens: usize = outs
            .outputs
            .iter()
            .filter(|o| o.prefill_stats.is_some() && !outs.new_tokens(o).is_empty())
            .map(|o| o.num_prompt_tokens)
            .sum();
        let delivery = slot.api_server.deliver(
            out_time,
            outs.outputs.len() + outs.num_coasting_tokens,
            first_prompt_tokens,
        );
        let seen_s = delivery.seen_s;
        // Coasts that ended: their tokens were counted as they came; catch up their state.
        for &(h, n) in &outs.coast_exits {
            if let Some(hot) = slot.decode.get_mut(h.index()).filter(|d| d.tracked) {
                hot.num_generation_tokens += n;
                hot.last_token_s = slot.last_out_s;
            }
        }
        if outs.num_coasting_tokens > 0 {
            // Every coasting decode's previous token came with the previous outputs.
            itl_run = Some((out_time - slot.last_out_s, outs.num_coasting_tokens));
        }
        for o in &outs.outputs {
            let idx = o.handle.index();
            let Some(hot) = slot.decode.get_mut(idx).filter(|d| d.tracked) else {
                continue;
            };
            let toks = outs.new_tokens(o);
            if hot.started
                && !toks.is_empty()
                && o.events.is_empty()
                && o.prefill_stats.is_none()
                && o.finish_reason.is_none()
            {
                // A plain decode output: the general path below, on the dense state only.
                let itl = out_time - hot.last_token_s;
                match &mut itl_run {
                    Some((v, n)) if *v == itl => *n += 1,
                    run => {
                        if let Some((v, n)) = run.replace((itl, 1)) {
                            observer.on_inter_tokens(engine, v, n, out_time);
                        }
                    }
                }
                hot.last_token_s = out_time;
                hot.num_generation_tokens += toks.len() as u32;
                if hot.keeps_outputs || hot.keeps_itls {
                    if let Some(Some(cold)) = slot.tracked_cold.get_mut(idx) {
                        if hot.keeps_outputs {
                            cold.outputs.extend_from_slice(toks);
                        }
                        if hot.keeps_itls {
                            cold.itls_s.push(itl as f32);
                        }
                    }
                }
                continue;
            }
            let Some(Some(tr)) = slot.tracked.get_mut(idx) else {
                continue;
            };
            tr.times.last_token_s = hot.last_token_s;
            tr.times.num_generation_tokens = hot.num_generation_tokens as usize;
            tr.times.stats_stamp_s = delivery.stamp_s;
            sample.num_preempted_events += tr.times.apply_events(&o.events);
            tr.times.apply_prefill_stats(o.prefill_stats);
            if let Some(timing) = tr.times.apply_new_tokens(toks.len(), out_time) {
                match timing {
                    TokenTiming::First => {
                        tr.times.first_token_seen_s = Some(seen_s);
                        observer.on_first_token(engine, &tr.times, seen_s, o.num_prompt_tokens)
                    }
                    TokenTiming::Inter { itl_s } => {
                        match &mut itl_run {
                            Some((v, n)) if *v == itl_s => *n += 1,
                            run => {
                                if let Some((v, n)) = run.replace((itl_s, 1)) {
                                    observer.on_inter_tokens(engine, v, n, out_time);
                                }
                            }
                        }
                        if hot.keeps_itls {
                            if let Some(Some(cold)) = slot.tracked_cold.get_mut(idx) {
                                cold.itls_s.push(itl_s as f32);
                            }
                        }
                    }
                }
                hot.started = true;
                hot.last_token_s = out_time;
                hot.num_generation_tokens = tr.times.num_generation_tokens as u32;
                if tr.keeps_outputs {
                    if let Some(Some(cold)) = slot.tracked_cold.get_mut(o.handle.index()) {
                        cold.outputs.extend_from_slice(toks);
                    }
                }
            }
            if let Some(reason) = o.finish_reason {
                slot.decode[idx].tracked = false;
                let tr = slot.tracked[o.handle.index()].take().expect("tracked");
                let cold = slot.tracked_cold[o.handle.index()].take().expect("tracked");
                finished += 1;
                slot.runner.forget(o.handle);
                let e2e_end = seen_s;
                let gave_up_s = slot
                    .request_timeout_s
                    .filter(|_| cold.pd == PdPhase::Whole)
                    .map(|limit| tr.times.client_arrival_s + limit)
                    .filter(|&d| e2e_end > d);
                if let Some(d) = gave_up_s {
                    // The answer came after its client left: the frontend had dropped the
                    // request at `d` (no finished stats), so it counts as timed out.
                    observer.on_timed_out(
                        engine,
                        &TimedOutRequest {
                            spec: &cold.spec,
                            t_s: d,
                        },
                    );
                    workload.on_finished(&cold.spec, None, d);
                    continue;
                }
                observer.on_finished(
                    engine,
                    &FinishedRequest {
                        times: &tr.times,
                        finish_reason: reason,
                        num_prompt_tokens: o.num_prompt_tokens,
                        max_tokens: o.max_tokens,
                        e2e_s: e2e_end - tr.times.arrival_s,
                        stage: cold.spec.stage,
                        itls_s: slot.keeps_itls.then_some(&cold.itls_s[..]),
                    },
                );
                if cold.pd == PdPhase::Prefill {
                    // The proxy has the prefill's answer: the client's request goes on to a
                    // decode instance; the client has seen nothing yet.
                    let mut spec = cold.spec;
                    spec.prompt_token_ids = cold.handoff_prompt;
                    spec.max_tokens = cold.handoff_max_tokens;
                    slot.handoffs.push(Handoff {
                        spec,
                        t_s: e2e_end,
                        prefill_engine: engine,
                        prefill_handle: o.handle,
                    });
                } else {
                    workload.on_finished(&cold.spec, Some(&cold.outputs), e2e_end);
                }
            }
        }
        if let Some((v, n)) = itl_run {
            observer.on_inter_tokens(engine, v, n, out_time);
        }
        sample.stats = Some(outs.scheduler_stats.clone());
        sample.num_outputs = outs.outputs.len() + outs.num_coasting_tokens;
        sample.num_generated_tokens = outs.tokens.len() + outs.num_coasting_tokens;
        slot.last_out_s = out_time;
    }
    sample.t_s = out_time;
    observer.on_step(engine, &sample);
    // Sync waits for its batch; async returns at once after a fill-up schedule.
    slot.clock_s = if report.updated_step.is_some() {
        out_time
    } else {
        t
    };
    if report.idle {
        slot.clock_s = t;
    }
    let did_nothing = report.scheduled
        && !report.model_executed
        && !slot.core.has_in_flight_tokens()
        && sample.num_outputs == 0;
    // vLLM's engine spins on empty steps while offloading copies run; the twin steps next
    // when the first of them is done.
    let copy_done_s = slot
        .runner
        .offload_worker
        .as_ref()
        .and_then(OffloadWorker::next_done_s);
    if let (true, Some(done_s)) = (did_nothing, copy_done_s) {
        slot.clock_s = slot.clock_s.max(done_s);
        slot.blocked = false;
        return finished;
    }
    if did_nothing && slot.runner.offload_worker.is_some() && slot.core.num_in_flight_batches() > 0
    {
        // A finished copy rides in a queued (empty) batch: the next step applies it.
        slot.blocked = false;
        return finished;
    }
    slot.blocked = did_nothing && slot.core.scheduler().has_pending_kv_transfers();
    finished
}
