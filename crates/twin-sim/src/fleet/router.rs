//! The routers in front of a fleet of vLLM replicas. Each picks a replica for an arriving
//! request from what the real router it models can see; ties and randomness come from a
//! seeded generator the fleet owns, so a run is the same bytes every time.

use std::fmt;
use std::str::FromStr;

use twin_engine::{hash_block, BlockHash, NONE_HASH};
use twin_workload::RequestSpec;
use xxhash_rust::xxh3::xxh3_64;

use super::prefix_index::PrefixIndex;

/// Which router (`simulate --router`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouterKind {
    /// Kubernetes Service / production-stack `roundrobin`: each replica in turn.
    RoundRobin,
    /// production-stack's request-stats routing: the replica with the fewest requests in
    /// flight (sent and not finished), the lowest index on a tie.
    LeastLoaded,
    /// production-stack `session`: a consistent-hash ring over the replicas keyed by the
    /// session id (uhashring, 160 points per replica); requests without one fall back to
    /// least-loaded.
    SessionAffinity,
    /// llm-d's inference scheduler with precise prefix-cache scoring: the replicas' KV events
    /// feed a block-hash index; each replica scores weight × (matched prefix blocks / prompt
    /// blocks) + weight × queue score + weight × (1 − KV usage); the max-score picker breaks
    /// ties at random.
    PrefixAware,
    /// A uniformly random replica.
    Random,
}

impl RouterKind {
    pub const NAMES: [&'static str; 5] = [
        "round-robin",
        "least-loaded",
        "session-affinity",
        "prefix-aware",
        "random",
    ];

    pub fn name(self) -> &'static str {
        match self {
            RouterKind::RoundRobin => "round-robin",
            RouterKind::LeastLoaded => "least-loaded",
            RouterKind::SessionAffinity => "session-affinity",
            RouterKind::PrefixAware => "prefix-aware",
            RouterKind::Random => "random",
        }
    }
}

impl fmt::Display for RouterKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for RouterKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "round-robin" | "roundrobin" => RouterKind::RoundRobin,
            "least-loaded" => RouterKind::LeastLoaded,
            "session-affinity" | "session" => RouterKind::SessionAffinity,
            "prefix-aware" => RouterKind::PrefixAware,
            "random" => RouterKind::Random,
            _ => {
                return Err(format!(
                    "{s:?} is not a router; one of {}",
                    RouterKind::NAMES.join(", ")
                ))
            }
        })
    }
}

/// The prefix-aware router's scorer weights (llm-d's default EndpointPickerConfig:
/// prefix-cache-scorer 3, queue-scorer 2, kv-cache-utilization-scorer 2).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScorerWeights {
    pub prefix: f64,
    pub queue: f64,
    pub kv_cache: f64,
}

impl Default for ScorerWeights {
    fn default() -> Self {
        ScorerWeights {
            prefix: 3.0,
            queue: 2.0,
            kv_cache: 2.0,
        }
    }
}

/// The router's configuration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RouterConfig {
    pub kind: RouterKind,
    pub weights: ScorerWeights,
}

/// What a router may read of a replica when it routes.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReplicaLoad {
    /// Requests sent to it and not finished.
    pub in_flight: usize,
    /// `vllm:num_requests_waiting`.
    pub num_waiting: usize,
    /// `vllm:kv_cache_usage_perc` (0–1).
    pub kv_cache_usage: f64,
}

/// splitmix64: a small, seedable generator for tie-breaks and the random router.
#[derive(Clone, Debug)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0), by multiply-shift.
    fn below(&mut self, n: usize) -> usize {
        ((self.next() as u128 * n as u128) >> 64) as usize
    }
}

/// Points per replica on the session ring (uhashring's default).
const RING_POINTS_PER_REPLICA: usize = 160;

/// A router's state across the run.
pub struct Router {
    config: RouterConfig,
    rng: SplitMix64,
    next_round_robin: usize,
    /// Session ring: (point, replica), sorted; rebuilt when replicas come and go.
    ring: Vec<(u64, usize)>,
    ring_members: Vec<usize>,
    /// Prefix-aware only: which replicas hold which block hashes, from their KV events.
    pub(crate) index: Option<PrefixIndex>,
    block_size: usize,
    hashes: Vec<BlockHash>,
    loads: Vec<ReplicaLoad>,
    scores: Vec<f64>,
}

