//! The seed's four playbook scenarios (section 五, 第三步) with their branches, plus the
//! failures users hit in practice: truncation by length, aborts, errors, a hung engine,
//! replica imbalance. Each rule reads [`Signals`] and emits a [`Finding`] with a stable
//! `id`, the evidence (values and thresholds), the cause in plain words and
//! recommendations. Thresholds are the seed's where it gives one, else documented here.

use serde::Serialize;

use crate::panels::Signals;
use crate::recommend::{round8, Ctx, Direction::*, Recommendation};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

impl Severity {
    pub fn name(self) -> &'static str {
        match self {
            Severity::Info => "INFO",
            Severity::Warning => "WARNING",
            Severity::Critical => "CRITICAL",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Confidence {
    Low,
    Medium,
    High,
}

/// One metric value against its threshold.
#[derive(Clone, Debug, Serialize)]
pub struct Evidence {
    pub metric: String,
    pub value: f64,
    /// e.g. `> 1.0`; empty when the value is context, not a test.
    pub threshold: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    /// Stable branch id (docs/doctor.md lists them).
    pub id: &'static str,
    /// The playbook scenario: `1` … `4`, or `extra`.
    pub scenario: &'static str,
    pub title: String,
    pub severity: Severity,
    pub confidence: Confidence,
    pub instance: String,
    pub evidence: Vec<Evidence>,
    pub cause: String,
    pub recommendations: Vec<Recommendation>,
    /// Recommendations the twin predicts will not help (kept, with the prediction).
    pub rejected: Vec<Recommendation>,
    /// Whether the twin reproduced the symptom on the fitted workload (`--verify`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reproduced: Option<bool>,
    /// What the finding could not see (one scrape, a drained server, a missing family):
    /// the limits of its evidence, said next to it.
    pub could_not_see: Vec<String>,
}

/// Where "high" starts. Defaults are interactive-chat SLOs; `--ttft-slo`, `--itl-slo`
/// and `--tpot-slo` override them.
#[derive(Clone, Debug, Serialize)]
pub struct Thresholds {
    /// TTFT P95 (the seed: P95 under 500 ms – 1 s).
    pub ttft_p95_s: f64,
    /// ITL P99: the stutter users feel.
    pub itl_p99_s: f64,
    /// Mean TPOT: overall generation speed.
    pub tpot_mean_s: f64,
    /// KV usage where the seed warns (0.85); the pool is "full" from 0.95.
    pub kv_high: f64,
    pub kv_full: f64,
    /// Pseudo-saturation needs KV below this (the seed's example: 40%).
    pub kv_low: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            ttft_p95_s: 1.0,
            itl_p99_s: 0.1,
            tpot_mean_s: 0.05,
            kv_high: 0.85,
            kv_full: 0.95,
            kv_low: 0.7,
        }
    }
}

fn ev(metric: &str, value: f64, threshold: impl Into<String>) -> Evidence {
    Evidence {
        metric: metric.to_string(),
        value,
        threshold: threshold.into(),
    }
}

/// Enough data to trust a latency finding?
fn confidence(sig: &Signals, samples: f64) -> Confidence {
    let long = sig.window_s.is_some_and(|w| w >= 30.0);
    if sig.ttft_s.approximate || samples < 20.0 {
        Confidence::Low
    } else if sig.cumulative || !long || samples < 100.0 {
        Confidence::Medium
    } else {
        Confidence::High
    }
}

/// What a rule names before its evidence: the finding's identity and weight.
struct FindingHead<'a> {
    id: &'static str,
    scenario: &'static str,
    title: &'a str,
    severity: Severity,
    confidence: Confidence,
}

// One constructor keeps every rule's output uniform.
fn finding(
    head: FindingHead<'_>,
    sig: &Signals,
    evidence: Vec<Evidence>,
    cause: &str,
    recommendations: Vec<Recommendation>,
) -> Finding {
    let FindingHead {
        id,
        scenario,
        title,
        severity,
        confidence,
    } = head;
    Finding {
        id,
        scenario,
        title: title.to_string(),
        severity,
        confidence,
        instance: sig.instance.clone(),
        evidence,
        cause: cause.to_string(),
        recommendations,
        rejected: Vec::new(),
        reproduced: None,
        could_not_see: blind_spots(sig),
    }
}

/// The limits every finding of this instance shares.
pub fn blind_spots(sig: &Signals) -> Vec<String> {
    let mut out = Vec::new();
    if sig.cumulative {
        out.push("one scrape: averages since the server started, no rates, no trend".into());
    }
    if sig.load_unseen {
        out.push(
            "the server under load: it is idle in this window (running and waiting 0), so the load behind these numbers is over and what ran then is not visible".into(),
        );
    } else if sig.drained {
        out.push(
            "the end of the window: the server drained, so these findings rest on its busy part"
                .into(),
        );
    }
    if sig.ttft_s.approximate || sig.tokens_per_step.approximate {
        out.push(
            "truncated histograms (no +Inf bucket): quantiles are approximate lower bounds".into(),
        );
    }
    out
}

fn sev_over(value: f64, limit: f64) -> Severity {
    if value > 3.0 * limit {
        Severity::Critical
    } else {
        Severity::Warning
    }
}

/// The inferred per-step token budget: steps pile up in the top bucket.
pub fn inferred_token_budget(sig: &Signals) -> Option<f64> {
    sig.step_tokens_top_bucket
        .filter(|(le, share)| le.is_finite() && *share > 0.0)
        .map(|(le, _)| le)
}

/// The token budget binds when no step ever carried more tokens than a cap that is
/// smaller than the average prompt: each prompt went through several chunks.
///
/// Only for V0 servers (< 0.9): V1's `iteration_tokens_total` observes a request's whole
/// prompt at its first output, not the chunk a step scheduled, so its buckets cannot show
/// the budget there (docs/doctor.md); `--serve-args` or the twin (`--verify`) must.
pub fn budget_bound(sig: &Signals, ctx: &Ctx) -> Option<f64> {
    if let Some(b) = ctx.known.num("--max-num-batched-tokens") {
        return (b < sig.mean_input_len?).then_some(b);
    }
    if ctx.version.has(crate::version::Version(0, 9, 2)) != Some(false) {
        return None;
    }
    let mean_in = sig.mean_input_len?;
    inferred_token_budget(sig).filter(|cap| {
        *cap < mean_in
            && sig
                .step_tokens_top_bucket
                .is_some_and(|(_, share)| share >= 0.02)
    })
}

