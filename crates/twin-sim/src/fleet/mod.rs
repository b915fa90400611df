//! A fleet: N independent vLLM instances (each its own EngineCore(s), KV pool, prefix cache,
//! DP ranks and cost model) behind a router, in the driver's one event loop: every engine of
//! every replica is queued by its next step time, so the fleet needs no threads to be
//! deterministic. Same inputs and seed → same bytes.

pub mod autoscale;
pub mod metrics;
pub mod prefix_index;
pub mod report;
pub mod router;
pub mod spec;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use twin_engine::{KvEvents, ReqHandle};
use twin_workload::{RequestSpec, Workload, WorkloadSpec};

use crate::driver::{pick_engine, run_loop, Dispatch, EngineSlot, Engines, Handoff, PdPhase};
use crate::observe::{FinishedRequest, Observer, ReplicaUp, StepSample};
use crate::report::{Report, ReportBuilder, Slo};
use crate::{RequestTimes, SimConfig, SimError, Startup};

use autoscale::{AutoscaleSpec, Autoscaler, PodSample, HPA_SYNC_PERIOD_S};
pub use prefix_index::MAX_INDEXED_REPLICAS;
pub use router::{ReplicaLoad, Router, RouterConfig, RouterKind, ScorerWeights};

/// The most replicas a fleet runs (each is a full engine with its own KV pool).
pub const MAX_REPLICAS: usize = 1024;

/// Replicas of one configuration (`--replica-spec`'s pools; `--replicas N` is one pool).
#[derive(Clone, Debug)]
pub struct Pool {
    pub name: String,
    pub replicas: usize,
    /// Its part in P/D disaggregation (`--pd`, or a spec pool's `role`).
    pub role: PoolRole,
    /// The engine side of the pool's flags (its `workload` is unused: traffic is fleet-wide).
    pub config: SimConfig,
    pub startup: Startup,
}

#[derive(Clone, Debug)]
pub struct FleetConfig {
    pub pools: Vec<Pool>,
    pub router: RouterConfig,
    pub workload: WorkloadSpec,
    pub seed: u64,
    pub autoscale: Option<AutoscaleConfig>,
    /// P/D disaggregation's KV link (`None`: every replica prefills and decodes).
    pub pd: Option<KvLink>,
}

/// A pool's part in P/D disaggregation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolRole {
    /// Prefill and decode (no disaggregation).
    #[default]
    Both,
    /// Takes the clients' requests from the proxy with `max_tokens=1` and
    /// `do_remote_decode`; its KV is read by a decode instance.
    Prefill,
    /// Gets each request after its prefill, with `do_remote_prefill`: pulls the prompt's KV
    /// and decodes.
    Decode,
}

/// The KV transfer link between prefill and decode instances (NIXL over RDMA).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct KvLink {
    /// Per GPU: each TP rank of the decoder reads its shard from its peer in parallel.
    pub gbytes_per_s: f64,
    /// Per transfer: NIXL's handshake, descriptor set-up and completion notification.
    pub latency_s: f64,
}

impl KvLink {
    /// 400 Gb/s (an NDR InfiniBand or RoCE NIC per GPU, as in llm-d's P/D guides).
    pub const DEFAULT_GBYTES_PER_S: f64 = 50.0;
    /// One RDMA read round plus NIXL's notification.
    pub const DEFAULT_LATENCY_S: f64 = 0.001;

    /// How long pulling `bytes` takes.
    pub fn transfer_s(&self, bytes: f64) -> f64 {
        self.latency_s + bytes / (self.gbytes_per_s * 1e9)
    }
}

/// `--autoscale`: the control loop and what a new pod costs to start.
#[derive(Clone, Debug)]
pub struct AutoscaleConfig {
    pub spec: AutoscaleSpec,
    /// The pool it scales (the one named by `scaleTargetRef.name`).
    pub pool: usize,
    pub pod_startup: PodStartup,
    /// How often Prometheus scrapes the replicas.
    pub scrape_interval_s: f64,
}

/// What a scale-up waits for before the new pod serves.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct PodStartup {
    /// Scheduling the pod on a node with a free GPU.
    pub scheduling_s: f64,
    /// Pulling the vLLM image (0 when the node has it).
    pub image_pull_s: f64,
    /// Loading the weights onto the GPUs.
    pub weight_load_s: f64,
    /// vLLM's own start-up: memory profiling, KV allocation, CUDA graph capture.
    pub engine_init_s: f64,
}

/// Pod start-up constants (docs/fleet.md says where they come from).
pub mod startup_times {
    /// kube-scheduler binding plus the kubelet starting the container.
    pub const SCHEDULING_S: f64 = 2.0;
    /// `vllm/vllm-openai` (~10 GB compressed layers) at ~250 MB/s from a registry.
    pub const IMAGE_PULL_S: f64 = 40.0;
    /// vLLM 0.34 start-up besides weights: profiling run, KV allocation, torch.compile cache
    /// hit and CUDA graph capture of the default sizes.
    pub const ENGINE_INIT_S: f64 = 25.0;
    /// The same with `--enforce-eager` (no graphs to capture).
    pub const ENGINE_INIT_EAGER_S: f64 = 8.0;
    /// `--preload`: weights resident in host memory, copied over PCIe Gen5 (~25 GB/s).
    pub const PRELOAD_GBPS: f64 = 25.0;
}

