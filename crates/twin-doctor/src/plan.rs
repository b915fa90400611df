//! One plan: the findings merged by root cause and ordered "do this first" (a cause before
//! its consequences: a full KV pool before the queue it makes, the latency before the
//! clients who give up on it), each flag or action once, with what to expect from it.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::playbook::{Finding, Severity};
use crate::recommend::Recommendation;

/// One step of the plan: a root cause on one instance and what to do about it.
#[derive(Clone, Debug, Serialize)]
pub struct PlanStep {
    pub order: usize,
    pub instance: String,
    /// The root cause, in words.
    pub cause: &'static str,
    /// The findings it explains (ids).
    pub findings: Vec<&'static str>,
    pub severity: Severity,
    /// Each flag (or action) appears once in the whole plan, at its first step.
    pub actions: Vec<Recommendation>,
}

/// Root causes in the order to act on them; a finding's rank is its cause's position.
const CAUSES: &[(&str, &[&str])] = &[
    ("the engine is hung", &["engine-hung"]),
    (
        "the KV pool is too small for the load",
        &["kv-preemption", "ttft-queue-kv-full"],
    ),
    (
        "a cap on running requests is set too low",
        &["ttft-queue-pseudo-saturation"],
    ),
    (
        "the per-step token budget is too small",
        &["ttft-prefill-token-budget"],
    ),
    (
        "prompts are cut by the context limit",
        &["length-truncation"],
    ),
    // Recomputed shared prompts add the prefill that also stalls decoding: first.
    (
        "shared prompts miss the prefix cache",
        &["ttft-prefill-prefix-miss"],
    ),
    (
        "prefill chunks stall decoding",
        &["itl-prefill-interference"],
    ),
    (
        "decode is bound by memory bandwidth",
        &["itl-bandwidth-saturation"],
    ),
    ("prompts are long", &["ttft-prefill-long-prompts"]),
    (
        "more load than the replicas serve",
        &[
            "ttft-queue-overload",
            "ttft-prefill-compute",
            "autoscale-signal",
        ],
    ),
    ("replicas are loaded unevenly", &["replica-imbalance"]),
    ("requests fail in the engine", &["errors"]),
    (
        "clients give up (usually a consequence of the latency causes above)",
        &["abandoned-requests", "aborts"],
    ),
];

/// The position of a finding's root cause in [`CAUSES`] (unknown ids last).
pub fn rank(id: &str) -> usize {
    CAUSES
        .iter()
        .position(|(_, ids)| ids.contains(&id))
        .unwrap_or(CAUSES.len())
}

/// What makes two recommendations the same action: the flag, else scale-out, else the text.
fn key(r: &Recommendation) -> String {
    match (&r.flag, r.replicas) {
        (Some(f), _) => f.clone(),
        (None, Some(_)) => "scale-out".into(),
        (None, None) => r.action.clone(),
    }
}

/// The plan for `findings` (warnings and worse make steps; info joins a step of its cause).
pub fn build(findings: &[Finding]) -> Vec<PlanStep> {
    let mut instances: Vec<&str> = Vec::new();
    for f in findings {
        if !instances.contains(&f.instance.as_str()) {
            instances.push(&f.instance);
        }
    }
    let mut steps: Vec<PlanStep> = Vec::new();
    let mut used: BTreeSet<(String, String)> = BTreeSet::new();
    for (cause, ids) in CAUSES {
        for inst in &instances {
            let group: Vec<&Finding> = findings
                .iter()
                .filter(|f| f.instance == *inst && ids.contains(&f.id))
                .collect();
            let Some(severity) = group.iter().map(|f| f.severity).max() else {
                continue;
            };
            if severity < Severity::Warning {
                continue;
            }
            let mut actions = Vec::new();
            for r in group.iter().flat_map(|f| &f.recommendations) {
                if used.insert((inst.to_string(), key(r))) {
                    let mut r = r.clone();
                    if r.replicas.is_some() {
                        r.caveat = Some(hpa_note(findings, inst));
                    }
                    actions.push(r);
                }
            }
            steps.push(PlanStep {
                order: 0,
                instance: inst.to_string(),
                cause,
                findings: group.iter().map(|f| f.id).collect(),
                severity,
                actions,
            });
        }
    }
    for (i, s) in steps.iter_mut().enumerate() {
        s.order = i + 1;
    }
    steps
}

/// The seed's autoscaling rule beside every scale-out, and whether it fires on this window.
fn hpa_note(findings: &[Finding], instance: &str) -> String {
    let fires = findings
        .iter()
        .any(|f| f.instance == instance && f.id == "autoscale-signal");
    format!(
        "autoscale (HPA) on vllm:num_requests_waiting > 3 or vllm:kv_cache_usage_perc > 0.65 held for 15-30 s, per model, never on GPU_UTIL; {}",
        if fires {
            "it fires on this window"
        } else {
            "it does not fire on this window"
        }
    )
}