/// `max_model_len`: given, else the top finite `request_prompt_tokens` bucket (vLLM builds
/// those 1-2-5 buckets up to max_model_len, so it is a lower bound).
pub fn max_model_len(sig: &Signals, ctx: &Ctx) -> Option<(f64, bool)> {
    if let Some(m) = ctx.known.max_model_len {
        return Some((m as f64, true));
    }
    sig.prompt_len_hist
        .iter()
        .rev()
        .find(|(le, _)| le.is_finite())
        .map(|(le, _)| (*le, false))
}

/// Run every rule on one instance.
pub fn diagnose(sig: &Signals, th: &Thresholds, ctx: &Ctx) -> Vec<Finding> {
    let mut out = Vec::new();
    scenario1_ttft(sig, th, ctx, &mut out);
    scenario2_itl(sig, th, ctx, &mut out);
    scenario3_preemption(sig, th, ctx, &mut out);
    scenario4_autoscale(sig, ctx, &mut out);
    extras(sig, ctx, &mut out);
    out
}

fn scenario1_ttft(sig: &Signals, th: &Thresholds, ctx: &Ctx, out: &mut Vec<Finding>) {
    let Some(ttft95) = sig.ttft_s.p95 else { return };
    if ttft95 <= th.ttft_p95_s {
        return;
    }
    let conf = confidence(sig, sig.ttft_s.count);
    let sev = sev_over(ttft95, th.ttft_p95_s);
    let itl99 = sig.itl_s.p99.unwrap_or(0.0);
    let mut base = vec![ev("ttft_p95_s", ttft95, format!("> {}", th.ttft_p95_s))];
    base.push(ev(
        "itl_p99_s",
        itl99,
        format!("normal if <= {}", th.itl_p99_s),
    ));
    let q = sig.queue_s.mean.unwrap_or(0.0);
    let p = sig.prefill_s.mean.unwrap_or(0.0);
    base.push(ev("queue_mean_s", q, ""));
    base.push(ev("prefill_mean_s", p, ""));
    if frontend_ttft(sig, &base, sev, conf, ctx, out) {
        return;
    }
    let kv = sig.kv_usage.as_ref();
    let kv_mean = kv.map(|g| g.mean).unwrap_or(0.0);
    let kv_max = kv.map(|g| g.max).unwrap_or(0.0);
    let waiting = sig.waiting.as_ref().map(|g| g.mean).unwrap_or(0.0);
    if q >= p {
        // Branch A: the request waits to be admitted.
        let mut e = base.clone();
        e.push(ev("queue_share_of_ttft", q / (q + p).max(1e-9), ">= 0.5"));
        e.push(ev("kv_usage_max", kv_max, ""));
        e.push(ev("waiting_mean", waiting, ""));
        let running = sig.running.clone().unwrap_or_default();
        if kv_max >= th.kv_full || kv_mean >= th.kv_high {
            let mut recs = Vec::new();
            let ex = [
                ("queue_mean_s", Down),
                ("ttft_p95_s", Down),
                ("kv_usage_mean", Down),
            ];
            recs.extend(ctx.kv_fp8(sig, &ex));
            recs.extend(ctx.raise_gmu(sig, &ex));
            recs.push(ctx.scale_out(sig, &ex));
            e.push(ev(
                "kv_usage",
                kv_max.max(kv_mean),
                format!("max >= {} or mean >= {}", th.kv_full, th.kv_high),
            ));
            out.push(finding(FindingHead { id: "ttft-queue-kv-full", scenario: "1", title: "TTFT high: requests queue because the KV pool is full", severity: sev, confidence: conf }, sig, e, "Queue time dominates TTFT and the KV-cache block pool is (nearly) full: new requests cannot get blocks until running ones finish.", recs));
        } else if running.share_at_max >= 0.6
            && running.max >= 1.0
            && waiting >= 1.0
            && kv_mean < th.kv_low
            && !sig.cumulative
            // "Memory and compute are free": a plateau with slow steps is compute
            // saturation (steps full of prefill), not a cap.
            && sig.tpot_s.mean.or(sig.itl_s.p50).is_none_or(|t| t <= th.tpot_mean_s)
        {
            let pinned = running.max;
            let (to, how) = raise_to(sig, pinned, kv_mean);
            e.push(ev(
                "running_share_at_max",
                running.share_at_max,
                ">= 0.6 (flat line)",
            ));
            e.push(ev("running_max", pinned, ""));
            e.push(ev("kv_usage_mean", kv_mean, format!("< {}", th.kv_low)));
            e.push(ev(
                "tpot_mean_s",
                sig.tpot_s.mean.unwrap_or(0.0),
                format!("<= {} (compute has headroom)", th.tpot_mean_s),
            ));
            e.push(ev("raise_to", to as f64, how));
            out.push(finding(FindingHead { id: "ttft-queue-pseudo-saturation", scenario: "1", title: &format!("TTFT high: pseudo-saturation, running pinned at {pinned:.0} with KV mostly free"), severity: sev, confidence: conf }, sig, e, "num_requests_running is a flat line at a cap while KV usage is low and requests wait: --max-num-seqs (or --max-num-active-seqs) is set too conservatively and keeps requests out although memory and compute are free.", ctx.raise_seqs(pinned, to)));
        } else if let Some(f) = token_budget_finding(sig, ctx, &e, sev, conf) {
            // A small budget also shows up as queueing: prefill chunks use the whole
            // budget, so new requests are not even scheduled.
            out.push(f);
        } else if let Some(f) = small_batch_cap(sig, th, ctx, &e, sev, conf) {
            out.push(f);
        } else {
            let ex = [("queue_mean_s", Down), ("ttft_p95_s", Down)];
            // The negative ("no cap binds") needs running seen under load over a window,
            // either below any plateau or slow enough to be compute-bound.
            let seen = !sig.cumulative && running.max > 0.0;
            let slow = sig
                .tpot_s
                .mean
                .or(sig.itl_s.p50)
                .is_some_and(|t| t > th.tpot_mean_s);
            let shown = seen && (slow || running.share_at_max < 0.6);
            e.push(ev(
                "running_max",
                running.max,
                if seen {
                    "seen over the window"
                } else {
                    "not seen under load"
                },
            ));
            let mut f = if shown {
                finding(FindingHead { id: "ttft-queue-overload", scenario: "1", title: "TTFT high: requests queue because arrivals exceed throughput", severity: sev, confidence: conf }, sig, e, "Queue time dominates TTFT, yet neither the KV pool nor a sequence cap is binding: the engine is busy all the time and arrivals outpace it (compute saturation).", vec![ctx.scale_out(sig, &ex)])
            } else {
                finding(FindingHead { id: "ttft-queue-overload", scenario: "1", title: "TTFT high: requests queued (whether a cap or the load caused it is not visible here)", severity: sev, confidence: conf.min(Confidence::Medium) }, sig, e, "Queue time dominates TTFT. This window does not show the server under that load (one scrape, or running 0 at its end), so it cannot tell arrivals outpacing the engine from a cap (--max-num-seqs, --max-num-batched-tokens) holding requests back: scrape while it is busy, or pass --serve-args.", vec![ctx.scale_out(sig, &ex)])
            };
            if !shown {
                f.could_not_see.push("whether a sequence cap or the KV pool bound while requests queued: running was not seen under load".into());
            }
            out.push(f);
        }
        return;
    }
    // Branch B: admitted quickly, computed slowly.
    let mean_in = sig.mean_input_len.unwrap_or(0.0);
    let p90_in = sig.prompt_len_p90.unwrap_or(mean_in);
    let mut named = false;
    if let Some(f) = token_budget_finding(sig, ctx, &base, sev, conf) {
        out.push(f);
        named = true;
    }
    let hit = sig.prefix_hit_rate;
    let caching_off = sig.cache_bool("enable_prefix_caching") == Some(false);
    if mean_in >= 1000.0 && (caching_off || hit.is_some_and(|h| h < 0.1)) {
        let mut e = base.clone();
        e.push(ev("prefix_hit_rate", hit.unwrap_or(0.0), "< 0.1"));
        e.push(ev("mean_input_len", mean_in, ">= 1000"));
        let mut recs = Vec::new();
        if caching_off {
            if let Some(mut r) = ctx.flag(
                "--enable-prefix-caching",
                None,
                String::new(),
                &[("prefill_mean_s", Down), ("ttft_p95_s", Down)],
            ) {
                r.sim_args.clear();
                r.not_simulable =
                    Some("with caching off the metrics cannot tell how much prompts share");
                recs.push(r);
            }
        }
        recs.push(ctx.action(
            "route by prefix hash or session id (consistent hashing) instead of round-robin",
            &[("prefix_hit_rate", Up), ("prefill_mean_s", Down)],
            "routing across replicas is outside one engine",
        ));
        out.push(finding(FindingHead { id: "ttft-prefill-prefix-miss", scenario: "1", title: "TTFT high: long prompts miss the prefix cache", severity: sev, confidence: conf }, sig, e, "Prefill dominates TTFT and long prompts are recomputed: the prefix cache is off or rarely hit, typically because a round-robin load balancer scatters sessions and shared system prompts over replicas.", recs));
        named = true;
    }
    let long = p90_in >= 8000.0 || mean_in >= 4000.0;
    if long {
        let mut e = base.clone();
        e.push(ev("mean_input_len", mean_in, ">= 4000 or p90 >= 8000"));
        e.push(ev("prompt_len_p90", p90_in, ""));
        let recs = vec![ctx.action(
            "send long-context requests to a dedicated pool (or P/D disaggregation); cap prompt length at the gateway",
            &[("prefill_mean_s", Down), ("ttft_p95_s", Down)],
            "routing and client limits are outside one engine",
        )];
        out.push(finding(FindingHead { id: "ttft-prefill-long-prompts", scenario: "1", title: "TTFT high: prefill of long prompts dominates", severity: sev, confidence: conf }, sig, e, "Requests are admitted quickly but their prompts take long to compute: the prompts are long (compute-bound prefill).", recs));
    } else if !named {
        let mut e = base;
        e.push(ev("mean_input_len", mean_in, "< 4000 (not long)"));
        e.push(ev("decode_share", sig.decode_share.unwrap_or(0.0), ""));
        let ex = [("prefill_mean_s", Down), ("ttft_p95_s", Down)];
        out.push(finding(FindingHead { id: "ttft-prefill-compute", scenario: "1", title: "TTFT high: prefill is slow although prompts are short", severity: sev, confidence: conf }, sig, e, "Prefill dominates TTFT without long prompts, a small budget or cache misses: each step is slow (a big batch, a slow GPU), so the prefill chunks wait behind it. The monitoring guide's compute-bound remedies apply: FP8 (W8A8) weights, more or faster GPUs.", vec![ctx.scale_out(sig, &ex)]));
    }
}