impl PodStartup {
    /// A pod of `pool`: weights from the memory plan (every rank's shard), loaded at
    /// `weight_load_gbps` GB/s, or from host memory with `preload` (image already on the node).
    pub fn for_pool(pool: &Pool, weight_load_gbps: f64, preload: bool) -> Self {
        let c = &pool.startup.plan.config;
        let ranks = (c.tensor_parallel_size * c.pipeline_parallel_size).max(1) as f64;
        let weights_gb = pool.startup.plan.weights_bytes() as f64 * ranks / 1e9;
        let dp = pool.config.data_parallel_size.max(1) as f64;
        let gbps = if preload {
            startup_times::PRELOAD_GBPS
        } else {
            weight_load_gbps
        };
        PodStartup {
            scheduling_s: startup_times::SCHEDULING_S,
            image_pull_s: if preload {
                0.0
            } else {
                startup_times::IMAGE_PULL_S
            },
            weight_load_s: weights_gb * dp / gbps,
            engine_init_s: if c.enforce_eager {
                startup_times::ENGINE_INIT_EAGER_S
            } else {
                startup_times::ENGINE_INIT_S
            },
        }
    }

    pub fn total_s(&self) -> f64 {
        self.scheduling_s + self.image_pull_s + self.weight_load_s + self.engine_init_s
    }
}

impl FleetConfig {
    pub fn num_replicas(&self) -> usize {
        self.pools.iter().map(|p| p.replicas).sum()
    }

    /// Engines of the replicas it starts with (each replica's DP ranks).
    pub fn num_engines(&self) -> usize {
        self.pools
            .iter()
            .map(|p| p.replicas * p.config.data_parallel_size.max(1))
            .sum()
    }

    /// Checks that need the whole fleet: counts, and what the router needs of the pools.
    pub fn validate(&self) -> Result<(), SimError> {
        let err = |field: &str, message: String| SimError::Config {
            field: field.into(),
            message,
        };
        if self.pools.is_empty() {
            return Err(err("--replica-spec", "the fleet has no pools".into()));
        }
        for (i, p) in self.pools.iter().enumerate() {
            if p.replicas == 0 {
                return Err(err(
                    &format!("pools[{i}].replicas"),
                    format!("pool {:?} has no replicas; give it at least 1", p.name),
                ));
            }
        }
        let roles: Vec<PoolRole> = self.pools.iter().map(|p| p.role).collect();
        if self.pd.is_some() || roles.iter().any(|&r| r != PoolRole::Both) {
            for (role, name) in [(PoolRole::Prefill, "prefill"), (PoolRole::Decode, "decode")] {
                if !roles.contains(&role) {
                    return Err(err(
                        "--pd",
                        format!("P/D disaggregation needs a {name} pool with at least 1 replica"),
                    ));
                }
            }
            if roles.contains(&PoolRole::Both) {
                return Err(err(
                    "--replica-spec",
                    "with P/D every pool has a role (prefill or decode)".into(),
                ));
            }
            if self.pd.is_none() {
                return Err(err("--pd", "P/D pools need the KV link (--pd)".into()));
            }
            if self.autoscale.is_some() {
                return Err(err(
                    "--autoscale",
                    "autoscaling a P/D fleet is not modelled yet".into(),
                ));
            }
            let models: Vec<&str> = self
                .pools
                .iter()
                .map(|p| p.config.model.name.as_str())
                .collect();
            if models.windows(2).any(|w| w[0] != w[1]) {
                return Err(err(
                    "--replica-spec",
                    format!("P/D moves one model's KV between pools, but they serve {models:?}"),
                ));
            }
        }
        let n = self.num_replicas();
        if n > MAX_REPLICAS {
            return Err(err(
                "--replicas",
                format!("{n} replicas; the twin runs at most {MAX_REPLICAS}"),
            ));
        }
        if self.router.kind == RouterKind::PrefixAware {
            if n > MAX_INDEXED_REPLICAS {
                return Err(err(
                    "--router",
                    format!(
                        "prefix-aware routing indexes at most {MAX_INDEXED_REPLICAS} replicas; the fleet has {n}"
                    ),
                ));
            }
            let sizes: Vec<usize> = self
                .pools
                .iter()
                .map(|p| p.startup.scheduler.block_size)
                .collect();
            if sizes.windows(2).any(|w| w[0] != w[1]) {
                return Err(err(
                    "--router",
                    format!(
                        "prefix-aware routing hashes prompts with one block size (llm-d's \
                         tokenProcessorConfig.blockSize), but the pools use {sizes:?}: give \
                         every pool the same --block-size"
                    ),
                ));
            }
            if !self
                .pools
                .iter()
                .all(|p| p.config.knobs.enable_prefix_caching)
            {
                return Err(err(
                    "--router",
                    "prefix-aware routing reads the replicas' prefix caches: \
                     --no-enable-prefix-caching leaves nothing to route by"
                        .into(),
                ));
            }
        }
        Ok(())
    }
}

