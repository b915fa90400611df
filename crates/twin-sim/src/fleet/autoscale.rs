//! `--autoscale FILE`: the Kubernetes control loop over a fleet, read from the
//! HorizontalPodAutoscaler (autoscaling/v2) or KEDA ScaledObject that `vllm-twin kit` writes
//! (or a user's own in those schemas).
//!
//! The loop as Kubernetes runs it: Prometheus scrapes every replica each scrape interval; every
//! 15 s (kube-controller-manager's `--horizontal-pod-autoscaler-sync-period`) the HPA reads
//! each metric as prometheus-adapter (the kit's rules) or KEDA (the trigger's query) serves
//! it, computes `desired = ceil(current × metric / target)` with the 0.1 tolerance and the
//! missing-pod rules of `replica_calculator.go`, takes the larger recommendation across
//! metrics, then applies the stabilization windows and the scale-up / scale-down policies of
//! `horizontal.go` (`normalizeDesiredReplicasWithBehaviors`) and min/max.

use std::collections::VecDeque;

use serde::Deserialize;

use crate::SimError;

/// kube-controller-manager's default `--horizontal-pod-autoscaler-sync-period`.
pub const HPA_SYNC_PERIOD_S: f64 = 15.0;
/// kube-controller-manager's default `--horizontal-pod-autoscaler-tolerance`.
pub const HPA_TOLERANCE: f64 = 0.1;
/// The largest autoscaling file read, in bytes.
pub const MAX_AUTOSCALE_BYTES: usize = 1 << 20;

/// A metric the twin can read per pod, as the scrape gives it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PodMetric {
    /// `vllm:num_requests_waiting`, summed over the pod's engines.
    Waiting,
    /// `vllm:num_requests_running`, summed over the pod's engines.
    Running,
    /// `vllm:kv_cache_usage_perc`, the largest over the pod's engines (`max by (pod)`).
    KvCacheUsage,
    /// `DCGM_FI_DEV_GPU_UTIL` (0–100) averaged over the pod's GPUs for the last scrape interval.
    GpuUtil,
}

impl PodMetric {
    /// The metric behind a prometheus-adapter name (`vllm_num_requests_waiting`) or a series
    /// name in a query (`vllm:num_requests_waiting`).
    pub fn from_name(name: &str) -> Option<Self> {
        let n = name.replace(':', "_");
        Some(match n.as_str() {
            "vllm_num_requests_waiting" => PodMetric::Waiting,
            "vllm_num_requests_running" => PodMetric::Running,
            "vllm_kv_cache_usage_perc" => PodMetric::KvCacheUsage,
            "DCGM_FI_DEV_GPU_UTIL" => PodMetric::GpuUtil,
            _ => return None,
        })
    }

    pub const NAMES: &'static str = "vllm_num_requests_waiting, vllm_num_requests_running, \
        vllm_kv_cache_usage_perc (prometheus-adapter names; vllm:… in KEDA queries) or \
        DCGM_FI_DEV_GPU_UTIL";
}