/// Branch 0: TTFT is spent neither queueing nor in prefill. vLLM stamps a request's arrival
/// when the renderer takes it (`BaseRenderer.render_chat_async`, before the chat template and
/// tokenization) and its first token when the output handler takes the step up, so what the
/// engine's queue and prefill intervals leave of TTFT is the API server's: the prompt's
/// tokenization and its wait for the renderer's workers (one by default), the hop to the engine
/// core, and an output handler behind on other streams. Returns whether it named this.
fn frontend_ttft(
    sig: &Signals,
    base: &[Evidence],
    sev: Severity,
    conf: Confidence,
    ctx: &Ctx,
    out: &mut Vec<Finding>,
) -> bool {
    let (Some(ttft_mean), Some(q), Some(p)) =
        (sig.ttft_s.mean, sig.queue_s.mean, sig.prefill_s.mean)
    else {
        return false;
    };
    let before_engine = ttft_mean - q - p;
    if before_engine <= 0.5 * ttft_mean {
        return false;
    }
    let mut e = base.to_vec();
    e.push(ev("ttft_mean_s", ttft_mean, ""));
    e.push(ev(
        "ttft_outside_queue_and_prefill_share",
        before_engine / ttft_mean,
        "> 0.5",
    ));
    let mut recs = Vec::new();
    let expect = [("ttft_p95_s", Down)];
    if let Some(r) = ctx.flag("--renderer-num-workers", None, "4".to_string(), &expect) {
        recs.push(r);
    }
    if let Some(r) = ctx.flag("--api-server-count", None, "4".to_string(), &expect) {
        recs.push(r);
    }
    recs.push(ctx.action(
        &format!(
            "look for long prompts or a heavy chat template (tokenization costs ~{:.1} µs a token on one thread)",
            twin_cost::frontend::TOKENIZE_PER_TOKEN_S * 1e6
        ),
        &expect,
        "the prompts' text is not in the metrics",
    ));
    out.push(finding(FindingHead { id: "ttft-frontend", scenario: "1", title: "TTFT high: requests wait in the API server, before the engine", severity: sev, confidence: conf }, sig, e, "Most of TTFT is neither queue time nor prefill: requests spend it in vLLM's API server before the engine sees them (tokenizing prompts on the renderer's worker threads, one by default, in arrival order) or after (an output handler behind on other streams). The engine has headroom; the front does not.", recs));
    true
}