/// One replica of the fleet as the run ended.
pub struct ReplicaOutcome {
    /// Pod name (`{pool}-{i}`), the `pod` label of its /metrics.
    pub name: String,
    /// `instance` label: `{pod}:8000`, as Prometheus' Kubernetes discovery names a target.
    pub instance: String,
    pub pool: usize,
    pub report: Report,
    pub metrics: Option<crate::metrics_bridge::MetricsObserver>,
}

/// What `run_fleet` gives back beside the observer's view.
pub struct FleetOutcome {
    pub router: RouterKind,
    pub replicas: Vec<ReplicaOutcome>,
    /// Replicas in service over time: `(t_s, n)` at the start and at every change.
    pub replica_count: Vec<(f64, usize)>,
    pub pd: Option<report::PdSummary>,
}

/// Per-replica metrics options (the `--metrics-out` / `--scrapes-out` of a fleet).
#[derive(Clone, Debug)]
pub struct MetricsOptions {
    pub served_model_name: String,
    pub kv_cache_metrics: bool,
    pub scrape_interval_s: Option<f64>,
    pub enable_mfu_metrics: bool,
}

/// Where a replica is in its life.
#[derive(Clone, Copy, Debug, PartialEq)]
enum ReplicaState {
    /// Scheduled by a scale-up; serves from `ready_s` (image, weights, vLLM start-up).
    Starting {
        ready_s: f64,
    },
    Serving,
    /// Out of the router's endpoints (scale-down); finishing what it holds.
    Draining,
    /// Drained, or removed before it ever served.
    Gone,
}

/// A replica in the event loop.
struct Replica {
    engines: std::ops::Range<usize>,
    pool: usize,
    state: ReplicaState,
    /// Its scrapes, oldest first, for the autoscaler's windows.
    scrapes: VecDeque<PodSample>,
}

/// A pool as the loop starts replicas of it.
struct PoolRuntime {
    name: String,
    config: SimConfig,
    startup: Startup,
    role: PoolRole,
    /// Whether its answers reach the clients (not a P/D prefill pool's).
    serves_clients: bool,
    /// KV bytes per token on one GPU of it (what one NIC moves per token).
    kv_bytes_per_token: f64,
    /// Replicas created so far (pod names count up, as a StatefulSet's would).
    created: usize,
}

/// The autoscaler's part of the loop.
struct AutoscaleLoop {
    autoscaler: Autoscaler,
    pool: usize,
    startup_s: f64,
    scrape_interval_s: f64,
    next_scrape_s: f64,
    next_sync_s: f64,
    /// Replicas starting, by the time they become ready (earliest first).
    pending: VecDeque<(f64, usize)>,
}

/// The fleet's side of the event loop: the router over replicas in service, then vLLM's DP
/// balancer among the chosen replica's engines; after each step the replica's KV events feed
/// the prefix index (prefix-aware only); the autoscaler's scrapes, syncs and pod start-ups as
/// timers.
struct FleetDispatch {
    router: Router,
    state: FleetState,
    autoscale: Option<AutoscaleLoop>,
    pd: Option<PdLoop>,
}

/// Items due at a time, earliest first, then in the order they were queued.
struct TimedQueue<T> {
    heap: BinaryHeap<Reverse<Timed<T>>>,
    next_seq: u64,
}

struct Timed<T> {
    t_s: crate::driver::TimeKey,
    seq: u64,
    item: T,
}

impl<T> PartialEq for Timed<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.t_s, self.seq) == (other.t_s, other.seq)
    }
}

impl<T> Eq for Timed<T> {}

impl<T> PartialOrd for Timed<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for Timed<T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.t_s, self.seq).cmp(&(other.t_s, other.seq))
    }
}

impl<T> TimedQueue<T> {
    fn new() -> Self {
        TimedQueue {
            heap: BinaryHeap::new(),
            next_seq: 0,
        }
    }

    fn push(&mut self, t_s: f64, item: T) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Reverse(Timed {
            t_s: crate::driver::TimeKey(t_s),
            seq,
            item,
        }));
    }

    fn next_s(&self) -> Option<f64> {
        self.heap.peek().map(|Reverse(x)| x.t_s.0)
    }

    /// The earliest item, if it is due by `t_s`, with its time.
    fn pop_due(&mut self, t_s: f64) -> Option<(f64, T)> {
        if self.next_s()? > t_s {
            return None;
        }
        self.heap.pop().map(|Reverse(x)| (x.t_s.0, x.item))
    }
}

/// The P/D proxy's part of the loop: prefills handed off to decode instances, and the KV
/// transfers in flight.
struct PdLoop {
    link: KvLink,
    /// Finished prefills, waiting to go to a decode instance.
    handoffs: TimedQueue<Handoff>,
    /// KV loads by completion time.
    transfers: TimedQueue<Transfer>,
    /// Scratch for the engines' started loads.
    started: Vec<(ReqHandle, usize)>,
    /// Seconds of KV transfer, and bytes, over the run (the report's P/D summary).
    transfer_s_total: f64,
    transfer_bytes_total: f64,
    num_transfers: u64,
}

