//! A fleet: N independent vLLM instances (each its own EngineCore(s), KV pool, prefix cache,
//! DP ranks and cost model) behind a router, in the driver's one event loop: every engine of
//! every replica is queued by its next step time, so the fleet needs no threads to be
//! deterministic. Same inputs and seed → same bytes.

pub mod metrics;
pub mod prefix_index;
pub mod report;
pub mod router;
pub mod spec;

use twin_engine::KvCacheEvent;
use twin_workload::{RequestSpec, Workload, WorkloadSpec};

use crate::driver::{pick_engine, run_loop, Dispatch, EngineSlot, Engines};
use crate::observe::{FinishedRequest, Observer, ReplicaUp, StepSample};
use crate::report::{Report, ReportBuilder, Slo};
use crate::{RequestTimes, SimConfig, SimError, Startup};

pub use prefix_index::MAX_INDEXED_REPLICAS;
pub use router::{ReplicaLoad, Router, RouterConfig, RouterKind, ScorerWeights};

/// The most replicas a fleet runs (each is a full engine with its own KV pool).
pub const MAX_REPLICAS: usize = 1024;

/// Replicas of one configuration (`--replica-spec`'s pools; `--replicas N` is one pool).
#[derive(Clone, Debug)]
pub struct Pool {
    pub name: String,
    pub replicas: usize,
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
}

impl FleetConfig {
    pub fn num_replicas(&self) -> usize {
        self.pools.iter().map(|p| p.replicas).sum()
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
}

/// Per-replica metrics options (the `--metrics-out` / `--scrapes-out` of a fleet).
#[derive(Clone, Debug)]
pub struct MetricsOptions {
    pub served_model_name: String,
    pub kv_cache_metrics: bool,
    pub scrape_interval_s: Option<f64>,
    pub enable_mfu_metrics: bool,
}

/// A replica in the event loop.
struct Replica {
    engines: std::ops::Range<usize>,
    in_service: bool,
}

/// The fleet's side of the event loop: the router over replicas in service, then vLLM's DP
/// balancer among the chosen replica's engines; after each step the replica's KV events feed
/// the prefix index (prefix-aware only).
struct FleetDispatch {
    router: Router,
    state: FleetState,
}

/// What the router reads: the replicas and which are in service.
struct FleetState {
    replicas: Vec<Replica>,
    names: Vec<String>,
    /// Replica of each engine.
    engine_replica: Vec<usize>,
    in_service: Vec<usize>,
    events: Vec<KvCacheEvent>,
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
}

impl Dispatch for FleetDispatch {
    fn route(&mut self, spec: &RequestSpec, engines: &Engines) -> usize {
        let state = &self.state;
        let r = self
            .router
            .route(spec, &state.in_service, &state.names, &|r| {
                state.load(engines, r)
            });
        pick_engine(&engines.slots, state.replicas[r].engines.clone())
    }