/// Where to raise a pinned running cap: the seed's `0.8 / KV usage` times it, 2-8x (a
/// multiple of 8), and never past what the KV pool holds (see [`admission_cap`]), so the
/// raise cannot trade the queue for preemptions. A bigger jump at once would also stretch
/// each step (ITL) further than the twin can vouch for.
fn raise_to(sig: &Signals, pinned: f64, kv_mean: f64) -> (u64, String) {
    let room = if kv_mean > 0.0 { 0.8 / kv_mean } else { 8.0 };
    let factor = room.clamp(2.0, 8.0);
    let to = round8(pinned * factor);
    if let Cap::Derived { to: pool, how } = admission_cap(sig) {
        if pool < to && pool as f64 > pinned {
            return (pool, format!("what the KV pool holds: {how}"));
        }
    }
    (
        to,
        format!("{factor:.1} x the cap {pinned:.0} (0.8 / KV usage {kv_mean:.2}, 2-8x)"),
    )
}

/// One scrape (or a drained server) shows no running plateau, but the steps do: mean
/// generated tokens per step is the decode batch. Requests queuing behind a small batch
/// while the pool has room and each step is about as fast as at batch 1 means something
/// caps admission (`--max-num-seqs`), not that the engine is full.
fn small_batch_cap(
    sig: &Signals,
    th: &Thresholds,
    ctx: &Ctx,
    base: &[Evidence],
    sev: Severity,
    conf: Confidence,
) -> Option<Finding> {
    let batch = sig.decode_batch_mean?;
    if batch > 32.0 || sig.queue_share.is_none_or(|q| q < 0.5) {
        return None;
    }
    let per_req = sig.mean_input_len.unwrap_or(0.0) + sig.mean_output_len.unwrap_or(0.0);
    let block = sig.cache_u64("block_size").unwrap_or(16) as f64;
    // KV the batch needs, from the pool's size: a drained server's gauge reads 0.
    let kv = match sig.cache_u64("num_gpu_blocks") {
        Some(b) if per_req > 0.0 => (batch * per_req / (b as f64 * block)).min(1.0),
        _ if !sig.load_unseen => sig.kv_usage.as_ref()?.mean,
        _ => return None,
    };
    if kv >= th.kv_low {
        return None;
    }
    let itl50 = sig.itl_s.p50?;
    let mut e = base.to_vec();
    e.push(ev(
        "decode_batch_mean",
        batch,
        format!(
            "<= 32 (generation_tokens {:.0} / steps {:.0})",
            sig.generation_tokens, sig.tokens_per_step.count
        ),
    ));
    e.push(ev("kv_usage_at_that_batch", kv, format!("< {}", th.kv_low)));
    match ctx.step {
        Some(sm) => {
            let ctx_len =
                sig.mean_input_len.unwrap_or(0.0) + sig.mean_output_len.unwrap_or(0.0) / 2.0;
            let b1 = sm.batch1_step_s(ctx_len);
            if itl50 > 1.5 * b1 {
                return None;
            }
            e.push(ev(
                "itl_p50_s",
                itl50,
                format!(
                    "<= 1.5 x batch-1 step {:.1} ms ({} on {}, twin-cost)",
                    b1 * 1e3,
                    sm.model,
                    sm.gpu
                ),
            ));
        }
        None => {
            if itl50 > th.tpot_mean_s {
                return None;
            }
            e.push(ev(
                "itl_p50_s",
                itl50,
                format!("<= {} (compute has headroom)", th.tpot_mean_s),
            ));
        }
    }
    let pinned = batch.round().max(1.0);
    let (to, how) = raise_to(sig, pinned, kv);
    e.push(ev("raise_to", to as f64, how));
    let mut f = finding(FindingHead { id: "ttft-queue-pseudo-saturation", scenario: "1", title: &format!("TTFT high: requests queue behind a batch of about {pinned:.0} (inferred cap)"), severity: sev, confidence: conf.min(Confidence::Medium) }, sig, e, "Queue time dominates TTFT while each step carries only a small decode batch, the KV pool has room and steps are about as fast as at batch 1: a cap on running requests (--max-num-seqs or --max-num-active-seqs) keeps requests waiting although memory and compute are free. The cap is inferred from tokens per step, not read: pass --serve-args to confirm.", ctx.raise_seqs(pinned, to));
    f.could_not_see.push(
        "the configured --max-num-seqs: the running cap is inferred from generated tokens per step"
            .into(),
    );
    Some(f)
}

fn token_budget_finding(
    sig: &Signals,
    ctx: &Ctx,
    base: &[Evidence],
    sev: Severity,
    conf: Confidence,
) -> Option<Finding> {
    let cap = budget_bound(sig, ctx)?;
    let how = if ctx.known.num("--max-num-batched-tokens").is_some() {
        "from the configuration"
    } else {
        "inferred from the iteration_tokens_total buckets (V0)"
    };
    Some(token_budget_finding_for(
        sig, ctx, base, sev, conf, cap, how,
    ))
}