/// One KV pull: the decoder's request and the prefill's it reads.
struct Transfer {
    decode_engine: usize,
    decode_handle: ReqHandle,
    prefill_engine: usize,
    prefill_handle: ReqHandle,
}

/// What the router reads: the replicas and which are in service.
struct FleetState {
    replicas: Vec<Replica>,
    names: Vec<String>,
    /// Replica of each engine.
    engine_replica: Vec<usize>,
    /// Serving replicas, ascending.
    in_service: Vec<usize>,
    events: KvEvents,
    pools: Vec<PoolRuntime>,
    seed: u64,
    kv_events: bool,
    replica_count: Vec<(f64, usize)>,
    draining: Vec<usize>,
}

impl FleetState {
    /// What a router sees of replica `r`: its engines' live state summed (KV usage averaged).
    fn load(&self, engines: &Engines, r: usize) -> ReplicaLoad {
        let rep = &self.replicas[r];
        let mut l = ReplicaLoad::default();
        for slot in &engines.slots[rep.engines.clone()] {
            let s = slot.core().scheduler();
            l.in_flight += slot.num_in_system();
            l.num_waiting += s.num_waiting();
            l.kv_cache_usage += s.kv_cache_manager().usage();
        }
        l.kv_cache_usage /= rep.engines.len().max(1) as f64;
        l
    }

    /// Create a replica of `pool` (its engines idle until it serves).
    fn create_replica(
        &mut self,
        pool: usize,
        engines: &mut Engines,
        state: ReplicaState,
    ) -> Result<usize, SimError> {
        let r = self.replicas.len();
        let p = &mut self.pools[pool];
        // Replica 0 runs with the fleet's seed: a one-replica fleet is a plain run.
        let seed = self.seed ^ (r as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let first = engines.slots.len();
        for rank in 0..p.config.data_parallel_size.max(1) {
            let mut slot = EngineSlot::new(&p.config, &p.startup, rank, seed)?;
            if self.kv_events {
                slot.core_mut().enable_kv_cache_events();
            }
            engines.push(slot);
            self.engine_replica.push(r);
        }
        engines.lock_step_if_moe(first..engines.slots.len());
        self.names.push(pod_name(&p.name, p.created));
        p.created += 1;
        self.replicas.push(Replica {
            engines: first..engines.slots.len(),
            pool,
            state,
            scrapes: VecDeque::new(),
        });
        Ok(r)
    }

    fn serve(&mut self, r: usize, t_s: f64, observer: &mut dyn Observer) {
        let rep = &mut self.replicas[r];
        rep.state = ReplicaState::Serving;
        let at = self.in_service.partition_point(|&x| x < r);
        self.in_service.insert(at, r);
        observer.on_replica_up(&ReplicaUp {
            replica: r,
            pool: rep.pool,
            name: &self.names[r],
            engines: rep.engines.clone(),
            t_s,
            serves_clients: self.pools[rep.pool].serves_clients,
        });
        self.count_changed(t_s);
    }

    fn drain(&mut self, r: usize, t_s: f64, observer: &mut dyn Observer, router: &mut Router) {
        self.replicas[r].state = ReplicaState::Draining;
        self.in_service.retain(|&x| x != r);
        self.draining.push(r);
        // The pod leaves the endpoints: the indexer drops what it knew of it.
        if let Some(index) = router.index.as_mut() {
            index.forget(r);
        }
        observer.on_replica_down(r, t_s);
        self.count_changed(t_s);
    }

    fn count_changed(&mut self, t_s: f64) {
        let n = self.in_service.len();
        match self.replica_count.last_mut() {
            Some(last) if last.0 == t_s => last.1 = n,
            _ => self.replica_count.push((t_s, n)),
        }
    }

    /// Serving replicas whose pool has `role`... or, for `Both`, any client-facing one.
    fn in_service_for(&self, decode: bool) -> Vec<usize> {
        self.in_service
            .iter()
            .copied()
            .filter(|&r| {
                let role = self.pools[self.replicas[r].pool].role;
                if decode {
                    role == PoolRole::Decode
                } else {
                    role != PoolRole::Decode
                }
            })
            .collect()
    }

    /// Replicas of `pool` in the Deployment's spec: starting or serving.
    fn spec_replicas(&self, pool: usize) -> usize {
        self.replicas
            .iter()
            .filter(|r| {
                r.pool == pool
                    && matches!(
                        r.state,
                        ReplicaState::Starting { .. } | ReplicaState::Serving
                    )
            })
            .count()
    }
}

impl FleetDispatch {
    /// Take engine `e`'s finished prefills and started KV loads (P/D).
    fn collect_pd(&mut self, e: usize, slot: &mut EngineSlot, t_s: f64) {
        let Some(pd) = self.pd.as_mut() else {
            return;
        };
        for h in slot.handoffs.drain(..) {
            pd.handoffs.push(h.t_s, h);
        }
        slot.core_mut().take_started_kv_loads(&mut pd.started);
        if pd.started.is_empty() {
            return;
        }
        let pool = self.state.replicas[self.state.engine_replica[e]].pool;
        let bytes_per_token = self.state.pools[pool].kv_bytes_per_token;
        for &(h, num_tokens) in &pd.started {
            let PdPhase::Decode {
                prefill_engine,
                prefill_handle,
                ..
            } = slot.pd_phase(h)
            else {
                continue;
            };
            // The worker starts reading when the step that admitted the load runs.
            let bytes = bytes_per_token * num_tokens as f64;
            let dt = pd.link.transfer_s(bytes);
            pd.transfer_s_total += dt;
            pd.transfer_bytes_total += bytes;
            pd.num_transfers += 1;
            pd.transfers.push(
                t_s + dt,
                Transfer {
                    decode_engine: e,
                    decode_handle: h,
                    prefill_engine,
                    prefill_handle,
                },
            );
        }
    }