impl Router {
    /// `block_size`: the replicas' KV block size (prefix-aware hashes prompts with it).
    pub fn new(config: RouterConfig, seed: u64, block_size: usize) -> Self {
        Router {
            config,
            rng: SplitMix64(seed ^ 0x726f_7574_6572),
            next_round_robin: 0,
            ring: Vec::new(),
            ring_members: Vec::new(),
            index: (config.kind == RouterKind::PrefixAware).then(PrefixIndex::default),
            block_size: block_size.max(1),
            hashes: Vec::new(),
            loads: Vec::new(),
            scores: Vec::new(),
        }
    }

    pub fn config(&self) -> RouterConfig {
        self.config
    }

    /// Whether the router reads the replicas' KV events (prefix-aware).
    pub fn wants_kv_events(&self) -> bool {
        self.index.is_some()
    }

    /// One replica's KV cache events, as llm-d's indexer consumes its ZMQ stream.
    pub fn apply_kv_events(&mut self, replica: usize, events: &[twin_engine::KvCacheEvent]) {
        if let Some(index) = self.index.as_mut() {
            index.apply(replica, events);
        }
    }

    /// Pick one of `candidates` (replica indexes in service, ascending, not empty) for
    /// `spec`. `load(r)` reads replica `r`; `names[r]` is its pod name (the session ring's key).
    pub fn route(
        &mut self,
        spec: &RequestSpec,
        candidates: &[usize],
        names: &[String],
        load: &dyn Fn(usize) -> ReplicaLoad,
    ) -> usize {
        debug_assert!(!candidates.is_empty());
        match self.config.kind {
            RouterKind::RoundRobin => {
                let r = candidates[self.next_round_robin % candidates.len()];
                self.next_round_robin = self.next_round_robin.wrapping_add(1);
                r
            }
            RouterKind::LeastLoaded => least_loaded(candidates, load),
            RouterKind::SessionAffinity => match spec.session {
                Some(session) => self.ring_lookup(session, candidates, names),
                None => least_loaded(candidates, load),
            },
            RouterKind::Random => candidates[self.rng.below(candidates.len())],
            RouterKind::PrefixAware => self.prefix_aware(spec, candidates, load),
        }
    }

    /// production-stack `SessionRouter`: the session id's point on a consistent-hash ring.
    fn ring_lookup(&mut self, session: u64, candidates: &[usize], names: &[String]) -> usize {
        if self.ring_members != candidates {
            self.ring.clear();
            for &r in candidates {
                for point in 0..RING_POINTS_PER_REPLICA {
                    let key = format!("{}-{point}", names[r]);
                    self.ring.push((xxh3_64(key.as_bytes()), r));
                }
            }
            self.ring.sort_unstable();
            self.ring_members = candidates.to_vec();
        }
        let key = xxh3_64(&session.to_le_bytes());
        let i = self.ring.partition_point(|&(p, _)| p < key);
        self.ring[i % self.ring.len()].1
    }