/// The token-budget finding for a known or inferred budget `cap`.
pub fn token_budget_finding_for(
    sig: &Signals,
    ctx: &Ctx,
    base: &[Evidence],
    sev: Severity,
    conf: Confidence,
    cap: f64,
    how: &str,
) -> Finding {
    let mean_in = sig.mean_input_len.unwrap_or(0.0);
    let p90_in = sig.prompt_len_p90.unwrap_or(mean_in);
    let share = sig.step_tokens_top_bucket.map(|x| x.1).unwrap_or(0.0);
    let from = ctx.known.num("--max-num-batched-tokens").unwrap_or(cap);
    let to = p90_in.max(2.0 * from).clamp(2048.0, 8192.0).max(2.0 * from);
    let to = to.log2().ceil().exp2() as u64;
    let mut e = base.to_vec();
    e.push(ev(
        "max_num_batched_tokens",
        cap,
        format!("< mean prompt {mean_in:.0} ({how})"),
    ));
    if share > 0.0 && how.contains("iteration_tokens") {
        e.push(ev("share_of_steps_in_top_bucket", share, ""));
    }
    e.push(ev("mean_input_len", mean_in, ""));
    let read = ctx.known.num("--max-num-batched-tokens").is_some();
    let recs = ctx
        .flag(
            "--max-num-batched-tokens",
            Some(format!("{from:.0}")),
            to.to_string(),
            &[
                ("ttft_p95_s", Down),
                ("prefill_mean_s", Down),
                ("itl_p99_s", Up),
            ],
        )
        .into_iter()
        .map(|mut r| {
            if !read {
                let c = format!("the current {from:.0} is {how}, not read from the server");
                r.caveat = Some(r.caveat.map(|x| format!("{x}; {c}")).unwrap_or(c));
            }
            r
        })
        .collect();
    finding(FindingHead { id: "ttft-prefill-token-budget", scenario: "1", title: "TTFT high: prefill split into many steps by a small token budget", severity: sev, confidence: conf }, sig, e, "Steps never carry more tokens than a cap smaller than the prompts: --max-num-batched-tokens forces each prompt through many chunks, stretching prefill and holding new requests back.", recs)
}

fn scenario2_itl(sig: &Signals, th: &Thresholds, ctx: &Ctx, out: &mut Vec<Finding>) {
    let Some(itl99) = sig.itl_s.p99 else { return };
    let tpot = sig.tpot_s.mean.or(sig.itl_s.mean).unwrap_or(0.0);
    let itl50 = sig.itl_s.p50.unwrap_or(0.0);
    let conf = confidence(sig, sig.itl_s.count);
    // Steps that are mostly prompt tokens make TPOT slow by compute (prefill), not by
    // reading memory: that is the TTFT/compute findings' business, not bandwidth.
    let prefill_heavy = sig.prompt_tokens >= 4.0 * sig.generation_tokens
        && sig.decode_share.is_some_and(|d| d < 0.5);
    if tpot > th.tpot_mean_s && !prefill_heavy {
        // Branch B: everything is slow, not only the tail.
        let running = sig.running.as_ref().map(|g| g.mean).unwrap_or(0.0);
        let mut e = vec![
            ev("tpot_mean_s", tpot, format!("> {}", th.tpot_mean_s)),
            ev("itl_p50_s", itl50, ""),
            ev("itl_p99_s", itl99, ""),
            ev("running_mean", running, ""),
            ev("decode_share", sig.decode_share.unwrap_or(0.0), ""),
        ];
        let ex = [("tpot_mean_s", Down), ("itl_p99_s", Down)];
        let mut recs: Vec<Recommendation> = ctx.kv_fp8(sig, &ex).into_iter().collect();
        // The seed's first remedy also names weight quantization: at small batches the
        // weights, not the KV, are most of the bytes each decode step reads.
        if ctx.known.get("--quantization").is_none() {
            recs.extend(ctx.flag("--quantization", None, "fp8".into(), &ex).map(|mut r| {
                r.caveat = Some("needs FP8 support (Ada, Hopper or newer) or a pre-quantized checkpoint; check accuracy".into());
                r
            }));
        }
        if running >= 8.0 && !sig.cumulative {
            let to = round8(running * 0.6);
            e.push(ev(
                "admission_cap",
                to as f64,
                format!("0.6 x mean running {running:.1} over the window, a multiple of 8"),
            ));
            recs.extend(ctx.cap_seqs(to, &[("tpot_mean_s", Down), ("queue_mean_s", Up)]));
        }
        // The seed's bandwidth-bound decode remedy: several tokens per weight read. n-gram
        // drafting needs no draft model.
        if ctx.known.get("--speculative-config").is_none() {
            recs.extend(
                ctx.flag(
                    "--speculative-config",
                    None,
                    r#"{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4}"#.into(),
                    &ex,
                )
                .map(|mut r| {
                    r.caveat = Some("pays off when outputs repeat the prompt (code, RAG, edits) and at small batches; a draft model or EAGLE head suits other text".into());
                    r
                }),
            );
        }
        recs.push(ctx.scale_out(sig, &ex));
        let batch1 = ctx.step.map(|sm| {
            let c = sig.mean_input_len.unwrap_or(0.0) + sig.mean_output_len.unwrap_or(0.0) / 2.0;
            (sm, sm.batch1_step_s(c))
        });
        let mut blind = Vec::new();
        let cause = match batch1 {
            Some((sm, b1)) if itl50 <= 1.5 * b1 => {
                e.push(ev("batch1_step_s", b1, format!("ITL P50 within 1.5x of batch 1 ({} on {}, twin-cost)", sm.model, sm.gpu)));
                "TPOT is high although each step runs about as fast as a single request's: the GPU reads the whole model every step and weights, not load, set the pace. Fewer bytes per token (FP8 weights), several tokens per read (speculative decoding) or a faster GPU help; a cap on running requests would not."
            }
            _ if running >= 8.0 && !sig.cumulative => "TPOT and the ITL median are both high: so many running requests (or such long contexts) share each decode step that reading weights and KV saturates memory bandwidth.",
            _ => {
                blind.push("how many requests ran while TPOT was measured: the window shows few or none running".to_string());
                "TPOT and the ITL median are both high: each decode step reads more bytes than the GPU moves quickly (weights and KV of long contexts, or a batch that ran before this window; running was not seen high here)."
            }
        };
        let mut f = finding(
            FindingHead {
                id: "itl-bandwidth-saturation",
                scenario: "2",
                title: "Streaming slow overall: decode saturates HBM bandwidth",
                severity: sev_over(tpot, th.tpot_mean_s),
                confidence: conf,
            },
            sig,
            e,
            cause,
            recs,
        );
        f.could_not_see.extend(blind);
        out.push(f);
        return;
    }
    if itl99 > th.itl_p99_s && itl99 >= 3.0 * itl50.max(1e-6) {
        let e = vec![
            ev("itl_p99_s", itl99, format!("> {}", th.itl_p99_s)),
            ev(
                "itl_p50_s",
                itl50,
                format!("p99 >= 3x p50 ({:.1}x)", itl99 / itl50.max(1e-9)),
            ),
            ev("tpot_mean_s", tpot, format!("<= {} (fine)", th.tpot_mean_s)),
            ev("prompt_len_p90", sig.prompt_len_p90.unwrap_or(0.0), ""),
        ];
        let ex = [("itl_p99_s", Down), ("ttft_p95_s", Up)];
        let mut recs = Vec::new();
        // V1 (0.9+) observes a request's whole prompt in iteration_tokens_total, so its
        // top bucket is the longest prompt, not the budget: only V0 shows the budget there.
        let v0 = ctx.version.has(crate::version::Version(0, 9, 2)) == Some(false);
        let budget = ctx
            .known
            .num("--max-num-batched-tokens")
            .or_else(|| inferred_token_budget(sig).filter(|_| v0));
        // Unknown budget: steps above 2048 tokens show it is larger than 2048.
        let top = sig
            .step_tokens_top_bucket
            .map(|x| x.0)
            .filter(|le| le.is_finite());
        if budget.or(top).is_some_and(|b| b > 2048.0) {
            let read = ctx.known.num("--max-num-batched-tokens").is_some();
            recs.extend(
                ctx.flag(
                    "--max-num-batched-tokens",
                    budget.map(|b| format!("{b:.0}")),
                    "2048".into(),
                    &ex,
                )
                .map(|mut r| {
                    let c = match (read, budget) {
                        (true, _) => None,
                        (false, Some(_)) => Some("the current budget is inferred from the iteration_tokens_total buckets (V0)"),
                        (false, None) => Some("the current budget is unknown (V1 metrics cannot show it; pass --serve-args); steps carried prompts above 2048 tokens"),
                    };
                    if let Some(c) = c {
                        r.caveat = Some(r.caveat.map(|x| format!("{x}; {c}")).unwrap_or(c.into()));
                    }
                    r
                }),
            );
        }
        recs.extend(
            ctx.flag(
                "--long-prefill-token-threshold",
                ctx.known
                    .get("--long-prefill-token-threshold")
                    .map(str::to_string),
                "1024".into(),
                &ex,
            ),
        );
        out.push(finding(FindingHead { id: "itl-prefill-interference", scenario: "2", title: "Streaming stutters: prefill chunks interfere with decode", severity: sev_over(itl99, th.itl_p99_s), confidence: conf }, sig, e, "TPOT is fine but the ITL tail is bad: steps that carry a large prefill chunk take long, and every decoding request in that step waits (prefill interference, periodic stutter).", recs));
    }
}