    fn after_step(&mut self, e: usize, slot: &mut EngineSlot) {
        if let Some(index) = self.router.index.as_mut() {
            let events = &mut self.state.events;
            slot.core_mut().take_kv_cache_events(events);
            index.apply(self.state.engine_replica[e], events);
            events.clear();
        }
    }
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
    let mut replicas = Vec::new();
    let mut names = Vec::new();
    let mut engine_replica = Vec::new();
    let mut per_replica = PerReplica {
        replicas: Vec::new(),
        engine: Vec::new(),
    };
    let prefix_aware = fleet.router.kind == RouterKind::PrefixAware;
    for (pool_index, pool) in fleet.pools.iter().enumerate() {
        let dp = pool.config.data_parallel_size.max(1);
        for i in 0..pool.replicas {
            let r = replicas.len();
            // Replica 0 runs with the fleet's seed: a one-replica fleet is a plain run.
            let seed = fleet.seed ^ (r as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let first = engines.slots.len();
            for rank in 0..dp {
                let mut slot = EngineSlot::new(&pool.config, &pool.startup, rank, seed)?;
                if prefix_aware {
                    slot.core_mut().enable_kv_cache_events();
                }
                engines.push(slot);
                engine_replica.push(r);
                per_replica.engine.push((r, rank));
            }
            let name = pod_name(&pool.name, i);
            let instance = format!("{name}:8000");
            per_replica.replicas.push(ReplicaCollector {
                builder: ReportBuilder::new(slo),
                metrics: metrics.map(|m| {
                    crate::metrics_bridge::MetricsObserver::new(
                        &pool.startup,
                        &m.served_model_name,
                        dp,
                        m.kv_cache_metrics,
                        m.scrape_interval_s,
                    )
                    .with_mfu(m.enable_mfu_metrics)
                    .with_target_labels(&name, &instance)
                }),
                name: name.clone(),
                instance,
                pool: pool_index,
                num_engines: dp,
            });
            replicas.push(Replica {
                engines: first..engines.slots.len(),
                in_service: true,
            });
            names.push(name);
        }
    }
    let block_size = fleet
        .pools
        .first()
        .map_or(16, |p| p.startup.scheduler.block_size);
    let in_service: Vec<usize> = (0..replicas.len())
        .filter(|&r| replicas[r].in_service)
        .collect();
    let replica_count = vec![(0.0, in_service.len())];
    let mut dispatch = FleetDispatch {
        router: Router::new(fleet.router, fleet.seed, block_size),
        state: FleetState {
            replicas,
            names,
            engine_replica,
            in_service,
            events: Vec::new(),
        },
    };
    {
        let mut tee = crate::observe::Tee(vec![observer, &mut per_replica]);
        for (r, rep) in dispatch.state.replicas.iter().enumerate() {
            tee.on_replica_up(&ReplicaUp {
                replica: r,
                pool: per_replica_pool(&fleet.pools, r),
                name: &dispatch.state.names[r],
                engines: rep.engines.clone(),
                t_s: 0.0,
            });
        }
        run_loop(&mut workload, &mut engines, &mut dispatch, &mut tee)?;
    }
    let replicas = per_replica
        .replicas
        .into_iter()
        .map(|c| ReplicaOutcome {
            report: c.builder.finish(c.num_engines),
            metrics: c.metrics,
            name: c.name,
            instance: c.instance,
            pool: c.pool,
        })
        .collect();
    Ok(FleetOutcome {
        router: fleet.router.kind,
        replicas,
        replica_count,
    })
}

fn per_replica_pool(pools: &[Pool], mut r: usize) -> usize {
    for (i, p) in pools.iter().enumerate() {
        if r < p.replicas {
            return i;
        }
        r -= p.replicas;
    }
    pools.len().saturating_sub(1)
}

struct ReplicaCollector {
    builder: ReportBuilder,
    metrics: Option<crate::metrics_bridge::MetricsObserver>,
    name: String,
    instance: String,
    pool: usize,
    num_engines: usize,
}

/// Each replica's own report and /metrics: events routed by engine to their replica, with
/// the engine's DP rank as the engine index its recorder knows.
struct PerReplica {
    replicas: Vec<ReplicaCollector>,
    /// (replica, DP rank) of each global engine index.
    engine: Vec<(usize, usize)>,
}

impl Observer for PerReplica {
    fn on_first_token(&mut self, engine: usize, times: &RequestTimes, frontend_s: f64, n: usize) {
        let (r, rank) = self.engine[engine];
        let c = &mut self.replicas[r];
        c.builder.on_first_token(rank, times, frontend_s, n);
        if let Some(m) = c.metrics.as_mut() {
            m.on_first_token(rank, times, frontend_s, n);
        }
    }
    fn on_inter_tokens(&mut self, engine: usize, itl_s: f64, count: usize, t_s: f64) {
        let (r, rank) = self.engine[engine];
        let c = &mut self.replicas[r];
        c.builder.on_inter_tokens(rank, itl_s, count, t_s);
        if let Some(m) = c.metrics.as_mut() {
            m.on_inter_tokens(rank, itl_s, count, t_s);
        }
    }
    fn on_finished(&mut self, engine: usize, req: &FinishedRequest<'_>) {
        let (r, rank) = self.engine[engine];
        let c = &mut self.replicas[r];
        c.builder.on_finished(rank, req);
        if let Some(m) = c.metrics.as_mut() {
            m.on_finished(rank, req);
        }
    }
    fn on_rejected(&mut self, _req: &RequestSpec) {}
    fn on_step(&mut self, engine: usize, step: &StepSample) {
        let (r, rank) = self.engine[engine];
        let c = &mut self.replicas[r];
        c.builder.on_step(rank, step);
        if let Some(m) = c.metrics.as_mut() {
            m.on_step(rank, step);
        }
    }
}