    /// llm-d: filter → scorers (prefix, queue, KV utilisation) → max-score picker.
    fn prefix_aware(
        &mut self,
        spec: &RequestSpec,
        candidates: &[usize],
        load: &dyn Fn(usize) -> ReplicaLoad,
    ) -> usize {
        // The prompt's full blocks, chained as vLLM hashes them (llm-d's token processor).
        self.hashes.clear();
        let mut parent = NONE_HASH;
        for block in spec.prompt_token_ids.chunks_exact(self.block_size) {
            parent = hash_block(parent, block, None, None);
            self.hashes.push(parent);
        }
        self.loads.clear();
        self.loads.extend(candidates.iter().map(|&r| load(r)));
        let loads = &self.loads;
        let (q_min, q_max) = loads.iter().fold((usize::MAX, 0), |(lo, hi), l| {
            (lo.min(l.num_waiting), hi.max(l.num_waiting))
        });
        let index = self.index.as_ref().expect("prefix-aware keeps an index");
        let w = self.config.weights;
        let num_blocks = self.hashes.len();
        self.scores.clear();
        for (&r, l) in candidates.iter().zip(loads) {
            let prefix = if num_blocks == 0 {
                0.0
            } else {
                index.longest_prefix(r, &self.hashes) as f64 / num_blocks as f64
            };
            // queue-scorer: min-max normalised, fewer waiting is better; all equal → 1.
            let queue = if q_max == q_min {
                1.0
            } else {
                (q_max - l.num_waiting) as f64 / (q_max - q_min) as f64
            };
            let kv = 1.0 - l.kv_cache_usage.clamp(0.0, 1.0);
            self.scores
                .push(w.prefix * prefix + w.queue * queue + w.kv_cache * kv);
        }
        let best = self
            .scores
            .iter()
            .copied()
            .fold(f64::NEG_INFINITY, f64::max);
        let ties = self.scores.iter().filter(|&&s| s == best).count();
        let pick = self.rng.below(ties);
        let i = self
            .scores
            .iter()
            .enumerate()
            .filter(|(_, &s)| s == best)
            .nth(pick)
            .map_or(0, |(i, _)| i);
        candidates[i]
    }
}

fn least_loaded(candidates: &[usize], load: &dyn Fn(usize) -> ReplicaLoad) -> usize {
    candidates
        .iter()
        .copied()
        .min_by_key(|&r| (load(r).in_flight, r))
        .expect("at least one replica in service")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(session: Option<u64>) -> RequestSpec {
        RequestSpec {
            id: 0,
            arrival_time_s: 0.0,
            prompt_token_ids: vec![1; 40],
            max_tokens: 1,
            session,
            turn: 0,
            stage: None,
        }
    }

    fn router(kind: RouterKind) -> Router {
        Router::new(
            RouterConfig {
                kind,
                weights: ScorerWeights::default(),
            },
            7,
            16,
        )
    }

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("vllm-{i}")).collect()
    }

    #[test]
    fn round_robin_takes_each_replica_in_turn() {
        let mut r = router(RouterKind::RoundRobin);
        let picks: Vec<usize> = (0..6)
            .map(|_| {
                r.route(&spec(None), &[0, 1, 2], &names(3), &|_| {
                    ReplicaLoad::default()
                })
            })
            .collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn least_loaded_picks_the_fewest_in_flight() {
        let mut r = router(RouterKind::LeastLoaded);
        let load = |i: usize| ReplicaLoad {
            in_flight: [5, 2, 2][i],
            ..ReplicaLoad::default()
        };
        assert_eq!(r.route(&spec(None), &[0, 1, 2], &names(3), &load), 1);
    }

    #[test]
    fn a_session_stays_on_its_replica_and_sessions_spread() {
        let mut r = router(RouterKind::SessionAffinity);
        let n = names(4);
        let none = |_| ReplicaLoad::default();
        let mut used = [0usize; 4];
        for s in 0..400u64 {
            let first = r.route(&spec(Some(s)), &[0, 1, 2, 3], &n, &none);
            for _ in 0..3 {
                assert_eq!(r.route(&spec(Some(s)), &[0, 1, 2, 3], &n, &none), first);
            }
            used[first] += 1;
        }
        assert!(used.iter().all(|&u| u > 50), "sessions spread: {used:?}");
    }

    #[test]
    fn random_is_seeded() {
        let picks = |seed| {
            let mut r = Router::new(
                RouterConfig {
                    kind: RouterKind::Random,
                    weights: ScorerWeights::default(),
                },
                seed,
                16,
            );
            (0..20)
                .map(|_| {
                    r.route(&spec(None), &[0, 1, 2, 3], &names(4), &|_| {
                        ReplicaLoad::default()
                    })
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(picks(1), picks(1));
        assert_ne!(picks(1), picks(2));
    }

    #[test]
    fn unknown_router_names_the_choices() {
        let e = "fastest".parse::<RouterKind>().unwrap_err();
        assert!(
            e.contains("round-robin") && e.contains("prefix-aware"),
            "{e}"
        );
    }
}