fn scenario3_preemption(sig: &Signals, _th: &Thresholds, ctx: &Ctx, out: &mut Vec<Finding>) {
    if sig.preemptions <= 0.0 {
        return;
    }
    let finished = sig.requests_finished.max(1.0);
    let per_req = sig.preemptions / finished;
    let kv_max = sig.kv_usage.as_ref().map(|g| g.max).unwrap_or(0.0);
    let sev = if per_req >= 0.05 || kv_max >= 0.98 {
        Severity::Critical
    } else {
        Severity::Warning
    };
    let mut e = vec![
        ev(
            "preemptions",
            sig.preemptions,
            "> 0 (the monitoring guide: must be 0)",
        ),
        ev(
            "preemptions_per_finished_request",
            per_req,
            "critical >= 0.05",
        ),
        ev("kv_usage_max", kv_max, ""),
    ];
    if let Some(r) = sig.preemptions_per_s {
        e.push(ev("preemptions_per_s", r, "> 0"));
    }
    let ex = [("preemptions", ToZero), ("queue_mean_s", Up)];
    let mut recs: Vec<Recommendation> = Vec::new();
    let mut blind = Vec::new();
    match admission_cap(sig) {
        Cap::Derived { to, how } => {
            e.push(ev("admission_cap", to as f64, how));
            recs.extend(ctx.cap_seqs(to, &ex));
        }
        Cap::Unknown(why) => blind.push(why),
    }
    let ex2 = [("preemptions", ToZero), ("kv_usage_mean", Down)];
    recs.extend(ctx.kv_fp8(sig, &ex2));
    recs.extend(ctx.raise_gmu(sig, &ex2));
    recs.push(ctx.action(
        "cap max_tokens at the gateway so a runaway generation cannot grow one request to tens of thousands of tokens",
        &[("preemptions", Down)],
        "client request limits are outside the engine",
    ));
    let mut f = finding(FindingHead { id: "kv-preemption", scenario: "3", title: "Preemptions: the KV pool is overrun", severity: sev, confidence: if sig.cumulative { Confidence::Medium } else { Confidence::High } }, sig, e, "Running requests grew until the KV-cache block pool ran out, so the scheduler evicted some and will recompute them: throughput drops and latency jitters.", recs);
    f.could_not_see.extend(blind);
    out.push(f);
}

/// An admission cap and how it was derived, or why none can be.
pub enum Cap {
    Derived { to: u64, how: String },
    Unknown(String),
}

/// How many requests the KV pool holds at their final length, with 10% slack
/// (`0.9 x num_gpu_blocks x block_size / (mean prompt + mean output)`), rounded down to a
/// multiple of 8; without `num_gpu_blocks`, 3/4 of a running peak seen under load over a
/// window. Never a running peak from one scrape (it is whatever ran at that instant, 0 on a
/// drained server), and never below 8: a pool that holds fewer is a memory problem, not a
/// cap to set.
pub fn admission_cap(sig: &Signals) -> Cap {
    let block = sig.cache_u64("block_size").unwrap_or(16) as f64;
    let per_req = sig.mean_input_len.unwrap_or(0.0) + sig.mean_output_len.unwrap_or(0.0);
    let peak = sig.running.as_ref().map(|g| g.max).unwrap_or(0.0);
    let (fit, how) = match sig.cache_u64("num_gpu_blocks") {
        Some(b) if per_req > 0.0 => (
            0.9 * b as f64 * block / per_req,
            format!("0.9 x num_gpu_blocks {b} x block_size {block:.0} / mean prompt+output {per_req:.0} tokens (cache_config_info, length histograms)"),
        ),
        _ if !sig.cumulative && peak >= 16.0 => (
            0.75 * peak,
            format!("0.75 x running peak {peak:.0} over the window (num_gpu_blocks unknown)"),
        ),
        _ => {
            return Cap::Unknown(
                "an admission cap: needs num_gpu_blocks (cache_config_info) and the length histograms, or a running peak over a window; one scrape's running count is not a peak".into(),
            )
        }
    };
    let to = ((fit / 8.0).floor() as u64) * 8;
    if to < 8 {
        return Cap::Unknown(format!(
            "a useful admission cap: the pool holds about {fit:.1} requests of the mean length, so the remedy is memory (fp8 KV, more GPU memory, more GPUs), not a cap"
        ));
    }
    Cap::Derived { to, how }
}

