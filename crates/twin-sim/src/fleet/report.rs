//! The fleet part of the report: per replica, fleet-wide prefix hits, replicas over time.

use std::fmt::Write as _;

use serde::Serialize;

use super::{FleetOutcome, RouterKind};

use crate::report::{Dist, SecondRow};

/// One replica's row (`fleet.replicas[]` in the JSON report).
#[derive(Clone, Debug, Serialize)]
pub struct ReplicaRow {
    pub name: String,
    pub pool: String,
    pub num_finished: u64,
    /// Refused by its frontend (prompt longer than its `max_model_len`).
    pub num_rejected: u64,
    pub prefix_cache_hit_rate: f64,
    pub kv_cache_usage_mean: f64,
    pub kv_cache_usage_peak: f64,
    pub num_waiting_peak: usize,
    pub num_preemptions: u64,
    pub ttft_s: Dist,
    pub itl_s: Dist,
    #[serde(skip)]
    pub seconds: Vec<SecondRow>,
}

/// `fleet` in the JSON report (schema in docs/fleet.md).
#[derive(Clone, Debug, Serialize)]
pub struct FleetReport {
    pub router: String,
    pub replicas: Vec<ReplicaRow>,
    /// Hits over queries, every replica's prefix cache together.
    pub prefix_cache_hit_rate: f64,
    /// Replicas in service: `[t_s, n]` at the start and at every change.
    pub replica_count: Vec<(f64, usize)>,
    /// `--autoscale`: what scaled the fleet and what a new pod waited for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autoscale: Option<AutoscaleSummary>,
    /// P/D disaggregation: the KV link and what crossed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pd: Option<PdSummary>,
}

/// `fleet.pd` in the JSON report.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PdSummary {
    pub prefill_replicas: usize,
    pub decode_replicas: usize,
    pub kv_link: super::KvLink,
    /// KV pulls (one per request a decode instance admitted; a preempted one recomputes).
    pub num_transfers: u64,
    pub kv_bytes_total: f64,
    /// Mean time a pull took on the link.
    pub transfer_s_mean: f64,
}

/// `fleet.autoscale` in the JSON report.
#[derive(Clone, Debug, Serialize)]
pub struct AutoscaleSummary {
    /// `HorizontalPodAutoscaler` or `ScaledObject`.
    pub kind: String,
    pub pool: String,
    pub min_replicas: usize,
    pub max_replicas: usize,
    pub pod_startup_s: super::PodStartup,
    pub scale_ups: usize,
    pub scale_downs: usize,
}

impl AutoscaleSummary {
    pub fn new(a: &super::AutoscaleConfig, pool: &str, replica_count: &[(f64, usize)]) -> Self {
        let steps = replica_count.windows(2);
        AutoscaleSummary {
            kind: a.spec.kind.clone(),
            pool: pool.to_string(),
            min_replicas: a.spec.min_replicas,
            max_replicas: a.spec.max_replicas,
            pod_startup_s: a.pod_startup,
            scale_ups: steps.clone().filter(|w| w[1].1 > w[0].1).count(),
            scale_downs: steps.filter(|w| w[1].1 < w[0].1).count(),
        }
    }
}