    /// KV pulls that landed by `t_s`: the decoder's request can run (`finished_recving`),
    /// the prefill's blocks go back (`finished_sending`).
    fn land_transfers(&mut self, t_s: f64, engines: &mut Engines) {
        let Some(pd) = self.pd.as_mut() else {
            return;
        };
        while let Some((done_s, tr)) = pd.transfers.pop_due(t_s) {
            let d = &mut engines.slots[tr.decode_engine];
            d.core_mut().finish_kv_load(tr.decode_handle);
            d.wake_at(done_s);
            engines.requeue(tr.decode_engine);
            let p = &mut engines.slots[tr.prefill_engine];
            p.core_mut().finish_kv_send(tr.prefill_handle);
            // Blocks came back: a prefill waiting for room can go.
            p.wake_at(done_s);
            engines.requeue(tr.prefill_engine);
        }
    }
}

/// The router's pick among `candidates`, then vLLM's DP balancer inside the replica.
fn route_among(
    router: &mut Router,
    state: &FleetState,
    spec: &RequestSpec,
    candidates: &[usize],
    engines: &Engines,
) -> usize {
    let r = router.route(spec, candidates, &state.names, &|r| state.load(engines, r));
    pick_engine(&engines.slots, state.replicas[r].engines.clone())
}

impl Dispatch for FleetDispatch {
    fn route(&mut self, spec: &RequestSpec, engines: &Engines) -> usize {
        let state = &self.state;
        if self.pd.is_some() {
            let candidates = state.in_service_for(false);
            route_among(&mut self.router, state, spec, &candidates, engines)
        } else {
            route_among(&mut self.router, state, spec, &state.in_service, engines)
        }
    }

    fn phase_of_arrival(&self, e: usize) -> PdPhase {
        let pool = self.state.replicas[self.state.engine_replica[e]].pool;
        if self.state.pools[pool].role == PoolRole::Prefill {
            PdPhase::Prefill
        } else {
            PdPhase::Whole
        }
    }

    fn next_internal_arrival_s(&self) -> Option<f64> {
        self.pd.as_ref()?.handoffs.next_s()
    }

    fn pop_internal_arrival(&mut self, engines: &Engines) -> Option<(RequestSpec, usize, PdPhase)> {
        let pd = self.pd.as_mut()?;
        let (_, h) = pd.handoffs.pop_due(f64::INFINITY)?;
        let candidates = self.state.in_service_for(true);
        let e = route_among(&mut self.router, &self.state, &h.spec, &candidates, engines);
        let phase = PdPhase::Decode {
            client_arrival_s: h.spec.arrival_time_s,
            prefill_engine: h.prefill_engine,
            prefill_handle: h.prefill_handle,
        };
        Some((h.spec, e, phase))
    }

    fn after_step(&mut self, e: usize, slot: &mut EngineSlot, t_s: f64) {
        self.collect_pd(e, slot, t_s);
        let r = self.state.engine_replica[e];
        if let Some(index) = self.router.index.as_mut() {
            let events = &mut self.state.events;
            slot.core_mut().take_kv_cache_events(events);
            if self.state.replicas[r].state == ReplicaState::Serving {
                index.apply(r, &events.events);
            }
            events.clear();
        }
    }

    fn next_transfer_s(&self) -> Option<f64> {
        self.pd.as_ref()?.transfers.next_s()
    }