/// One scaling metric and its per-pod target.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricTarget {
    pub metric: PodMetric,
    /// Target average per pod (HPA `averageValue`, KEDA `threshold`).
    pub target: f64,
    /// Averaged over this window before use (the kit's adapter rule for waiting:
    /// `avg_over_time(...[30s])`); `None`: the last scrape.
    pub avg_window_s: Option<f64>,
    /// Where it came from, for messages.
    pub field: String,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PolicyKind {
    Pods,
    Percent,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScalingPolicy {
    pub kind: PolicyKind,
    pub value: f64,
    pub period_s: f64,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SelectPolicy {
    Max,
    Min,
    Disabled,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ScalingRules {
    pub stabilization_window_s: f64,
    pub select: SelectPolicy,
    pub policies: Vec<ScalingPolicy>,
}

impl ScalingRules {
    /// Kubernetes' defaults (`autoscaling/v2` HPAScalingRules).
    fn default_up() -> Self {
        ScalingRules {
            stabilization_window_s: 0.0,
            select: SelectPolicy::Max,
            policies: vec![
                ScalingPolicy {
                    kind: PolicyKind::Percent,
                    value: 100.0,
                    period_s: 15.0,
                },
                ScalingPolicy {
                    kind: PolicyKind::Pods,
                    value: 4.0,
                    period_s: 15.0,
                },
            ],
        }
    }

    fn default_down() -> Self {
        ScalingRules {
            stabilization_window_s: 300.0,
            select: SelectPolicy::Max,
            policies: vec![ScalingPolicy {
                kind: PolicyKind::Percent,
                value: 100.0,
                period_s: 15.0,
            }],
        }
    }
}

/// What the file asked for.
#[derive(Clone, Debug, PartialEq)]
pub struct AutoscaleSpec {
    /// `HorizontalPodAutoscaler` or `ScaledObject`.
    pub kind: String,
    /// `scaleTargetRef.name`: the pool it scales.
    pub target: String,
    pub min_replicas: usize,
    pub max_replicas: usize,
    pub metrics: Vec<MetricTarget>,
    pub scale_up: ScalingRules,
    pub scale_down: ScalingRules,
    /// How often the metric values refresh (KEDA's `pollingInterval`; the sync period for an HPA).
    pub metric_refresh_s: f64,
}

// ---- the files' schemas (only what the loop reads; other fields are Kubernetes' business) ----

#[derive(Deserialize)]
struct Object {
    #[serde(rename = "apiVersion")]
    api_version: String,
    kind: String,
    spec: serde_norway::Value,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TargetRef {
    name: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HpaSpec {
    scale_target_ref: TargetRef,
    #[serde(default)]
    min_replicas: Option<i64>,
    max_replicas: i64,
    #[serde(default)]
    metrics: Vec<HpaMetric>,
    #[serde(default)]
    behavior: Option<Behavior>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HpaMetric {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    pods: Option<PodsSource>,
}

#[derive(Deserialize)]
struct PodsSource {
    metric: MetricId,
    target: MetricTargetSpec,
}

#[derive(Deserialize)]
struct MetricId {
    name: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetricTargetSpec {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    average_value: Option<serde_norway::Value>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Behavior {
    #[serde(default)]
    scale_up: Option<Rules>,
    #[serde(default)]
    scale_down: Option<Rules>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Rules {
    #[serde(default)]
    stabilization_window_seconds: Option<i64>,
    #[serde(default)]
    select_policy: Option<String>,
    #[serde(default)]
    policies: Option<Vec<Policy>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Policy {
    #[serde(rename = "type")]
    kind: String,
    value: i64,
    period_seconds: i64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct KedaSpec {
    scale_target_ref: TargetRef,
    #[serde(default)]
    min_replica_count: Option<i64>,
    #[serde(default)]
    max_replica_count: Option<i64>,
    #[serde(default)]
    polling_interval: Option<i64>,
    #[serde(default)]
    advanced: Option<KedaAdvanced>,
    triggers: Vec<KedaTrigger>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct KedaAdvanced {
    #[serde(default)]
    horizontal_pod_autoscaler_config: Option<KedaHpaConfig>,
}

#[derive(Deserialize)]
struct KedaHpaConfig {
    #[serde(default)]
    behavior: Option<Behavior>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct KedaTrigger {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    metric_type: Option<String>,
    metadata: std::collections::BTreeMap<String, String>,
}

fn err(path: &str, text: &str, field: &str, needle: Option<&str>, message: String) -> SimError {
    // Point at the line that holds the offending value when the text has it.
    let line = needle
        .and_then(|n| text.find(n))
        .map(|at| format!("line {}: ", text[..at].matches('\n').count() + 1))
        .unwrap_or_default();
    SimError::Config {
        field: format!("{path}: {line}{field}"),
        message,
    }
}

/// A Kubernetes quantity (`650m`, `3`, `0.65`, `1k`) as a number.
pub fn parse_quantity(q: &str) -> Option<f64> {
    let q = q.trim();
    let (num, mult) = match q.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let mult = match &q[i..] {
                "m" => 1e-3,
                "k" => 1e3,
                "M" => 1e6,
                "G" => 1e9,
                "Ki" => 1024.0,
                "Mi" => 1024.0 * 1024.0,
                _ => return None,
            };
            (&q[..i], mult)
        }
        None => (q, 1.0),
    };
    let v: f64 = num.parse().ok()?;
    (v.is_finite() && v >= 0.0).then_some(v * mult)
}

fn quantity_of(v: &serde_norway::Value) -> Option<f64> {
    match v {
        serde_norway::Value::String(s) => parse_quantity(s),
        serde_norway::Value::Number(n) => n.as_f64().filter(|x| x.is_finite() && *x >= 0.0),
        _ => None,
    }
}

fn rules(
    path: &str,
    text: &str,
    field: &str,
    given: Option<Rules>,
    default: ScalingRules,
) -> Result<ScalingRules, SimError> {
    let Some(r) = given else {
        return Ok(default);
    };
    let stabilization_window_s = match r.stabilization_window_seconds {
        None => default.stabilization_window_s,
        Some(s) if (0..=3600).contains(&s) => s as f64,
        Some(s) => {
            return Err(err(
                path,
                text,
                &format!("{field}.stabilizationWindowSeconds"),
                Some("stabilizationWindowSeconds"),
                format!("{s}: between 0 and 3600 (Kubernetes' limit)"),
            ))
        }
    };
    let select = match r.select_policy.as_deref() {
        None | Some("Max") => SelectPolicy::Max,
        Some("Min") => SelectPolicy::Min,
        Some("Disabled") => SelectPolicy::Disabled,
        Some(other) => {
            return Err(err(
                path,
                text,
                &format!("{field}.selectPolicy"),
                Some(other),
                format!("{other:?}: one of Max, Min, Disabled"),
            ))
        }
    };
    let policies = match r.policies {
        None => default.policies,
        Some(ps) => ps
            .into_iter()
            .enumerate()
            .map(|(i, p)| {
                let f = format!("{field}.policies[{i}]");
                let kind = match p.kind.as_str() {
                    "Pods" => PolicyKind::Pods,
                    "Percent" => PolicyKind::Percent,
                    other => {
                        return Err(err(
                            path,
                            text,
                            &format!("{f}.type"),
                            Some(other),
                            format!("{other:?}: Pods or Percent"),
                        ))
                    }
                };
                if p.value <= 0 || !(1..=1800).contains(&p.period_seconds) {
                    return Err(err(
                        path,
                        text,
                        &f,
                        None,
                        "value must be > 0 and periodSeconds 1..1800 (Kubernetes' limits)".into(),
                    ));
                }
                Ok(ScalingPolicy {
                    kind,
                    value: p.value as f64,
                    period_s: p.period_seconds as f64,
                })
            })
            .collect::<Result<_, _>>()?,
    };
    Ok(ScalingRules {
        stabilization_window_s,
        select,
        policies,
    })
}

/// Read an HPA or KEDA ScaledObject. `path` names the file in errors.
pub fn parse_autoscale(path: &str, text: &str) -> Result<AutoscaleSpec, SimError> {
    if text.len() > MAX_AUTOSCALE_BYTES {
        return Err(err(
            path,
            text,
            "size",
            None,
            format!("{} bytes; at most {MAX_AUTOSCALE_BYTES}", text.len()),
        ));
    }
    let yaml_err = |e: serde_norway::Error| {
        let line = e
            .location()
            .map(|l| format!("line {}", l.line()))
            .unwrap_or_else(|| "file".into());
        SimError::Config {
            field: format!("{path}: {line}"),
            message: e.to_string(),
        }
    };
    let obj: Object = serde_norway::from_str(text).map_err(yaml_err)?;
    let (min_replicas, max_replicas, metrics, behavior, target, refresh) = match (
        obj.api_version.as_str(),
        obj.kind.as_str(),
    ) {
        ("autoscaling/v2", "HorizontalPodAutoscaler") => {
            let spec: HpaSpec = serde_norway::from_value(obj.spec).map_err(yaml_err)?;
            let mut metrics = Vec::new();
            for (i, m) in spec.metrics.into_iter().enumerate() {
                let field = format!("spec.metrics[{i}]");
                let Some(pods) = m.pods.filter(|_| m.kind == "Pods") else {
                    return Err(err(
                        path,
                        text,
                        &format!("{field}.type"),
                        Some(&m.kind),
                        format!(
                            "{:?}: the twin reads Pods metrics (per-pod custom metrics from prometheus-adapter)",
                            m.kind
                        ),
                    ));
                };
                let metric = PodMetric::from_name(&pods.metric.name).ok_or_else(|| {
                    err(
                        path,
                        text,
                        &format!("{field}.pods.metric.name"),
                        Some(&pods.metric.name),
                        format!(
                            "{:?} is not a metric the twin exports; one of {}",
                            pods.metric.name,
                            PodMetric::NAMES
                        ),
                    )
                })?;
                if pods.target.kind != "AverageValue" {
                    return Err(err(
                        path,
                        text,
                        &format!("{field}.pods.target.type"),
                        Some(&pods.target.kind),
                        format!("{:?}: Pods metrics take AverageValue", pods.target.kind),
                    ));
                }
                let target = pods
                    .target
                    .average_value
                    .as_ref()
                    .and_then(quantity_of)
                    .filter(|&t| t > 0.0)
                    .ok_or_else(|| {
                        err(
                            path,
                            text,
                            &format!("{field}.pods.target.averageValue"),
                            Some("averageValue"),
                            "a positive quantity (e.g. 650m or '3')".into(),
                        )
                    })?;
                metrics.push(MetricTarget {
                    metric,
                    target,
                    // The kit's prometheus-adapter rule averages the queue over 30 s.
                    avg_window_s: (metric == PodMetric::Waiting).then_some(30.0),
                    field,
                });
            }
            (
                spec.min_replicas.unwrap_or(1),
                spec.max_replicas,
                metrics,
                spec.behavior.unwrap_or_default(),
                spec.scale_target_ref.name,
                HPA_SYNC_PERIOD_S,
            )
        }
        ("keda.sh/v1alpha1", "ScaledObject") => {
            let spec: KedaSpec = serde_norway::from_value(obj.spec).map_err(yaml_err)?;
            let mut metrics = Vec::new();
            for (i, t) in spec.triggers.into_iter().enumerate() {
                let field = format!("spec.triggers[{i}]");
                if t.kind != "prometheus" {
                    return Err(err(
                        path,
                        text,
                        &format!("{field}.type"),
                        Some(&t.kind),
                        format!("{:?}: the twin evaluates prometheus triggers", t.kind),
                    ));
                }
                if t.metric_type.as_deref().is_some_and(|m| m != "AverageValue") {
                    return Err(err(
                        path,
                        text,
                        &format!("{field}.metricType"),
                        t.metric_type.as_deref(),
                        "the twin evaluates AverageValue triggers".into(),
                    ));
                }
                let query = t.metadata.get("query").ok_or_else(|| {
                    err(path, text, &format!("{field}.metadata.query"), None, "missing".into())
                })?;
                let metric = keda_query_metric(query).ok_or_else(|| {
                    err(
                        path,
                        text,
                        &format!("{field}.metadata.query"),
                        Some(query),
                        format!(
                            "{query:?}: the twin evaluates a sum over pods of one of {} (as `vllm-twin kit` writes it)",
                            PodMetric::NAMES
                        ),
                    )
                })?;
                let threshold = t
                    .metadata
                    .get("threshold")
                    .and_then(|q| parse_quantity(q))
                    .filter(|&x| x > 0.0)
                    .ok_or_else(|| {
                        err(
                            path,
                            text,
                            &format!("{field}.metadata.threshold"),
                            Some("threshold"),
                            "a positive number".into(),
                        )
                    })?;
                metrics.push(MetricTarget {
                    metric,
                    target: threshold,
                    avg_window_s: None,
                    field,
                });
            }
            let behavior = spec
                .advanced
                .and_then(|a| a.horizontal_pod_autoscaler_config)
                .and_then(|h| h.behavior)
                .unwrap_or_default();
            let polling = spec.polling_interval.unwrap_or(30);
            if !(1..=3600).contains(&polling) {
                return Err(err(
                    path,
                    text,
                    "spec.pollingInterval",
                    Some("pollingInterval"),
                    format!("{polling}: between 1 and 3600 seconds"),
                ));
            }
            (
                spec.min_replica_count.unwrap_or(0),
                spec.max_replica_count.unwrap_or(100),
                metrics,
                behavior,
                spec.scale_target_ref.name,
                polling as f64,
            )
        }
        (api, kind) => {
            return Err(err(
                path,
                text,
                "kind",
                Some(kind),
                format!(
                    "{api} {kind}: the twin reads autoscaling/v2 HorizontalPodAutoscaler or keda.sh/v1alpha1 ScaledObject"
                ),
            ))
        }
    };
    if metrics.is_empty() {
        return Err(err(
            path,
            text,
            "spec",
            None,
            "no metrics to scale on".into(),
        ));
    }
    if min_replicas < 1 {
        return Err(err(
            path,
            text,
            "minReplicas",
            Some("inReplica"),
            format!("{min_replicas}: scale to zero is not modelled; the twin needs at least 1"),
        ));
    }
    if max_replicas < min_replicas || max_replicas > super::MAX_REPLICAS as i64 {
        return Err(err(
            path,
            text,
            "maxReplicas",
            Some("axReplica"),
            format!(
                "{max_replicas}: between minReplicas ({min_replicas}) and {}",
                super::MAX_REPLICAS
            ),
        ));
    }
    Ok(AutoscaleSpec {
        kind: obj.kind,
        target,
        min_replicas: min_replicas as usize,
        max_replicas: max_replicas as usize,
        metrics,
        scale_up: rules(
            path,
            text,
            "behavior.scaleUp",
            behavior.scale_up,
            ScalingRules::default_up(),
        )?,
        scale_down: rules(
            path,
            text,
            "behavior.scaleDown",
            behavior.scale_down,
            ScalingRules::default_down(),
        )?,
        metric_refresh_s: refresh,
    })
}

/// An HPA (autoscaling/v2) on one Pods metric for the Deployment `vllm`, 1 to 8 replicas,
/// Kubernetes' default behavior: what the experiments and the sandbox scale with.
pub fn example_hpa(metric: &str, target: &str) -> String {
    format!(
        "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata:\n  name: vllm\n\
         spec:\n  scaleTargetRef:\n    apiVersion: apps/v1\n    kind: Deployment\n    name: vllm\n\
         \x20 minReplicas: 1\n  maxReplicas: 8\n  metrics:\n  - type: Pods\n    pods:\n\
         \x20     metric:\n        name: {metric}\n      target:\n        type: AverageValue\n\
         \x20       averageValue: '{target}'\n"
    )
}

/// The metric of a KEDA query of the kit's shapes: `sum(NAME{…}) or vector(0)` and
/// `sum(max by (pod) (NAME{…})) or vector(0)`.
fn keda_query_metric(query: &str) -> Option<PodMetric> {
    let q: String = query.split_whitespace().collect();
    let body = q.strip_suffix("orvector(0)").unwrap_or(&q);
    let inner = body.strip_prefix("sum(")?.strip_suffix(')')?;
    let inner = match inner.strip_prefix("maxby(pod)(") {
        Some(rest) => rest.strip_suffix(')')?,
        None => inner,
    };
    let name = inner.split('{').next()?;
    if inner.contains('(') {
        return None;
    }
    PodMetric::from_name(name)
}

/// One replica's scraped values at one scrape.
#[derive(Clone, Copy, Debug, Default)]
pub struct PodSample {
    pub t_s: f64,
    pub waiting: f64,
    pub running: f64,
    pub kv_cache_usage: f64,
    /// Cumulative GPU busy seconds of the pod (all its engines), for DCGM's utilisation.
    pub busy_s: f64,
    pub num_gpus: f64,
}

/// The HPA's memory between syncs.
pub struct Autoscaler {
    pub spec: AutoscaleSpec,
    recommendations: VecDeque<(f64, usize)>,
    /// (time, replicas added (+) or removed (−)).
    scale_events: VecDeque<(f64, i64)>,
    /// The values the metrics had at the last refresh (KEDA polls; the HPA reads each sync).
    cached: Vec<Option<f64>>,
    last_refresh_s: f64,
}

impl Autoscaler {
    pub fn new(spec: AutoscaleSpec) -> Self {
        let n = spec.metrics.len();
        Autoscaler {
            spec,
            recommendations: VecDeque::new(),
            scale_events: VecDeque::new(),
            cached: vec![None; n],
            last_refresh_s: f64::NEG_INFINITY,
        }
    }

    /// One sync at `now_s`: `current` replicas in the spec (ready + starting), `ready` the
    /// scrape histories of the replicas that serve (oldest first). Returns the new replica
    /// count (which may equal `current`).
    pub fn sync(&mut self, now_s: f64, current: usize, ready: &[&VecDeque<PodSample>]) -> usize {
        if now_s - self.last_refresh_s >= self.spec.metric_refresh_s - 1e-9 {
            for (i, m) in self.spec.metrics.iter().enumerate() {
                self.cached[i] = metric_sum(m, ready, now_s);
            }
            self.last_refresh_s = now_s;
        }
        let mut desired: Option<usize> = None;
        for (m, sum) in self.spec.metrics.iter().zip(&self.cached) {
            let Some(sum) = *sum else { continue };
            let d = replicas_for(
                m.target,
                sum,
                ready.len(),
                current,
                self.spec.kind == "ScaledObject",
            );
            desired = Some(desired.map_or(d, |x| x.max(d)));
        }
        let Some(desired) = desired else {
            return current;
        };
        let stabilized = self.stabilize(now_s, current, desired);
        let limited = self.rate_limit(now_s, current, stabilized);
        let next = limited.clamp(self.spec.min_replicas, self.spec.max_replicas);
        if next != current {
            self.scale_events
                .push_back((now_s, next as i64 - current as i64));
        }
        next
    }

    /// horizontal.go `stabilizeRecommendationWithBehaviors`.
    fn stabilize(&mut self, now_s: f64, current: usize, desired: usize) -> usize {
        let up_cut = now_s - self.spec.scale_up.stabilization_window_s;
        let down_cut = now_s - self.spec.scale_down.stabilization_window_s;
        let (mut up, mut down) = (desired, desired);
        for &(t, r) in &self.recommendations {
            if t > up_cut {
                up = up.min(r);
            }
            if t > down_cut {
                down = down.max(r);
            }
        }
        let keep = self
            .spec
            .scale_up
            .stabilization_window_s
            .max(self.spec.scale_down.stabilization_window_s);
        while self
            .recommendations
            .front()
            .is_some_and(|&(t, _)| t <= now_s - keep)
        {
            self.recommendations.pop_front();
        }
        self.recommendations.push_back((now_s, desired));
        current.max(up).min(down)
    }

    /// horizontal.go `convertDesiredReplicasWithBehaviorRate`.
    fn rate_limit(&mut self, now_s: f64, current: usize, desired: usize) -> usize {
        let longest = self
            .spec
            .scale_up
            .policies
            .iter()
            .chain(&self.spec.scale_down.policies)
            .map(|p| p.period_s)
            .fold(0.0, f64::max);
        while self
            .scale_events
            .front()
            .is_some_and(|&(t, _)| t <= now_s - longest)
        {
            self.scale_events.pop_front();
        }
        let changed_within = |period_s: f64, up: bool| -> i64 {
            self.scale_events
                .iter()
                .filter(|&&(t, d)| t > now_s - period_s && (d > 0) == up)
                .map(|&(_, d)| d.abs())
                .sum()
        };
        let cur = current as i64;
        if desired > current {
            let r = &self.spec.scale_up;
            if r.select == SelectPolicy::Disabled {
                return current;
            }
            let limits = r.policies.iter().map(|p| {
                let start = cur - changed_within(p.period_s, true);
                match p.kind {
                    PolicyKind::Pods => start + p.value as i64,
                    PolicyKind::Percent => (start as f64 * (1.0 + p.value / 100.0)).ceil() as i64,
                }
            });
            let limit = match r.select {
                SelectPolicy::Min => limits.min(),
                _ => limits.max(),
            }
            .unwrap_or(cur)
            .max(cur);
            desired.min(limit.max(0) as usize)
        } else if desired < current {
            let r = &self.spec.scale_down;
            if r.select == SelectPolicy::Disabled {
                return current;
            }
            let limits = r.policies.iter().map(|p| {
                let start = cur + changed_within(p.period_s, false);
                match p.kind {
                    PolicyKind::Pods => start - p.value as i64,
                    PolicyKind::Percent => (start as f64 * (1.0 - p.value / 100.0)) as i64,
                }
            });
            // For scale-down, Max picks the policy that allows the most change: the lowest.
            let limit = match r.select {
                SelectPolicy::Min => limits.max(),
                _ => limits.min(),
            }
            .unwrap_or(cur)
            .min(cur);
            desired.max(limit.max(0) as usize)
        } else {
            current
        }
    }
}

/// The metric summed over ready pods, read as served at `now_s` (`None`: no pod has data).
fn metric_sum(m: &MetricTarget, ready: &[&VecDeque<PodSample>], now_s: f64) -> Option<f64> {
    let mut sum = 0.0;
    let mut any = false;
    for hist in ready {
        let Some(last) = hist.back() else { continue };
        any = true;
        sum += match m.metric {
            PodMetric::Waiting | PodMetric::Running | PodMetric::KvCacheUsage => {
                let get = |s: &PodSample| match m.metric {
                    PodMetric::Waiting => s.waiting,
                    PodMetric::Running => s.running,
                    _ => s.kv_cache_usage,
                };
                match m.avg_window_s {
                    Some(w) => {
                        let (n, total) = hist
                            .iter()
                            .filter(|s| s.t_s > now_s - w)
                            .fold((0usize, 0.0), |(n, t), s| (n + 1, t + get(s)));
                        if n == 0 {
                            get(last)
                        } else {
                            total / n as f64
                        }
                    }
                    None => get(last),
                }
            }
            PodMetric::GpuUtil => {
                let prev = hist.iter().rev().nth(1);
                match prev {
                    Some(p) if last.t_s > p.t_s => {
                        100.0 * (last.busy_s - p.busy_s)
                            / ((last.t_s - p.t_s) * last.num_gpus.max(1.0))
                    }
                    _ => 0.0,
                }
            }
        };
    }
    any.then_some(sum)
}

/// `replica_calculator.go`: replicas for one metric. `sum` is over the `ready` pods that
/// report; the other `current − ready` pods are starting (no metrics yet).
fn replicas_for(target: f64, sum: f64, ready: usize, current: usize, external: bool) -> usize {
    if ready == 0 {
        return current;
    }
    if external {
        // An External AverageValue metric (KEDA): the total over the target per pod.
        let ratio = sum / (target * current.max(1) as f64);
        if (ratio - 1.0).abs() <= HPA_TOLERANCE {
            return current;
        }
        return (sum / target).ceil() as usize;
    }
    let ratio = sum / ready as f64 / target;
    let missing = current.saturating_sub(ready);
    if missing == 0 {
        if (ratio - 1.0).abs() <= HPA_TOLERANCE {
            return current;
        }
        return (ratio * ready as f64).ceil() as usize;
    }
    // Starting pods count as 0 when scaling up, at the target when scaling down.
    let assumed = if ratio > 1.0 {
        0.0
    } else {
        target * missing as f64
    };
    let new_ratio = (sum + assumed) / current as f64 / target;
    if (new_ratio - 1.0).abs() <= HPA_TOLERANCE || (ratio < 1.0) != (new_ratio < 1.0) {
        return current;
    }
    (new_ratio * current as f64).ceil() as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(values: &[(f64, f64)]) -> VecDeque<PodSample> {
        values
            .iter()
            .map(|&(t, w)| PodSample {
                t_s: t,
                waiting: w,
                ..PodSample::default()
            })
            .collect()
    }

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity("650m"), Some(0.65));
        assert_eq!(parse_quantity("3"), Some(3.0));
        assert_eq!(parse_quantity("1k"), Some(1000.0));
        assert_eq!(parse_quantity("-1"), None);
        assert_eq!(parse_quantity("3x"), None);
    }

    #[test]
    fn the_hpa_formula_with_tolerance_and_starting_pods() {
        // 2 pods at 6 waiting each, target 3: ceil(2 × 6/3) = 4.
        assert_eq!(replicas_for(3.0, 12.0, 2, 2, false), 4);
        // Within 10% of the target: no change.
        assert_eq!(replicas_for(3.0, 6.3, 2, 2, false), 2);
        // Two more starting: they count as 0, so 12 over 4 pods = 3 = target: hold.
        assert_eq!(replicas_for(3.0, 12.0, 2, 4, false), 4);
        // Far below target with none starting: scale in.
        assert_eq!(replicas_for(3.0, 1.0, 4, 4, false), 1);
        // KEDA's External AverageValue: ceil(total / threshold).
        assert_eq!(replicas_for(3.0, 20.0, 2, 2, true), 7);
    }

    #[test]
    fn stabilization_and_policies_limit_the_change() {
        let spec = AutoscaleSpec {
            kind: "HorizontalPodAutoscaler".into(),
            target: "vllm".into(),
            min_replicas: 1,
            max_replicas: 10,
            metrics: vec![MetricTarget {
                metric: PodMetric::Waiting,
                target: 3.0,
                avg_window_s: None,
                field: "m".into(),
            }],
            scale_up: ScalingRules {
                stabilization_window_s: 0.0,
                select: SelectPolicy::Max,
                policies: vec![ScalingPolicy {
                    kind: PolicyKind::Pods,
                    value: 2.0,
                    period_s: 60.0,
                }],
            },
            scale_down: ScalingRules::default_down(),
            metric_refresh_s: 15.0,
        };
        let mut a = Autoscaler::new(spec);
        let busy = hist(&[(0.0, 30.0)]);
        // Wants 10, policy allows +2 per 60 s.
        assert_eq!(a.sync(15.0, 1, &[&busy]), 3);
        // Within the same 60 s the 2 pods were already added: no more.
        let busy3 = [&busy, &busy, &busy];
        assert_eq!(a.sync(30.0, 3, &busy3), 3);
        assert_eq!(a.sync(76.0, 3, &busy3), 5);
        // Load gone: the 300 s scale-down window keeps the highest recent recommendation.
        let idle = hist(&[(90.0, 0.0)]);
        let idle5 = [&idle, &idle, &idle, &idle, &idle];
        assert_eq!(a.sync(91.0, 5, &idle5), 5);
        assert_eq!(a.sync(400.0, 5, &idle5), 1);
    }

    #[test]
    fn the_example_hpas_parse() {
        for (metric, m) in [
            ("vllm_num_requests_waiting", PodMetric::Waiting),
            ("vllm_kv_cache_usage_perc", PodMetric::KvCacheUsage),
            ("DCGM_FI_DEV_GPU_UTIL", PodMetric::GpuUtil),
        ] {
            let s = parse_autoscale("x.yaml", &example_hpa(metric, "3")).unwrap();
            assert_eq!((s.metrics[0].metric, s.metrics[0].target), (m, 3.0));
            assert_eq!(
                (s.min_replicas, s.max_replicas, s.target.as_str()),
                (1, 8, "vllm")
            );
            assert_eq!(s.scale_down, ScalingRules::default_down());
        }
    }

    #[test]
    fn the_kits_files_parse() {
        let keda = "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata:\n  name: vllm\nspec:\n  scaleTargetRef:\n    name: vllm\n  minReplicaCount: 1\n  maxReplicaCount: 8\n  pollingInterval: 15\n  triggers:\n  - type: prometheus\n    metricType: AverageValue\n    metadata:\n      query: sum(max by (pod) (vllm:kv_cache_usage_perc{namespace=\"default\",pod=~\"vllm-.*\"})) or vector(0)\n      serverAddress: http://prometheus:9090\n      threshold: '0.65'\n";
        let s = parse_autoscale("k.yaml", keda).unwrap();
        assert_eq!(s.metrics[0].metric, PodMetric::KvCacheUsage);
        assert_eq!(s.metrics[0].target, 0.65);
        assert_eq!(s.metric_refresh_s, 15.0);
        let bad = keda.replace("vllm:kv_cache_usage_perc", "vllm:gpu_temperature");
        let e = parse_autoscale("k.yaml", &bad).unwrap_err().to_string();
        assert!(
            e.starts_with("k.yaml: line 15: spec.triggers[0].metadata.query"),
            "{e}"
        );
    }
}