fn scenario4_autoscale(sig: &Signals, ctx: &Ctx, out: &mut Vec<Finding>) {
    let kv = sig.kv_usage.as_ref().map(|g| g.mean).unwrap_or(0.0);
    let w = sig.waiting.clone().unwrap_or_default();
    let window = sig.window_s.unwrap_or(0.0);
    // The seed's triggers: KV > 0.65, or waiting > 3, sustained 15-30 s: the longest run of
    // consecutive scrapes above the line must span 15 s. One scrape never fires.
    let kv_fires = sig.kv_high_sustained_s >= 15.0;
    let wait_fires = sig.waiting_high_sustained_s >= 15.0;
    if !(kv_fires || wait_fires) {
        return;
    }
    let e = vec![
        ev("kv_usage_mean", kv, ""),
        ev("kv_above_0.65_for_s", sig.kv_high_sustained_s, ">= 15 s"),
        ev("waiting_min", w.min, ""),
        ev(
            "waiting_above_3_for_s",
            sig.waiting_high_sustained_s,
            ">= 15 s",
        ),
        ev("window_s", window, ""),
    ];
    out.push(finding(FindingHead { id: "autoscale-signal", scenario: "4", title: "Autoscaling: the monitoring guide's scale-out trigger fires", severity: Severity::Info, confidence: Confidence::Medium }, sig, e, "Scale on vllm:kv_cache_usage_perc > 0.65 or vllm:num_requests_waiting > 3 sustained for 15-30 s. Never on CPU, DCGM_FI_DEV_GPU_UTIL (always high) or DCGM_FI_DEV_FB_USED (full from start-up).", vec![ctx.scale_out(sig, &[("queue_mean_s", Down), ("kv_usage_mean", Down)])]));
}