impl FleetReport {
    /// The fleet part of the report of `fleet`'s run.
    pub fn new(fleet: &super::FleetConfig, outcome: &FleetOutcome) -> Self {
        let pool_names: Vec<&str> = fleet.pools.iter().map(|p| p.name.as_str()).collect();
        let (mut hits, mut queries) = (0.0, 0.0);
        let replicas = outcome
            .replicas
            .iter()
            .map(|r| {
                let rep = &r.report;
                hits += rep.prefix_cache_hits as f64;
                queries += rep.prefix_cache_queries as f64;
                ReplicaRow {
                    name: r.name.clone(),
                    pool: pool_names
                        .get(r.pool)
                        .copied()
                        .unwrap_or_default()
                        .to_string(),
                    num_finished: rep.num_finished,
                    num_rejected: rep.num_rejected,
                    prefix_cache_hit_rate: rep.prefix_cache_hit_rate,
                    kv_cache_usage_mean: rep.kv_cache_usage_mean,
                    kv_cache_usage_peak: rep.kv_cache_usage_peak,
                    num_waiting_peak: rep.num_waiting_peak,
                    num_preemptions: rep.num_preemptions,
                    ttft_s: rep.ttft_s.clone(),
                    itl_s: rep.itl_s.clone(),
                    seconds: rep.seconds.clone(),
                }
            })
            .collect();
        FleetReport {
            router: outcome.router.name().to_string(),
            replicas,
            prefix_cache_hit_rate: if queries > 0.0 { hits / queries } else { 0.0 },
            replica_count: outcome.replica_count.clone(),
            autoscale: fleet
                .autoscale
                .as_ref()
                .map(|a| AutoscaleSummary::new(a, pool_names[a.pool], &outcome.replica_count)),
            pd: outcome.pd.clone(),
        }
    }

    /// The per-replica table of the text report.
    pub fn render_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "\nfleet: {} replicas behind {}   fleet prefix-cache hit rate {:.1}%",
            self.replicas.len(),
            self.router,
            self.prefix_cache_hit_rate * 100.0
        );
        if let Some(pd) = &self.pd {
            let _ = writeln!(
                s,
                "P/D: {} prefill + {} decode replicas; {} KV pulls, {:.2} GB in all, {:.2} ms each on average ({} GB/s, {} ms per pull)",
                pd.prefill_replicas,
                pd.decode_replicas,
                pd.num_transfers,
                pd.kv_bytes_total / 1e9,
                pd.transfer_s_mean * 1e3,
                pd.kv_link.gbytes_per_s,
                pd.kv_link.latency_s * 1e3
            );
        }
        if let Some(a) = &self.autoscale {
            let peak = self.replica_count.iter().map(|c| c.1).max().unwrap_or(0);
            let _ = writeln!(
                s,
                "autoscale: {} on pool {}: {} scale-ups, {} scale-downs, peak {} replicas; a new pod took {:.0} s to serve",
                a.kind,
                a.pool,
                a.scale_ups,
                a.scale_downs,
                peak,
                a.pod_startup_s.total_s()
            );
        }
        let _ = writeln!(
            s,
            "{:<16}{:>10}{:>9}{:>9}{:>9}{:>8}{:>9}{:>11}{:>11}{:>10}",
            "replica",
            "requests",
            "hit %",
            "KV mean",
            "KV peak",
            "wait^",
            "preempt",
            "TTFT p50",
            "TTFT p99",
            "ITL p50"
        );
        for r in &self.replicas {
            let _ = writeln!(
                s,
                "{:<16}{:>10}{:>9.1}{:>8.1}%{:>8.1}%{:>8}{:>9}{:>9.1}ms{:>9.1}ms{:>8.1}ms",
                r.name,
                r.num_finished,
                r.prefix_cache_hit_rate * 100.0,
                r.kv_cache_usage_mean * 100.0,
                r.kv_cache_usage_peak * 100.0,
                r.num_waiting_peak,
                r.num_preemptions,
                r.ttft_s.p50 * 1e3,
                r.ttft_s.p99 * 1e3,
                r.itl_s.p50 * 1e3
            );
        }
        s
    }
}

impl RouterKind {
    /// The real router this one models, for reports and docs.
    pub fn models(self) -> &'static str {
        match self {
            RouterKind::RoundRobin => "a Kubernetes Service / production-stack roundrobin",
            RouterKind::LeastLoaded => "production-stack's request-stats routing",
            RouterKind::SessionAffinity => "production-stack's session router",
            RouterKind::PrefixAware => "llm-d's inference scheduler (precise prefix-cache scoring)",
            RouterKind::Random => "random choice",
        }
    }
}