    fn next_timer_s(&self) -> Option<f64> {
        let transfer = self.next_transfer_s();
        let autoscale = self.autoscale.as_ref().map(|a| {
            let ready = a.pending.front().map_or(f64::INFINITY, |p| p.0);
            a.next_scrape_s.min(a.next_sync_s).min(ready)
        });
        match (transfer, autoscale) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn on_timer(
        &mut self,
        t_s: f64,
        engines: &mut Engines,
        observer: &mut dyn Observer,
    ) -> Result<(), SimError> {
        self.land_transfers(t_s, engines);
        let Some(a) = self.autoscale.as_mut() else {
            return Ok(());
        };
        let state = &mut self.state;
        // Drained replicas leave for good.
        state.draining.retain(|&r| {
            let idle = engines.slots[state.replicas[r].engines.clone()]
                .iter()
                .all(|s| s.num_in_system() == 0 && !s.core().has_work());
            if idle {
                state.replicas[r].state = ReplicaState::Gone;
            }
            !idle
        });
        while let Some(&(ready_s, r)) = a.pending.front() {
            if ready_s > t_s {
                break;
            }
            a.pending.pop_front();
            if matches!(state.replicas[r].state, ReplicaState::Starting { .. }) {
                state.serve(r, ready_s, observer);
            }
        }
        if a.next_scrape_s <= t_s {
            for &r in &state.in_service {
                let rep = &mut state.replicas[r];
                let mut s = PodSample {
                    t_s,
                    ..PodSample::default()
                };
                for slot in &engines.slots[rep.engines.clone()] {
                    let sched = slot.core().scheduler();
                    s.waiting += sched.num_waiting() as f64;
                    s.running += sched.running().len() as f64;
                    s.kv_cache_usage = s.kv_cache_usage.max(sched.kv_cache_manager().usage());
                    s.busy_s += slot.busy_s();
                    s.num_gpus += 1.0;
                }
                rep.scrapes.push_back(s);
                // Keep what the longest window (30 s) and a rate need.
                while rep.scrapes.len() > 2 && rep.scrapes[0].t_s < t_s - 60.0 {
                    rep.scrapes.pop_front();
                }
            }
            a.next_scrape_s += a.scrape_interval_s;
        }
        if a.next_sync_s <= t_s {
            a.next_sync_s += HPA_SYNC_PERIOD_S;
            let pool = a.pool;
            let current = state.spec_replicas(pool);
            let ready: Vec<&VecDeque<PodSample>> = state
                .in_service
                .iter()
                .filter(|&&r| {
                    state.replicas[r].pool == pool && !state.replicas[r].scrapes.is_empty()
                })
                .map(|&r| &state.replicas[r].scrapes)
                .collect();
            let next = a.autoscaler.sync(t_s, current, &ready);
            if next > current {
                for _ in current..next {
                    let ready_s = t_s + a.startup_s;
                    let r =
                        state.create_replica(pool, engines, ReplicaState::Starting { ready_s })?;
                    a.pending.push_back((ready_s, r));
                }
            } else if next < current {
                // A ReplicaSet deletes pods that are not ready first, then the newest.
                let mut victims: Vec<usize> = (0..state.replicas.len())
                    .rev()
                    .filter(|&r| {
                        state.replicas[r].pool == pool
                            && matches!(state.replicas[r].state, ReplicaState::Starting { .. })
                    })
                    .chain(
                        state
                            .in_service
                            .iter()
                            .rev()
                            .copied()
                            .filter(|&r| state.replicas[r].pool == pool),
                    )
                    .take(current - next)
                    .collect();
                for r in victims.drain(..) {
                    match state.replicas[r].state {
                        ReplicaState::Starting { .. } => {
                            state.replicas[r].state = ReplicaState::Gone
                        }
                        _ => state.drain(r, t_s, observer, &mut self.router),
                    }
                }
            }
        }
        Ok(())
    }
}

/// The fleet a `simulate` command line asks for: `--replicas N` (one pool, `vllm`, of the
/// command line's engine) or `--replica-spec FILE`, plus `--autoscale FILE`. `args` is the
/// command line (a pool's flags are parsed on top of it); `read_file` loads the files.
/// `SimError::Cost` is vLLM refusing to start the one pool.
pub fn from_args(
    args: &[String],
    sim: &crate::engine_args::SimulateArgs,
    fleet: &crate::engine_args::FleetArgs,
    read_file: &dyn Fn(&str) -> Result<String, String>,
) -> Result<FleetConfig, SimError> {
    let file = |flag: &str, path: &str| {
        read_file(path).map_err(|e| SimError::Config {
            field: format!("{flag} {path}"),
            message: e,
        })
    };
    let mut pools = match &fleet.replica_spec {
        Some(path) => {
            let specs = spec::parse_replica_spec(path, &file("--replica-spec", path)?)?;
            spec::build_pools(path, &specs, args, read_file)?
        }
        None => match fleet.pd {
            Some((p, d)) => {
                let startup = crate::startup(&sim.config)?;
                [
                    ("prefill", p, PoolRole::Prefill),
                    ("decode", d, PoolRole::Decode),
                ]
                .into_iter()
                .map(|(name, replicas, role)| Pool {
                    name: name.into(),
                    replicas,
                    role,
                    config: sim.config.clone(),
                    startup: startup.clone(),
                })
                .collect()
            }
            None => vec![Pool {
                name: "vllm".into(),
                replicas: fleet.replicas.unwrap_or(1),
                role: PoolRole::Both,
                config: sim.config.clone(),
                startup: crate::startup(&sim.config)?,
            }],
        },
    };
    let disaggregated = pools.iter().any(|p| p.role != PoolRole::Both);
    for p in &mut pools {
        // vLLM's P/D examples start both sides with `kv_role: kv_both`: a KV consumer
        // (deferred block frees under async scheduling, the KV-fetch gauge).
        p.startup.scheduler.kv_consumer = p.role != PoolRole::Both;
    }
    let autoscale = match &fleet.autoscale {
        None => None,
        Some(path) => {
            let spec = autoscale::parse_autoscale(path, &file("--autoscale", path)?)?;
            let Some(pool) = pools.iter().position(|p| p.name == spec.target) else {
                let names: Vec<&str> = pools.iter().map(|p| p.name.as_str()).collect();
                return Err(SimError::Config {
                    field: format!("{path}: spec.scaleTargetRef.name"),
                    message: format!(
                        "{:?} is not a pool of the fleet ({})",
                        spec.target,
                        names.join(", ")
                    ),
                });
            };
            let pod_startup =
                PodStartup::for_pool(&pools[pool], fleet.weight_load_gbps, fleet.preload);
            Some(AutoscaleConfig {
                spec,
                pool,
                pod_startup,
                scrape_interval_s: sim.scrape_interval_s.unwrap_or(15.0),
            })
        }
    };
    let fc = FleetConfig {
        pools,
        router: fleet.router,
        workload: sim.config.workload.clone(),
        seed: sim.config.seed,
        autoscale,
        pd: disaggregated.then_some(KvLink {
            gbytes_per_s: fleet.kv_transfer_gbps,
            latency_s: fleet.kv_transfer_latency_s,
        }),
    };
    fc.validate()?;
    Ok(fc)
}

/// Pod name of the `i`-th replica of `pool`.
pub fn pod_name(pool: &str, i: usize) -> String {
    format!("{pool}-{i}")
}

/// Run the workload through the fleet, reporting fleet-wide to `observer` (engine indexes
/// are global: replica after replica, DP ranks in order) and per replica in the outcome.
pub fn run_fleet(
    fleet: &FleetConfig,
    slo: Slo,
    metrics: Option<&MetricsOptions>,
    observer: &mut dyn Observer,
) -> Result<FleetOutcome, SimError> {
    fleet.validate()?;
    let mut workload = Workload::new(fleet.workload.clone())?;
    let mut engines = Engines::default();
    let block_size = fleet
        .pools
        .first()
        .map_or(16, |p| p.startup.scheduler.block_size);
    let router = Router::new(fleet.router, fleet.seed, block_size);
    let mut state = FleetState {
        replicas: Vec::new(),
        names: Vec::new(),
        engine_replica: Vec::new(),
        in_service: Vec::new(),
        events: KvEvents::default(),
        pools: fleet
            .pools
            .iter()
            .map(|p| PoolRuntime {
                name: p.name.clone(),
                config: p.config.clone(),
                startup: p.startup.clone(),
                role: p.role,
                serves_clients: p.role != PoolRole::Prefill,
                kv_bytes_per_token: p.startup.plan.kv_bytes_per_token() as f64,
                created: 0,
            })
            .collect(),
        seed: fleet.seed,
        kv_events: fleet.router.kind == RouterKind::PrefixAware,
        replica_count: Vec::new(),
        draining: Vec::new(),
    };
    let mut per_replica = PerReplica {
        replicas: Vec::new(),
        engine: Vec::new(),
        pools: fleet
            .pools
            .iter()
            .map(|p| (p.startup.clone(), p.config.data_parallel_size.max(1)))
            .collect(),
        slo,
        metrics: metrics.cloned(),
    };
    let pd_summary;
    let mut initial = Vec::new();
    for (pool, p) in fleet.pools.iter().enumerate() {
        let n = match &fleet.autoscale {
            Some(a) if a.pool == pool => p.replicas.clamp(a.spec.min_replicas, a.spec.max_replicas),
            _ => p.replicas,
        };
        for _ in 0..n {
            initial.push(state.create_replica(pool, &mut engines, ReplicaState::Serving)?);
        }
    }
    let autoscale = fleet.autoscale.as_ref().map(|a| AutoscaleLoop {
        autoscaler: Autoscaler::new(a.spec.clone()),
        pool: a.pool,
        startup_s: a.pod_startup.total_s(),
        scrape_interval_s: a.scrape_interval_s,
        next_scrape_s: 0.0,
        next_sync_s: HPA_SYNC_PERIOD_S,
        pending: VecDeque::new(),
    });
    {
        let mut tee = crate::observe::Tee(vec![observer, &mut per_replica]);
        for r in initial {
            state.serve(r, 0.0, &mut tee);
        }
        let mut dispatch = FleetDispatch {
            router,
            state,
            autoscale,
            pd: fleet.pd.map(|link| PdLoop {
                link,
                handoffs: TimedQueue::new(),
                transfers: TimedQueue::new(),
                started: Vec::new(),
                transfer_s_total: 0.0,
                transfer_bytes_total: 0.0,
                num_transfers: 0,
            }),
        };
        run_loop(&mut workload, &mut engines, &mut dispatch, &mut tee)?;
        pd_summary = dispatch.pd.as_ref().map(|pd| {
            let count = |role| {
                fleet
                    .pools
                    .iter()
                    .filter(|p| p.role == role)
                    .map(|p| p.replicas)
                    .sum()
            };
            report::PdSummary {
                prefill_replicas: count(PoolRole::Prefill),
                decode_replicas: count(PoolRole::Decode),
                kv_link: pd.link,
                num_transfers: pd.num_transfers,
                kv_bytes_total: pd.transfer_bytes_total,
                transfer_s_mean: pd.transfer_s_total / pd.num_transfers.max(1) as f64,
            }
        });
        state = dispatch.state;
    }
    let replicas = per_replica
        .replicas
        .into_iter()
        .flatten()
        .map(|c| ReplicaOutcome {
            report: c.builder.finish(),
            metrics: c.metrics,
            name: c.name,
            instance: c.instance,
            pool: c.pool,
        })
        .collect();
    Ok(FleetOutcome {
        router: fleet.router.kind,
        replicas,
        replica_count: state.replica_count,
        pd: pd_summary,
    })
}

struct ReplicaCollector {
    builder: ReportBuilder,
    metrics: Option<crate::metrics_bridge::MetricsObserver>,
    name: String,
    instance: String,
    pool: usize,
}

/// Each replica's own report and /metrics: events routed by engine to their replica, with
/// the engine's DP rank as the engine index its recorder knows.
struct PerReplica {
    replicas: Vec<Option<ReplicaCollector>>,
    /// (replica, DP rank) of each global engine index.
    engine: Vec<(usize, usize)>,
    /// Each pool's start-up and DP size.
    pools: Vec<(Startup, usize)>,
    slo: Slo,
    metrics: Option<MetricsOptions>,
}

impl PerReplica {
    fn at(&mut self, engine: usize) -> (&mut ReplicaCollector, usize) {
        let (r, rank) = self.engine[engine];
        let c = self.replicas[r]
            .as_mut()
            .expect("a serving replica has a collector");
        (c, rank)
    }
}

impl Observer for PerReplica {
    fn on_replica_up(&mut self, up: &ReplicaUp<'_>) {
        let (startup, dp) = &self.pools[up.pool];
        let instance = format!("{}:8000", up.name);
        if self.replicas.len() <= up.replica {
            self.replicas.resize_with(up.replica + 1, || None);
        }
        if self.engine.len() < up.engines.end {
            self.engine.resize(up.engines.end, (usize::MAX, 0));
        }
        for (rank, e) in up.engines.clone().enumerate() {
            self.engine[e] = (up.replica, rank);
        }
        let mut builder = ReportBuilder::new(self.slo);
        // Its own report counts its engines by DP rank, from when it came up; a prefill
        // replica's row shows its own requests' latencies.
        builder.on_replica_up(&ReplicaUp {
            replica: 0,
            engines: 0..*dp,
            serves_clients: true,
            ..up.clone()
        });
        self.replicas[up.replica] = Some(ReplicaCollector {
            builder,
            metrics: self.metrics.as_ref().map(|m| {
                crate::metrics_bridge::MetricsObserver::new(
                    startup,
                    &m.served_model_name,
                    *dp,
                    m.kv_cache_metrics,
                    m.scrape_interval_s,
                )
                .with_mfu(m.enable_mfu_metrics)
                .with_target_labels(up.name, &instance)
            }),
            name: up.name.to_string(),
            instance,
            pool: up.pool,
        });
    }
    fn on_replica_down(&mut self, replica: usize, t_s: f64) {
        if let Some(c) = self.replicas.get_mut(replica).and_then(Option::as_mut) {
            c.builder.on_replica_down(0, t_s);
        }
    }
    fn on_first_token(&mut self, engine: usize, times: &RequestTimes, frontend_s: f64, n: usize) {
        let (c, rank) = self.at(engine);
        c.builder.on_first_token(rank, times, frontend_s, n);
        if let Some(m) = c.metrics.as_mut() {
            m.on_first_token(rank, times, frontend_s, n);
        }
    }
    fn on_inter_tokens(&mut self, engine: usize, itl_s: f64, count: usize, t_s: f64) {
        let (c, rank) = self.at(engine);
        c.builder.on_inter_tokens(rank, itl_s, count, t_s);
        if let Some(m) = c.metrics.as_mut() {
            m.on_inter_tokens(rank, itl_s, count, t_s);
        }
    }
    fn on_finished(&mut self, engine: usize, req: &FinishedRequest<'_>) {
        let (c, rank) = self.at(engine);
        c.builder.on_finished(rank, req);
        if let Some(m) = c.metrics.as_mut() {
            m.on_finished(rank, req);
        }
    }
    fn on_rejected(&mut self, engine: usize, req: &RequestSpec) {
        let (c, rank) = self.at(engine);
        c.builder.on_rejected(rank, req);
    }
    fn on_step(&mut self, engine: usize, step: &StepSample) {
        let (c, rank) = self.at(engine);
        c.builder.on_step(rank, step);
        if let Some(m) = c.metrics.as_mut() {
            m.on_step(rank, step);
        }
    }
    fn on_dummy_batch(&mut self, engine: usize, gpu_time_s: f64) {
        let (c, rank) = self.at(engine);
        c.builder.on_dummy_batch(rank, gpu_time_s);
    }
}