fn extras(sig: &Signals, ctx: &Ctx, out: &mut Vec<Finding>) {
    let finished = sig.requests_finished;
    if let (Some(len_share), Some((mml, exact))) =
        (sig.finish_share("length"), max_model_len(sig, ctx))
    {
        let p90 = sig.prompt_len_p90.unwrap_or(0.0) + sig.gen_len_p90.unwrap_or(0.0);
        let mean = sig.mean_input_len.unwrap_or(0.0) + sig.mean_output_len.unwrap_or(0.0);
        // Outputs ending by `length` while prompt + output reach max_model_len: the context
        // limit, not the client's max_tokens, cut them.
        if finished >= 10.0 && len_share >= 0.2 && (p90 >= 0.8 * mml || mean >= 0.6 * mml) {
            let e = vec![
                ev("finish_length_share", len_share, ">= 0.2"),
                ev(
                    "prompt_p90_plus_output_p90",
                    p90,
                    format!(
                        ">= 0.8 x max_model_len {mml:.0}{}",
                        if exact {
                            ""
                        } else {
                            " (lower bound from buckets)"
                        }
                    ),
                ),
                ev("mean_prompt_plus_output", mean, ""),
            ];
            let to = ((mml * 2.0).log2().ceil()).exp2() as u64;
            let mut recs: Vec<Recommendation> = ctx
                .flag("--max-model-len", Some(format!("{mml:.0}")), to.to_string(), &[("length_share", Down)])
                .into_iter()
                .map(|mut r| {
                    r.sim_args.clear();
                    r.not_simulable = Some("the twin forces output lengths, so it cannot tell natural from forced stops");
                    r.caveat = Some("only if the model supports it and the KV pool fits one request of that length".into());
                    r
                })
                .collect();
            recs.push(ctx.action(
                "trim prompts (history, retrieved context) or lower max_tokens so prompt + output fits",
                &[("length_share", Down)],
                "client behaviour is outside the engine",
            ));
            out.push(finding(FindingHead { id: "length-truncation", scenario: "extra", title: "Outputs truncated by max_model_len", severity: if len_share >= 0.5 { Severity::Critical } else { Severity::Warning }, confidence: if exact { Confidence::High } else { Confidence::Medium } }, sig, e, "Many requests end with finish_reason=length while prompt + output reach the context limit: answers are cut off by --max-model-len.", recs));
        }
    }
    if let Some(abort) = sig
        .finish_share("abort")
        .filter(|a| *a >= 0.05 && finished >= 10.0)
    {
        out.push(finding(FindingHead { id: "aborts", scenario: "extra", title: "Clients abort requests", severity: if abort >= 0.2 { Severity::Critical } else { Severity::Warning }, confidence: Confidence::Medium }, sig, vec![
                ev("finish_abort_share", abort, ">= 0.05"),
                ev("ttft_p95_s", sig.ttft_s.p95.unwrap_or(0.0), ""),
                ev("e2e_p95_s", sig.e2e_s.p95.unwrap_or(0.0), ""),
            ], "Requests end with finish_reason=abort: clients disconnect or time out, usually because TTFT or E2E latency exceeds their timeout (see the latency findings), or a gateway timeout is too short.", vec![ctx.action("compare client/gateway timeouts with E2E P95; fix the latency findings first", &[], "client behaviour is outside the engine")]));
    }
    if let Some(a) = crate::inference::abandoned(sig) {
        let share = a.count / a.first_tokens.max(1.0);
        if a.count >= 3.0 && share >= 0.05 {
            let mut e = vec![
                ev("first_tokens", a.first_tokens, "time_to_first_token count"),
                ev("requests_finished", a.finished, "e2e_request_latency count"),
                ev("running_last", a.running_last, "still in flight"),
                ev(
                    "abandoned_after_first_token",
                    a.count,
                    "lower bound: first tokens - finished - running at the end",
                ),
                ev("abandoned_share", share, ">= 0.05 (critical >= 0.2)"),
            ];
            if let Some(u) = a.prompt_tokens_unfinished {
                e.push(ev(
                    "prompt_tokens_of_unfinished",
                    u,
                    format!(
                        "prompt_tokens {:.0} - finished requests' {:.0}",
                        sig.prompt_tokens,
                        sig.prompt_tokens - u
                    ),
                ));
            }
            if let Some(p99) = a.ttft_p99_all_s {
                e.push(ev(
                    "ttft_p99_s",
                    p99,
                    "over every request with a first token",
                ));
            }
            if let Some(m) = a.ttft_median_at_least_s {
                e.push(ev(
                    "abandoned_ttft_median_s",
                    m,
                    "lower bound: half of them waited longer for their first token",
                ));
            }
            let secs = |x: f64| {
                if x < 1.0 {
                    format!("{:.0} ms", x * 1e3)
                } else {
                    format!("{x:.1} s")
                }
            };
            let when = match (a.ttft_median_at_least_s, a.ttft_p99_all_s) {
                (Some(m), _) => format!(
                    " Half of them had waited more than {} for their first token.",
                    secs(m)
                ),
                (None, Some(p)) => format!(" TTFT P99 over all requests was {}.", secs(p)),
                _ => String::new(),
            };
            let mut f = finding(FindingHead { id: "abandoned-requests", scenario: "extra", title: &format!("Clients abandon requests: {:.0} of {:.0} left after their first token", a.count, a.first_tokens), severity: if share >= 0.2 { Severity::Critical } else { Severity::Warning }, confidence: if sig.cumulative { Confidence::Medium } else { Confidence::High } }, sig, e, &format!("More requests reached their first token than finished or still run: clients or gateways gave up (timeouts, disconnects). vLLM 0.34 records no finish for a client disconnect (no finished_reason=abort, no E2E), so only the first-token and prompt-token counters see them.{when} A long TTFT is the usual reason (fix the TTFT findings first); with a short TTFT, a client or gateway timeout shorter than the whole answer."), vec![ctx.action(
                "compare client and gateway timeouts with TTFT P99; fix queueing/prefill first so first tokens arrive before clients give up",
                &[("ttft_p95_s", Down)],
                "client behaviour is outside the engine",
            )]);
            f.could_not_see.push(
                "requests that left before their first token: no vLLM metric counts them".into(),
            );
            out.push(f);
        }
    }
    if let Some(e_share) = sig
        .finish_share("error")
        .filter(|a| *a >= 0.01 && finished >= 10.0)
    {
        out.push(finding(
            FindingHead {
                id: "errors",
                scenario: "extra",
                title: "Requests end in errors",
                severity: Severity::Warning,
                confidence: Confidence::Medium,
            },
            sig,
            vec![ev("finish_error_share", e_share, ">= 0.01")],
            "Requests end with finish_reason=error: engine-side failures (see the server log).",
            Vec::new(),
        ));
    }
    let running_last = sig.running.as_ref().map(|g| g.last).unwrap_or(0.0);
    if sig.stalled_s >= 10.0 && running_last > 0.0 {
        out.push(finding(FindingHead { id: "engine-hung", scenario: "extra", title: "Engine hung: requests running, no tokens produced", severity: Severity::Critical, confidence: Confidence::High }, sig, vec![
                ev("stalled_s", sig.stalled_s, ">= 10 with running > 0"),
                ev("running_last", running_last, "> 0"),
            ], "num_requests_running stays above zero while generation_tokens_total does not move: the engine loop is stuck (a hung collective, a dead worker, a blocked GPU).", vec![ctx.action(
                "check the server log and GPU health (XID errors, NCCL timeouts), then restart the engine; have the liveness probe use /health",
                &[],
                "a hang is not a scheduling effect",
            )]));
    }
}

/// Replicas (or DP engines) carrying very different load.
pub fn imbalance(parts: &[Signals], what: &str) -> Option<Finding> {
    if parts.len() < 2 {
        return None;
    }
    let load = |s: &Signals| {
        s.requests_per_s
            .or(s.running.as_ref().map(|g| g.mean))
            .unwrap_or(0.0)
    };
    let loads: Vec<f64> = parts.iter().map(load).collect();
    let max = loads.iter().cloned().fold(0.0, f64::max);
    let min = loads.iter().cloned().fold(f64::INFINITY, f64::min);
    let busy = parts.iter().any(|s| {
        s.requests_per_s.is_some_and(|r| r >= 0.5)
            || s.running.as_ref().is_some_and(|g| g.mean >= 2.0)
    });
    if !(busy && max >= 2.0 * min.max(1e-9)) {
        return None;
    }
    let evidence = parts
        .iter()
        .zip(&loads)
        .map(|(s, l)| {
            ev(
                &format!(
                    "load[{}]",
                    s.engine.clone().unwrap_or_else(|| s.instance.clone())
                ),
                *l,
                "",
            )
        })
        .chain(std::iter::once(ev(
            "max_over_min",
            max / min.max(1e-9),
            ">= 2",
        )))
        .collect();
    let dummy = Signals {
        instance: if what == "engine" {
            parts[0].instance.clone()
        } else {
            "all".into()
        },
        ..Default::default()
    };
    Some(Finding {
        id: "replica-imbalance",
        scenario: "extra",
        title: format!("Load imbalance across {what}s"),
        severity: Severity::Warning,
        confidence: Confidence::Medium,
        instance: dummy.instance,
        evidence,
        cause: format!("Some {what}s carry at least twice the load (finished req/s, else running) of others: the load balancer (or DP routing) is uneven, so one {what} queues while another idles."),
        recommendations: vec![Recommendation {
            action: "balance by least outstanding requests / KV usage (or prefix-aware routing), not round-robin on connections".into(),
            flag: None,
            from: None,
            to: None,
            sim_args: Vec::new(),
            replicas: None,
            expect: vec![],
            caveat: None,
            verify: None,
            not_simulable: Some("routing across replicas is outside one engine"),
        }],
        rejected: Vec::new(),
        reproduced: None,
        could_not_see: vec!["per-request routing: which client or session lands where".into()],
    })
}
