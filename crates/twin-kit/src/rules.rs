//! Prometheus recording rules (the dashboard's panels, precomputed), alerting rules with
//! runbook annotations, and the `promtool test rules` files that go with them.
//!
//! Alert expressions read raw vLLM series only (no recording-rule dependencies), so the
//! alerting file deploys on its own and a simulated run's series can be fed to promtool
//! directly (docs/kit.md, "End-to-end test").

use std::collections::BTreeMap;

use serde::Serialize;

use crate::families::{le_label, ITL_BUCKETS, TTFT_BUCKETS};
use crate::options::{duration, num};
use crate::{paths, KitError, KitOptions};

/// One input series of a `promtool test rules` case, in promtool's expanding notation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InputSeries {
    /// `name{label="v",...}`.
    pub series: String,
    /// e.g. `0+10x30`.
    pub values: String,
}

/// One promtool case for an alert: input series, when to evaluate, and the labels of the
/// alert it expects (empty `labels` with `fires == false` means "must not fire").
#[derive(Debug, Clone, PartialEq)]
pub struct AlertCase {
    /// Input series, one value per `interval_s`.
    pub input: Vec<InputSeries>,
    /// Seconds between consecutive input values (the scrape interval; the kit's own cases
    /// use 60).
    pub interval_s: u32,
    /// Evaluation time, minutes after the first sample.
    pub eval_min: u32,
    /// Whether the alert must be firing at `eval_min`.
    pub fires: bool,
    /// Labels of the firing alert, besides `alertname` and `severity`.
    pub labels: Vec<(&'static str, String)>,
}

/// An alerting rule with its runbook and its two promtool cases.
#[derive(Debug, Clone, PartialEq)]
pub struct Alert {
    /// `alertname`.
    pub name: &'static str,
    /// Rule group it belongs to.
    pub group: &'static str,
    /// PromQL (already in the preferred naming).
    pub expr: String,
    /// `for`, seconds (0: fire on the first true evaluation).
    pub for_s: u32,
    /// `severity` label: `critical`, `warning` or `info`.
    pub severity: &'static str,
    /// `summary` annotation; may use `{{ $labels.<name> }}` and nothing else.
    pub summary: String,
    /// `description` annotation; same template rule.
    pub description: String,
    /// Runbook steps (also the `runbook` annotation and the runbooks.md section).
    pub runbook: &'static str,
    /// Input where the alert must fire.
    pub firing_case: AlertCase,
    /// Input where it must not.
    pub quiet_case: AlertCase,
}

impl Alert {
    /// Where `runbook_url` points.
    pub fn runbook_url(&self, opts: &KitOptions) -> String {
        let base = opts
            .runbook_url_base
            .clone()
            .unwrap_or_else(|| format!("../{}", paths::RUNBOOKS));
        format!("{base}#{}", self.name.to_ascii_lowercase())
    }

    fn annotations(&self, opts: &KitOptions) -> BTreeMap<String, String> {
        let mut a = BTreeMap::new();
        a.insert("summary".into(), opts.metric(&self.summary));
        a.insert("description".into(), opts.metric(&self.description));
        a.insert("runbook".into(), opts.metric(self.runbook.trim()));
        a.insert("runbook_url".into(), self.runbook_url(opts));
        a
    }
}

/// A recording rule.
#[derive(Debug, Clone, PartialEq)]
pub struct Recording {
    /// Rule group it belongs to.
    pub group: &'static str,
    /// Recorded series name (`level:metric:operation`).
    pub record: &'static str,
    /// PromQL (already in the preferred naming).
    pub expr: String,
}

// ---------------------------------------------------------------------------------------
// Test fixtures shared by the cases.

const MODEL: &str = "meta-llama/Llama-3.1-8B-Instruct";
const INSTANCE: &str = "10.0.0.7:8000";

fn sel(opts: &KitOptions, name: &str, extra: &[(&str, &str)]) -> String {
    let mut labels: BTreeMap<&str, String> = BTreeMap::new();
    labels.insert("engine", "0".into());
    labels.insert("instance", INSTANCE.into());
    labels.insert("job", opts.job.clone());
    labels.insert("model_name", MODEL.into());
    for (k, v) in extra {
        labels.insert(k, (*v).to_string());
    }
    let body: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    format!("{}{{{}}}", opts.metric(name), body.join(","))
}

fn input(series: String, values: impl Into<String>) -> InputSeries {
    InputSeries {
        series,
        values: values.into(),
    }
}

fn engine_labels() -> Vec<(&'static str, String)> {
    vec![
        ("engine", "0".into()),
        ("instance", INSTANCE.into()),
        ("model_name", MODEL.into()),
    ]
}

fn model_labels() -> Vec<(&'static str, String)> {
    vec![("model_name", MODEL.into())]
}

/// Bucket series of a histogram whose observations (`per_min` a minute) all land in the
/// bucket `land` (an index into `bounds`, or `bounds.len()` for `+Inf`).
fn histogram_input(
    opts: &KitOptions,
    family: &str,
    bounds: &[f64],
    land: usize,
    per_min: u32,
    minutes: u32,
) -> Vec<InputSeries> {
    let rising = format!("0+{per_min}x{minutes}");
    let flat = format!("0x{minutes}");
    let mut out: Vec<InputSeries> = bounds
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let le = le_label(*b);
            let v = if i >= land { &rising } else { &flat };
            input(
                sel(opts, &format!("{family}_bucket"), &[("le", le.as_str())]),
                v.clone(),
            )
        })
        .collect();
    out.push(input(
        sel(opts, &format!("{family}_bucket"), &[("le", "+Inf")]),
        rising.clone(),
    ));
    out.push(input(sel(opts, &format!("{family}_count"), &[]), rising));
    out
}

/// The five finish reasons vLLM 0.34 pre-creates, with `share` of 1000 requests a minute
/// going to `reason` and the rest to `stop`.
fn finish_input(opts: &KitOptions, reason: &str, share: f64) -> Vec<InputSeries> {
    let hit = ((share * 1000.0).round() as u32).clamp(1, 999);
    ["stop", "length", "abort", "error", "repetition"]
        .iter()
        .map(|r| {
            let per_min = if *r == reason {
                hit
            } else if *r == "stop" {
                1000 - hit
            } else {
                0
            };
            input(
                sel(
                    opts,
                    "vllm:request_success_total",
                    &[("finished_reason", r)],
                ),
                format!("0+{per_min}x30"),
            )
        })
        .collect()
}

fn latency_cases(
    opts: &KitOptions,
    family: &str,
    bounds: &[f64],
    slo: f64,
) -> (AlertCase, AlertCase) {
    // The SLO is a bucket bound (validated). Slow: everything lands in the bucket after the
    // one above the SLO, so P95 > that bucket's lower bound > SLO. Fast: everything lands in
    // the SLO's own bucket, so P95 < SLO.
    let at = bounds.iter().position(|b| *b == slo).unwrap_or(0);
    let slow = (at + 2).min(bounds.len());
    let eval_min = 5 + opts.latency_for_s.div_ceil(60) + 5;
    (
        AlertCase {
            input: histogram_input(opts, family, bounds, slow, 60, 30 + eval_min),
            interval_s: 60,
            eval_min,
            fires: true,
            labels: model_labels(),
        },
        AlertCase {
            input: histogram_input(opts, family, bounds, at, 60, 30 + eval_min),
            interval_s: 60,
            eval_min,
            fires: false,
            labels: vec![],
        },
    )
}

/// What a finish-reason share alert is about.
struct ShareSpec {
    name: &'static str,
    reason: &'static str,
    threshold: f64,
    severity: &'static str,
    what: &'static str,
    runbook: &'static str,
    /// Also require some `finished_reason="stop"` in the window (see the length alert).
    needs_natural_stops: bool,
}

fn share_alert(opts: &KitOptions, spec: ShareSpec) -> Alert {
    let ShareSpec {
        name,
        reason,
        threshold,
        severity,
        what,
        runbook,
        needs_natural_stops,
    } = spec;
    let mut expr = opts.metric(&format!(
        "sum by (model_name) (rate(vllm:request_success_total{{finished_reason=\"{reason}\"}}[5m]))\n  / sum by (model_name) (rate(vllm:request_success_total[5m])) > {}",
        num(threshold)
    ));
    if needs_natural_stops {
        expr.push_str(&opts.metric(
            "\nand on (model_name)\nsum by (model_name) (increase(vllm:request_success_total{finished_reason=\"stop\"}[5m])) > 0",
        ));
    }
    let stops_note = if needs_natural_stops {
        " Only while some requests also finish with finished_reason=\"stop\": an ignore_eos benchmark never stops on EOS, so every request ends at max_tokens and the share says nothing."
    } else {
        ""
    };
    let for_s = 300;
    let eval_min = 20;
    Alert {
        name,
        group: "vllm-kit-outcomes",
        expr,
        for_s,
        severity,
        summary: format!(
            "{{{{ $labels.model_name }}}}: more than {}% of finished requests end with finished_reason=\"{reason}\"",
            num(threshold * 100.0)
        ),
        description: format!(
            "Over 5 minutes, the share of vllm:request_success_total with finished_reason=\"{reason}\" exceeds {}: {what}{stops_note}",
            num(threshold)
        ),
        runbook,
        firing_case: AlertCase {
            input: finish_input(opts, reason, (1.0 + threshold) / 2.0),
            interval_s: 60,
            eval_min,
            fires: true,
            labels: model_labels(),
        },
        quiet_case: AlertCase {
            input: finish_input(opts, reason, threshold / 2.0),
            interval_s: 60,
            eval_min,
            fires: false,
            labels: vec![],
        },
    }
}

/// `http_requests_total` series of prometheus_fastapi_instrumentator (status grouped to
/// `2xx`/`5xx`), with `ok` and `bad` requests a minute.
fn http_input(opts: &KitOptions, ok: u32, bad: u32) -> Vec<InputSeries> {
    [("2xx", ok), ("5xx", bad)]
        .iter()
        .map(|(status, per_min)| {
            input(
                format!(
                    "http_requests_total{{handler=\"/v1/chat/completions\",instance=\"{INSTANCE}\",job=\"{}\",method=\"POST\",status=\"{status}\"}}",
                    opts.job
                ),
                format!("0+{per_min}x30"),
            )
        })
        .collect()
}

/// 5xx share of the API server's answered requests. The series comes from
/// prometheus_fastapi_instrumentator, which any FastAPI app may export, hence the `job`
/// filter. vLLM: `entrypoints/serve/instrumentator/metrics.py` (`Instrumentator(...)`).
fn http_5xx_alert(opts: &KitOptions) -> Alert {
    let job = &opts.job;
    let thr = opts.http_5xx_share;
    let hit = |share: f64| ((share * 1000.0).round() as u32).clamp(1, 999);
    Alert {
        name: "VllmHttp5xxShareHigh",
        group: "vllm-kit-outcomes",
        expr: format!(
            "sum by (job, instance) (rate(http_requests_total{{job=\"{job}\",status=\"5xx\"}}[5m]))\n  / (sum by (job, instance) (rate(http_requests_total{{job=\"{job}\"}}[5m])) > 0) > {}",
            num(thr)
        ),
        for_s: 300,
        severity: "warning",
        summary: format!(
            "vLLM API server {{{{ $labels.instance }}}}: more than {}% of HTTP requests answered 5xx",
            num(thr * 100.0)
        ),
        description: format!(
            "Over 5 minutes, the share of http_requests_total{{status=\"5xx\"}} (job=\"{job}\") exceeds {} for 5m. Excluded handlers (/metrics, /health, /load, /ping, /version, /server_info) are not counted.",
            num(thr)
        ),
        runbook: RB_HTTP_5XX,
        firing_case: AlertCase {
            input: {
                let bad = hit((1.0 + thr) / 2.0);
                http_input(opts, 1000 - bad, bad)
            },
            interval_s: 60,
            eval_min: 20,
            fires: true,
            labels: vec![("instance", INSTANCE.into()), ("job", job.clone())],
        },
        quiet_case: AlertCase {
            input: {
                let bad = hit(thr / 2.0);
                http_input(opts, 1000 - bad, bad)
            },
            interval_s: 60,
            eval_min: 20,
            fires: false,
            labels: vec![],
        },
    }
}

// ---------------------------------------------------------------------------------------
// Runbooks (condensed from the seed article's playbooks, corrected for vLLM 0.34).

const RB_TARGET_DOWN: &str = "
1. `kubectl get pods` / `kubectl describe pod`: CrashLoopBackOff, OOMKilled, or still loading weights (startup takes minutes; readiness should gate on GET /health).
2. Start-up failures: the KV pool cannot hold one max-model-len request (lower --max-model-len), or CUDA OOM (lower --gpu-memory-utilization; vLLM 0.34 resolves it to 0.92, or 1.0 with the extensible KV cache).
3. If the pod is healthy, check the scrape: port, path /metrics, ServiceMonitor selector.";

const RB_ABSENT: &str = "
1. The target is scraped but no vLLM series arrive: wrong port (the API server, not a sidecar), or a version older than the kit expects.
2. Prometheus 2.x scraping prometheus_client >= 0.23 over OpenMetrics stores the colon names with underscores (client_python #1177). Query `{__name__=~\"vllm.num_requests_running\"}` to see which spelling is stored and regenerate the kit with prefer_underscore to match.
3. With --disable-log-stats vLLM exports no engine metrics at all.";

const RB_HUNG: &str = "
1. Requests are RUNNING but vllm:generation_tokens_total has not moved: the engine loop is stuck (NCCL/collective hang across TP ranks, a dead worker, a blocked KV transfer).
2. GET /health returns 503 on EngineDeadError; check the engine-core and worker logs, then py-spy dump the EngineCore process.
3. Restart the pod; if it recurs under TP, check NCCL and the interconnect (DCGM XID errors).";

const RB_PREEMPTION: &str = "
1. The KV block pool ran out (vllm:kv_cache_usage_perc at or near 1.0): the scheduler evicts RUNNING requests and recomputes them later; throughput becomes erratic.
2. Immediate: set or lower --max-num-active-seqs (0.34 gates WAITING->RUNNING admission with it) or --max-num-seqs; queueing at the door is cheaper than recompute.
3. Capacity: --kv-cache-dtype fp8 (about 2x blocks), raise --gpu-memory-utilization, cap max_tokens at the gateway against runaway generations, or scale out.
4. Note: vLLM counts a preemption when the preempted request next emits output, so the counter lags the event.";

const RB_KV_HIGH: &str = "
1. Capacity-bound: KV usage stays high while waiting requests pile up; preemptions follow above ~0.98.
2. --kv-cache-dtype fp8, raise --gpu-memory-utilization, tighten --max-model-len, or limit --max-num-active-seqs.
3. Scale out. The kit's HPA has two targets, KV usage and the waiting queue per pod; it computes a replica count for each and takes the larger, so either one alone scales out.";

const RB_KV_CRITICAL: &str = "
1. At this level vLLM preempts: check VllmPreemptions and rate(vllm:num_preemptions_total[5m]).
2. Lower --max-num-active-seqs / --max-num-seqs now; then follow the KV-high runbook (fp8 KV cache, memory utilisation, scale out).";

const RB_WAITING: &str = "
1. Split by reason: vllm:num_requests_waiting_by_reason{reason=\"capacity\"} is the scheduler out of slots or KV blocks; reason=\"deferred\" is LoRA budget or KV transfer.
2. KV usage near 1.0: out of blocks -> fp8 KV cache or scale out.
3. KV usage low but vllm:num_requests_running flat at a ceiling (64, 128, --max-num-seqs): false saturation -> raise --max-num-seqs / --max-num-active-seqs.
4. Otherwise arrivals exceed capacity: scale out (HPA/KEDA in this kit).";

const RB_TTFT: &str = "
1. Split TTFT: rate(vllm:request_queue_time_seconds_sum) vs rate(vllm:request_prefill_time_seconds_sum) (dashboard: request lifecycle breakdown).
2. Queue-dominated: see the VllmRequestsWaiting runbook (KV full -> fp8/scale out; running flat at a ceiling -> raise --max-num-seqs / --max-num-active-seqs).
3. Prefill-dominated: long prompts (vllm:request_prompt_tokens); --max-num-batched-tokens too small chops prompts into many steps -> raise it if ITL allows; low prefix-cache hit rate -> prefix/session-affine routing.";

const RB_ITL: &str = "
1. Compare vllm:request_time_per_output_token_seconds (per-request TPOT) with ITL P99.
2. TPOT fine but ITL P99 high: prefill chunks stall decode steps -> lower --max-num-batched-tokens or set --long-prefill-token-threshold.
3. TPOT and ITL P50/P95 both high: HBM bandwidth saturated (DCGM_FI_PROF_DRAM_ACTIVE high) -> --kv-cache-dtype fp8, limit concurrency with --max-num-active-seqs, scale out.";

const RB_ABORT: &str = "
1. finished_reason=\"abort\" counts engine-side aborts (e.g. stop strings detected by the detokenizer). vLLM 0.34 records no finished stats for client disconnects, so gateway/client logs and http_requests_total are the better view of client timeouts.
2. A rise together with high TTFT usually means clients give up while queued: follow the TTFT runbook.";

const RB_LENGTH: &str = "
1. Outputs are cut by max_tokens or --max-model-len: check vllm:request_params_max_tokens and vllm:request_generation_tokens.
2. If intended (short max_tokens), raise the threshold; if not, look for runaway generations (loops) or a too-small --max-model-len.";

const RB_ERROR: &str = "
1. finished_reason=\"error\" is new in vLLM 0.34: the engine failed requests. Check the API-server and engine logs for the request ids.
2. Look for NaN logits (vllm:corrupted_requests_total with VLLM_COMPUTE_NANS_IN_LOGITS), KV-connector failures, or a model/tokenizer mismatch.";

const RB_HTTP_5XX: &str = "
1. Which endpoint: sum by (handler) (rate(http_requests_total{status=\"5xx\"}[5m])). handler=\"none\" is a path no route matches.
2. 500 with \"EngineCore encountered an issue\" or an EngineDeadError: the engine died; GET /health turns 503 and the pod should restart. Check the engine-core logs.
3. 503 from the API server: --max-num-queued-reqs / --max-num-queued-tokens reject at admission (vllm:admission_rejections); raise them or scale out. Refusals past uvicorn's --limit-concurrency never reach the app and are not counted here: read the gateway's metrics.
4. Engine-side request failures also show as finished_reason=\"error\" (VllmErrorShareHigh).";

const RB_PREFIX: &str = "
1. Typical cause: the load balancer switched to round-robin and scatters sessions across replicas; route by prefix hash or session id (consistent hashing).
2. KV pool thrash: the pool is too small to keep previous turns (vllm:kv_block_idle_before_evict_seconds with --kv-cache-metrics; compare with the think time between turns).
3. A changed system prompt or cache_salt, or a deploy that restarted the replicas (empty caches).";

// ---------------------------------------------------------------------------------------

/// The kit's alerts, in file order.
pub fn alert_rules(opts: &KitOptions) -> Vec<Alert> {
    let m = |s: &str| opts.metric(s);
    let job = &opts.job;
    let mut alerts = Vec::new();

    alerts.push(Alert {
        name: "VllmTargetDown",
        group: "vllm-kit-availability",
        expr: format!("up{{job=\"{job}\"}} == 0"),
        for_s: 120,
        severity: "critical",
        summary: "vLLM target {{ $labels.instance }} is down".into(),
        description: format!(
            "Prometheus cannot scrape {{{{ $labels.instance }}}} (job=\"{job}\") for 2 minutes."
        ),
        runbook: RB_TARGET_DOWN,
        firing_case: AlertCase {
            input: vec![input(
                format!("up{{instance=\"{INSTANCE}\",job=\"{job}\"}}"),
                "1 1 0x20",
            )],
            interval_s: 60,
            eval_min: 10,
            fires: true,
            labels: vec![("instance", INSTANCE.into()), ("job", job.clone())],
        },
        quiet_case: AlertCase {
            // A single failed scrape is not an outage.
            input: vec![input(
                format!("up{{instance=\"{INSTANCE}\",job=\"{job}\"}}"),
                "1x8 0 1x10",
            )],
            interval_s: 60,
            eval_min: 10,
            fires: false,
            labels: vec![],
        },
    });

    alerts.push(Alert {
        name: "VllmMetricsAbsent",
        group: "vllm-kit-availability",
        expr: m(&format!("absent(vllm:num_requests_running{{job=\"{job}\"}})")),
        for_s: 300,
        severity: "critical",
        summary: format!("No vLLM engine metrics from job=\"{job}\""),
        description: m(&format!(
            "vllm:num_requests_running{{job=\"{job}\"}} has been absent for 5 minutes: no engine is exporting metrics."
        )),
        runbook: RB_ABSENT,
        firing_case: AlertCase {
            // The target answers, but no engine series arrive.
            input: vec![input(
                format!("up{{instance=\"{INSTANCE}\",job=\"{job}\"}}"),
                "1x20",
            )],
            interval_s: 60,
            eval_min: 10,
            fires: true,
            labels: vec![("job", job.clone())],
        },
        quiet_case: AlertCase {
            input: vec![input(sel(opts, "vllm:num_requests_running", &[]), "2x20")],
            interval_s: 60,
            eval_min: 10,
            fires: false,
            labels: vec![],
        },
    });

    let hung_eval = 5 + opts.hung_for_s.div_ceil(60) + 5;
    let hung_len = hung_eval + 10;
    alerts.push(Alert {
        name: "VllmEngineHung",
        group: "vllm-kit-availability",
        expr: m("(sum by (model_name, engine, instance) (vllm:num_requests_running) > 0)\n  and on (model_name, engine, instance)\n(sum by (model_name, engine, instance) (rate(vllm:generation_tokens_total[5m])) == 0)"),
        for_s: opts.hung_for_s,
        severity: "critical",
        summary: "vLLM engine {{ $labels.instance }}/{{ $labels.engine }} holds running requests but generates no tokens".into(),
        description: m(&format!(
            "vllm:num_requests_running > 0 while rate(vllm:generation_tokens_total[5m]) == 0 for {}: the engine loop is stuck.",
            duration(opts.hung_for_s)
        )),
        runbook: RB_HUNG,
        firing_case: AlertCase {
            input: vec![
                input(sel(opts, "vllm:num_requests_running", &[]), format!("3x{hung_len}")),
                input(
                    sel(opts, "vllm:generation_tokens_total", &[]),
                    format!("5000+0x{hung_len}"),
                ),
            ],
            interval_s: 60,
            eval_min: hung_eval,
            fires: true,
            labels: engine_labels(),
        },
        quiet_case: AlertCase {
            input: vec![
                input(sel(opts, "vllm:num_requests_running", &[]), format!("3x{hung_len}")),
                input(
                    sel(opts, "vllm:generation_tokens_total", &[]),
                    format!("0+1200x{hung_len}"),
                ),
            ],
            interval_s: 60,
            eval_min: hung_eval,
            fires: false,
            labels: vec![],
        },
    });

    let pre = opts.preemption_rate_threshold;
    let pre_w = opts.preemption_window_s;
    let pre_eval = 2 + pre_w.div_ceil(60) + opts.preemption_for_s.div_ceil(60) + 3;
    let pre_len = pre_eval + 10;
    // Firing: well above the threshold (per minute), all along.
    let pre_fire_per_min = ((pre * 60.0).ceil() as u64 + 1) * 3;
    let pre_quiet = if opts.preemption_for_s > pre_w {
        // One burst, far above the threshold for a whole window, then none: the rate is up for
        // at most one window, shorter than `for`. A `for: 0` rule fires on this.
        let burst = pre_fire_per_min * u64::from(pre_w.div_ceil(60)) * 2;
        let at = pre_eval.saturating_sub(pre_w.div_ceil(60) + 1);
        format!("0x{at} {burst}+0x{}", pre_len.saturating_sub(at))
    } else if pre == 0.0 {
        "7+0x20".to_string()
    } else {
        format!("0+{}x{pre_len}", ((pre * 60.0).floor() as u64) / 2)
    };
    alerts.push(Alert {
        name: "VllmPreemptions",
        group: "vllm-kit-saturation",
        expr: m(&format!(
            "sum by (model_name, engine, instance) (rate(vllm:num_preemptions_total[{}])) > {}",
            duration(pre_w),
            num(pre)
        )),
        for_s: opts.preemption_for_s,
        severity: "warning",
        summary: "vLLM engine {{ $labels.instance }}/{{ $labels.engine }} is preempting requests".into(),
        description: m(&format!(
            "rate(vllm:num_preemptions_total[{}]) > {} for {}: the KV block pool is exhausted and running requests are evicted and recomputed (the monitoring guide: this must be 0 in production).",
            duration(pre_w),
            num(pre),
            duration(opts.preemption_for_s)
        )),
        runbook: RB_PREEMPTION,
        firing_case: AlertCase {
            input: vec![input(
                sel(opts, "vllm:num_preemptions_total", &[]),
                format!("0+{pre_fire_per_min}x{pre_len}"),
            )],
            interval_s: 60,
            eval_min: pre_eval,
            fires: true,
            labels: engine_labels(),
        },
        quiet_case: AlertCase {
            input: vec![input(sel(opts, "vllm:num_preemptions_total", &[]), pre_quiet)],
            interval_s: 60,
            eval_min: pre_eval,
            fires: false,
            labels: vec![],
        },
    });

    let kv_case = |thr: f64, below: f64, window_s: u32, for_s: u32| {
        let eval_min = 2 + window_s.div_ceil(60) + for_s.div_ceil(60) + 3;
        let len = eval_min + 10;
        let above = thr + (1.0 - thr) / 2.0;
        (
            AlertCase {
                input: vec![input(
                    sel(opts, "vllm:kv_cache_usage_perc", &[]),
                    format!("{}x{len}", num(above)),
                )],
                interval_s: 60,
                eval_min,
                fires: true,
                labels: engine_labels(),
            },
            AlertCase {
                input: vec![input(
                    sel(opts, "vllm:kv_cache_usage_perc", &[]),
                    format!("{}x{len}", num(below)),
                )],
                interval_s: 60,
                eval_min,
                fires: false,
                labels: vec![],
            },
        )
    };
    // The median of the window, not the last scrape: under preemption KV usage saw-tooths
    // (full, preempt, refill), and a scrape that lands in a dip must not reset `for`.
    let kv_expr = |window_s: u32, thr: f64| {
        m(&format!(
            "max by (model_name, engine, instance) (quantile_over_time(0.5, vllm:kv_cache_usage_perc[{}])) > {}",
            duration(window_s),
            num(thr)
        ))
    };
    let (fire, quiet) = kv_case(
        opts.kv_warning,
        opts.kv_warning * 0.95,
        opts.kv_warning_window_s,
        opts.kv_warning_for_s,
    );
    alerts.push(Alert {
        name: "VllmKvCacheUsageHigh",
        group: "vllm-kit-saturation",
        expr: kv_expr(opts.kv_warning_window_s, opts.kv_warning),
        for_s: opts.kv_warning_for_s,
        severity: "warning",
        summary: format!(
            "vLLM engine {{{{ $labels.instance }}}}/{{{{ $labels.engine }}}} KV cache above {}%",
            num(opts.kv_warning * 100.0)
        ),
        description: m(&format!(
            "vllm:kv_cache_usage_perc was above {} in more than half the scrapes of every {} window for {}: little headroom before preemptions.",
            num(opts.kv_warning),
            duration(opts.kv_warning_window_s),
            duration(opts.kv_warning_for_s)
        )),
        runbook: RB_KV_HIGH,
        firing_case: fire,
        quiet_case: quiet,
    });
    // Quiet for critical: between the warning and critical levels.
    let (fire, quiet) = kv_case(
        opts.kv_critical,
        (opts.kv_warning + opts.kv_critical) / 2.0,
        opts.kv_critical_window_s,
        opts.kv_critical_for_s,
    );
    alerts.push(Alert {
        name: "VllmKvCacheUsageCritical",
        group: "vllm-kit-saturation",
        expr: kv_expr(opts.kv_critical_window_s, opts.kv_critical),
        for_s: opts.kv_critical_for_s,
        severity: "critical",
        summary: format!(
            "vLLM engine {{{{ $labels.instance }}}}/{{{{ $labels.engine }}}} KV cache above {}%",
            num(opts.kv_critical * 100.0)
        ),
        description: m(&format!(
            "vllm:kv_cache_usage_perc was above {} in more than half the scrapes of every {} window for {}: the block pool is effectively full and the engine preempts (dips between preemptions do not reset this).",
            num(opts.kv_critical),
            duration(opts.kv_critical_window_s),
            duration(opts.kv_critical_for_s)
        )),
        runbook: RB_KV_CRITICAL,
        firing_case: fire,
        quiet_case: quiet,
    });

    let w_win = opts.waiting_window_s;
    let w_eval = 2 + w_win.div_ceil(60) + opts.waiting_for_s.div_ceil(60) + 3;
    let w_len = w_eval + 10;
    let w_above = (opts.waiting_threshold.floor() as u64) + 3;
    // Quiet: a queue that is long most of the time but empties once every three scrapes,
    // so every window holds an empty scrape. A `waiting > 0 for …` rule can fire on this.
    let w_quiet: Vec<String> = (0..=w_len)
        .map(|i| {
            if i % 3 == 2 {
                "0".to_string()
            } else {
                w_above.to_string()
            }
        })
        .collect();
    alerts.push(Alert {
        name: "VllmRequestsWaiting",
        group: "vllm-kit-saturation",
        expr: m(&format!(
            "sum by (model_name, engine, instance) (min_over_time(vllm:num_requests_waiting[{}])) > {}",
            duration(w_win),
            num(opts.waiting_threshold)
        )),
        for_s: opts.waiting_for_s,
        severity: "warning",
        summary: "vLLM engine {{ $labels.instance }}/{{ $labels.engine }} has a persistent queue".into(),
        description: m(&format!(
            "vllm:num_requests_waiting stayed above {} in every scrape of every {} window for {}: arrivals exceed what the engine admits; TTFT grows with the queue.",
            num(opts.waiting_threshold),
            duration(w_win),
            duration(opts.waiting_for_s)
        )),
        runbook: RB_WAITING,
        firing_case: AlertCase {
            input: vec![input(
                sel(opts, "vllm:num_requests_waiting", &[]),
                format!("{w_above}x{w_len}"),
            )],
            interval_s: 60,
            eval_min: w_eval,
            fires: true,
            labels: engine_labels(),
        },
        quiet_case: AlertCase {
            input: vec![input(
                sel(opts, "vllm:num_requests_waiting", &[]),
                w_quiet.join(" "),
            )],
            interval_s: 60,
            eval_min: w_eval,
            fires: false,
            labels: vec![],
        },
    });
    let (fire, quiet) = latency_cases(
        opts,
        "vllm:time_to_first_token_seconds",
        TTFT_BUCKETS,
        opts.ttft_slo_s,
    );
    alerts.push(Alert {
        name: "VllmTtftP95OverSlo",
        group: "vllm-kit-latency-slo",
        expr: m(&format!(
            "histogram_quantile(0.95, sum by (le, model_name) (rate(vllm:time_to_first_token_seconds_bucket[5m]))) > {}",
            num(opts.ttft_slo_s)
        )),
        for_s: opts.latency_for_s,
        severity: "warning",
        summary: format!(
            "{{{{ $labels.model_name }}}}: TTFT P95 above the {} s SLO",
            num(opts.ttft_slo_s)
        ),
        description: format!(
            "histogram_quantile(0.95) of vllm:time_to_first_token_seconds over 5 minutes exceeds {} s for {}.",
            num(opts.ttft_slo_s),
            duration(opts.latency_for_s)
        ),
        runbook: RB_TTFT,
        firing_case: fire,
        quiet_case: quiet,
    });
    let (fire, quiet) = latency_cases(
        opts,
        "vllm:inter_token_latency_seconds",
        ITL_BUCKETS,
        opts.itl_slo_s,
    );
    alerts.push(Alert {
        name: "VllmItlP95OverSlo",
        group: "vllm-kit-latency-slo",
        expr: m(&format!(
            "histogram_quantile(0.95, sum by (le, model_name) (rate(vllm:inter_token_latency_seconds_bucket[5m]))) > {}",
            num(opts.itl_slo_s)
        )),
        for_s: opts.latency_for_s,
        severity: "warning",
        summary: format!(
            "{{{{ $labels.model_name }}}}: ITL P95 above the {} s SLO",
            num(opts.itl_slo_s)
        ),
        description: format!(
            "histogram_quantile(0.95) of vllm:inter_token_latency_seconds over 5 minutes exceeds {} s for {}: streaming stutters.",
            num(opts.itl_slo_s),
            duration(opts.latency_for_s)
        ),
        runbook: RB_ITL,
        firing_case: fire,
        quiet_case: quiet,
    });

    alerts.push(share_alert(
        opts,
        ShareSpec {
            name: "VllmAbortShareHigh",
            reason: "abort",
            threshold: opts.abort_share,
            severity: "warning",
            what: "requests are being aborted.",
            runbook: RB_ABORT,
            needs_natural_stops: false,
        },
    ));
    // An ignore_eos benchmark (vllm bench serve, guidellm, the twin's fixed --output-len)
    // ends every request at max_tokens, so the length share is 1 by construction; requiring
    // natural stops in the same window keeps such runs silent.
    alerts.push(share_alert(
        opts,
        ShareSpec {
            name: "VllmLengthTruncationShareHigh",
            reason: "length",
            threshold: opts.length_share,
            severity: "info",
            what: "outputs are truncated by max_tokens or max_model_len.",
            runbook: RB_LENGTH,
            needs_natural_stops: true,
        },
    ));
    alerts.push(share_alert(
        opts,
        ShareSpec {
            name: "VllmErrorShareHigh",
            reason: "error",
            threshold: opts.error_share,
            severity: "warning",
            what: "the engine is failing requests.",
            runbook: RB_ERROR,
            needs_natural_stops: false,
        },
    ));
    alerts.push(http_5xx_alert(opts));

    // Prefix-cache hit rate: 5-minute rate against the hour before it.
    let hr = |w: &str, off: &str| {
        format!(
            "(sum by (model_name) (rate(vllm:prefix_cache_hits_total[{w}]{off})) / sum by (model_name) (rate(vllm:prefix_cache_queries_total[{w}]{off})))"
        )
    };
    let now = hr("5m", "");
    let before = hr("1h", " offset 5m");
    let keep = 1.0 - opts.prefix_hit_drop;
    let expr = m(&format!(
        "{now}\n  < {} * {before}\nand\n{before} > {}",
        num(keep),
        num(opts.prefix_hit_min_baseline)
    ));
    // Firing: ratio 0.9 for 60 minutes, then 0.9*keep/4; evaluated 30 minutes after the drop.
    let pre_hits = 900u32;
    let post_hits = ((pre_hits as f64) * keep / 4.0).floor().max(0.0) as u32;
    let queries = input(
        sel(opts, "vllm:prefix_cache_queries_total", &[]),
        "0+1000x110",
    );
    alerts.push(Alert {
        name: "VllmPrefixCacheHitRateDrop",
        group: "vllm-kit-cache",
        expr,
        for_s: 600,
        severity: "warning",
        summary: "{{ $labels.model_name }}: prefix-cache hit rate dropped".into(),
        description: format!(
            "The 5-minute prefix-cache hit rate is below {}x the previous hour's (which was above {}) for 10 minutes.",
            num(keep),
            num(opts.prefix_hit_min_baseline)
        ),
        runbook: RB_PREFIX,
        firing_case: AlertCase {
            input: vec![
                queries.clone(),
                input(
                    sel(opts, "vllm:prefix_cache_hits_total", &[]),
                    format!(
                        "0+{pre_hits}x60 {}+{post_hits}x49",
                        60 * pre_hits + post_hits
                    ),
                ),
            ],
            interval_s: 60,
            eval_min: 90,
            fires: true,
            labels: model_labels(),
        },
        quiet_case: AlertCase {
            input: vec![
                queries,
                input(
                    sel(opts, "vllm:prefix_cache_hits_total", &[]),
                    format!("0+{pre_hits}x110"),
                ),
            ],
            interval_s: 60,
            eval_min: 90,
            fires: false,
            labels: vec![],
        },
    });

    alerts
}

/// The kit's recording rules, in file order.
pub fn recording_rules(opts: &KitOptions) -> Vec<Recording> {
    let m = |s: &str| opts.metric(s);
    let g = "vllm-kit-recording-golden";
    let e = "vllm-kit-recording-engine";
    let q = |p: &str, fam: &str| {
        m(&format!(
            "histogram_quantile({p}, sum by (le, model_name) (rate({fam}_bucket[5m])))"
        ))
    };
    let mean = |fam: &str| {
        m(&format!(
            "sum by (model_name) (rate({fam}_sum[5m])) / (sum by (model_name) (rate({fam}_count[5m])) > 0)"
        ))
    };
    let attain = |fam: &str, le: f64| {
        m(&format!(
            "sum by (model_name) (rate({fam}_bucket{{le=\"{}\"}}[5m])) / (sum by (model_name) (rate({fam}_count[5m])) > 0)",
            le_label(le)
        ))
    };
    let rate = |s: &str| m(&format!("sum by (model_name) (rate({s}[5m]))"));
    let ttft = "vllm:time_to_first_token_seconds";
    let itl = "vllm:inter_token_latency_seconds";
    let e2e = "vllm:e2e_request_latency_seconds";
    vec![
        Recording { group: g, record: "model_name:vllm_time_to_first_token_seconds:p95_5m", expr: q("0.95", ttft) },
        Recording { group: g, record: "model_name:vllm_time_to_first_token_seconds:p99_5m", expr: q("0.99", ttft) },
        Recording { group: g, record: "model_name:vllm_inter_token_latency_seconds:p95_5m", expr: q("0.95", itl) },
        Recording { group: g, record: "model_name:vllm_inter_token_latency_seconds:p99_5m", expr: q("0.99", itl) },
        Recording { group: g, record: "model_name:vllm_e2e_request_latency_seconds:p95_5m", expr: q("0.95", e2e) },
        Recording { group: g, record: "model_name:vllm_e2e_request_latency_seconds:p99_5m", expr: q("0.99", e2e) },
        Recording { group: g, record: "model_name:vllm_ttft_slo_attainment:ratio_5m", expr: attain(ttft, opts.ttft_slo_s) },
        Recording { group: g, record: "model_name:vllm_itl_slo_attainment:ratio_5m", expr: attain(itl, opts.itl_slo_s) },
        Recording { group: g, record: "model_name:vllm_request_success:rate5m", expr: rate("vllm:request_success_total") },
        Recording {
            group: g,
            record: "model_name_finished_reason:vllm_request_success:share_5m",
            expr: m("sum by (model_name, finished_reason) (rate(vllm:request_success_total[5m]))\n  / ignoring (finished_reason) group_left ()\n(sum by (model_name) (rate(vllm:request_success_total[5m])) > 0)"),
        },
        Recording { group: g, record: "model_name:vllm_generation_tokens:rate5m", expr: rate("vllm:generation_tokens_total") },
        Recording { group: g, record: "model_name:vllm_prompt_tokens:rate5m", expr: rate("vllm:prompt_tokens_total") },
        Recording {
            group: g,
            record: "model_name:vllm_prompt_tokens_computed:rate5m",
            expr: m("sum by (model_name) (rate(vllm:prompt_tokens_by_source_total{source=\"local_compute\"}[5m]))"),
        },
        Recording { group: e, record: "model_name:vllm_request_queue_time_seconds:mean_5m", expr: mean("vllm:request_queue_time_seconds") },
        Recording { group: e, record: "model_name:vllm_request_prefill_time_seconds:mean_5m", expr: mean("vllm:request_prefill_time_seconds") },
        Recording { group: e, record: "model_name:vllm_request_decode_time_seconds:mean_5m", expr: mean("vllm:request_decode_time_seconds") },
        Recording { group: e, record: "model_name:vllm_num_requests_running:sum", expr: m("sum by (model_name) (vllm:num_requests_running)") },
        Recording { group: e, record: "model_name:vllm_num_requests_waiting:sum", expr: m("sum by (model_name) (vllm:num_requests_waiting)") },
        Recording {
            group: e,
            record: "model_name_reason:vllm_num_requests_waiting_by_reason:sum",
            expr: m("sum by (model_name, reason) (vllm:num_requests_waiting_by_reason)"),
        },
        Recording { group: e, record: "model_name:vllm_kv_cache_usage_perc:max", expr: m("max by (model_name) (vllm:kv_cache_usage_perc)") },
        Recording { group: e, record: "model_name:vllm_num_preemptions:rate5m", expr: rate("vllm:num_preemptions_total") },
        Recording {
            group: e,
            record: "model_name:vllm_prefix_cache_hit_ratio:ratio_5m",
            expr: m("sum by (model_name) (rate(vllm:prefix_cache_hits_total[5m])) / (sum by (model_name) (rate(vllm:prefix_cache_queries_total[5m])) > 0)"),
        },
        Recording { group: e, record: "model_name:vllm_iteration_tokens:mean_5m", expr: mean("vllm:iteration_tokens_total") },
        Recording { group: e, record: "model_name:vllm_request_prompt_tokens:mean_5m", expr: mean("vllm:request_prompt_tokens") },
        Recording { group: e, record: "model_name:vllm_request_generation_tokens:mean_5m", expr: mean("vllm:request_generation_tokens") },
        Recording {
            group: e,
            record: "model_name:vllm_input_output_ratio:ratio_5m",
            expr: m("sum by (model_name) (rate(vllm:request_prompt_tokens_sum[5m])) / (sum by (model_name) (rate(vllm:request_generation_tokens_sum[5m])) > 0)"),
        },
    ]
}

// ---------------------------------------------------------------------------------------
// YAML documents.

#[derive(Serialize)]
struct RuleFile {
    groups: Vec<RuleGroup>,
}

#[derive(Serialize)]
struct RuleGroup {
    name: String,
    rules: Vec<RuleYaml>,
}

#[derive(Serialize)]
struct RuleYaml {
    #[serde(skip_serializing_if = "Option::is_none")]
    record: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    alert: Option<String>,
    expr: String,
    #[serde(rename = "for", skip_serializing_if = "Option::is_none")]
    for_: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    labels: Option<BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    annotations: Option<BTreeMap<String, String>>,
}

fn group_in_order<T>(
    items: &[T],
    group_of: impl Fn(&T) -> &'static str,
) -> Vec<(&'static str, Vec<&T>)> {
    let mut out: Vec<(&'static str, Vec<&T>)> = Vec::new();
    for it in items {
        let g = group_of(it);
        match out.iter_mut().find(|(name, _)| *name == g) {
            Some((_, v)) => v.push(it),
            None => out.push((g, vec![it])),
        }
    }
    out
}

fn recording_groups(recs: &[Recording]) -> Vec<RuleGroup> {
    group_in_order(recs, |r| r.group)
        .into_iter()
        .map(|(name, rs)| RuleGroup {
            name: name.into(),
            rules: rs
                .into_iter()
                .map(|r| RuleYaml {
                    record: Some(r.record.into()),
                    alert: None,
                    expr: r.expr.clone(),
                    for_: None,
                    labels: None,
                    annotations: None,
                })
                .collect(),
        })
        .collect()
}

fn alert_groups(opts: &KitOptions, alerts: &[Alert]) -> Vec<RuleGroup> {
    group_in_order(alerts, |a| a.group)
        .into_iter()
        .map(|(name, al)| RuleGroup {
            name: name.into(),
            rules: al
                .into_iter()
                .map(|a| RuleYaml {
                    record: None,
                    alert: Some(a.name.into()),
                    expr: a.expr.clone(),
                    for_: (a.for_s > 0).then(|| duration(a.for_s)),
                    labels: Some(BTreeMap::from([(
                        "severity".to_string(),
                        a.severity.to_string(),
                    )])),
                    annotations: Some(a.annotations(opts)),
                })
                .collect(),
        })
        .collect()
}

pub(crate) fn to_yaml<T: Serialize>(what: &'static str, v: &T) -> Result<String, KitError> {
    serde_norway::to_string(v).map_err(|e| KitError::Serialize {
        what,
        reason: e.to_string(),
    })
}

/// A generated file's comment header: the kit's line, then `lines` as comments.
pub(crate) fn generated_header(lines: &[&str]) -> String {
    let mut s = String::from(
        "# Generated by vllm-twin (twin-kit) for vLLM 0.34.0. Do not edit; regenerate.\n",
    );
    for l in lines {
        s.push_str("# ");
        s.push_str(l);
        s.push('\n');
    }
    s
}

fn header(opts: &KitOptions, lines: &[&str]) -> String {
    let mut s = generated_header(lines);
    if opts.prefer_underscore {
        s.push_str("# Metric names use the vllm_ spelling (prefer_underscore).\n");
    }
    s
}

/// `prometheus/vllm-recording-rules.yaml`.
pub fn recording_rules_yaml(opts: &KitOptions, recs: &[Recording]) -> Result<String, KitError> {
    let body = to_yaml(
        "recording rules",
        &RuleFile {
            groups: recording_groups(recs),
        },
    )?;
    Ok(header(
        opts,
        &["Recording rules for the dashboard panels; check with: promtool check rules <file>"],
    ) + &body)
}

/// `prometheus/vllm-alerting-rules.yaml`.
pub fn alerting_rules_yaml(opts: &KitOptions, alerts: &[Alert]) -> Result<String, KitError> {
    let body = to_yaml(
        "alerting rules",
        &RuleFile {
            groups: alert_groups(opts, alerts),
        },
    )?;
    Ok(header(
        opts,
        &[
            "Alerting rules; they read raw vLLM series only (no recording-rule dependencies).",
            "Unit tests: promtool test rules tests/vllm-alerting-rules.test.yaml",
        ],
    ) + &body)
}

#[derive(Serialize)]
struct PrometheusRule {
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    kind: &'static str,
    metadata: CrMeta,
    spec: RuleFile,
}

#[derive(Serialize)]
struct CrMeta {
    name: String,
    namespace: String,
    labels: BTreeMap<String, String>,
}

/// `prometheus/vllm-prometheusrule.yaml`: both files' groups as a prometheus-operator CR.
pub fn prometheus_rule_cr(
    opts: &KitOptions,
    recs: &[Recording],
    alerts: &[Alert],
) -> Result<String, KitError> {
    let mut groups = recording_groups(recs);
    groups.extend(alert_groups(opts, alerts));
    let cr = PrometheusRule {
        api_version: "monitoring.coreos.com/v1",
        kind: "PrometheusRule",
        metadata: CrMeta {
            name: format!("{}-monitoring-kit", opts.deployment),
            namespace: opts.namespace.clone(),
            labels: BTreeMap::from([
                (
                    "app.kubernetes.io/name".to_string(),
                    opts.deployment.clone(),
                ),
                (
                    "app.kubernetes.io/part-of".to_string(),
                    "vllm-twin-kit".to_string(),
                ),
            ]),
        },
        spec: RuleFile { groups },
    };
    let body = to_yaml("PrometheusRule", &cr)?;
    Ok(header(
        opts,
        &["The recording and alerting groups as a prometheus-operator PrometheusRule (same rules as the plain files)."],
    ) + &body)
}

#[derive(Serialize)]
struct TestFile {
    rule_files: Vec<String>,
    evaluation_interval: String,
    tests: Vec<TestGroup>,
}

#[derive(Serialize)]
struct TestGroup {
    name: String,
    interval: String,
    input_series: Vec<InputSeries>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    alert_rule_test: Vec<AlertRuleTest>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    promql_expr_test: Vec<PromqlExprTest>,
}

#[derive(Serialize)]
struct AlertRuleTest {
    eval_time: String,
    alertname: String,
    exp_alerts: Vec<ExpAlert>,
}

#[derive(Serialize)]
struct ExpAlert {
    exp_labels: BTreeMap<String, String>,
    exp_annotations: BTreeMap<String, String>,
}

#[derive(Serialize)]
struct PromqlExprTest {
    expr: String,
    eval_time: String,
    exp_samples: Vec<ExpSample>,
}

#[derive(Serialize)]
struct ExpSample {
    labels: String,
    value: f64,
}

/// Expands the only template the kit's annotations use, `{{ $labels.<name> }}`.
pub fn expand_labels(template: &str, labels: &BTreeMap<String, String>) -> String {
    let mut out = template.to_string();
    for (k, v) in labels {
        out = out.replace(&format!("{{{{ $labels.{k} }}}}"), v);
    }
    out
}

fn alert_test_group(opts: &KitOptions, alert: &Alert, case: &AlertCase) -> TestGroup {
    let exp_alerts = if case.fires {
        let mut labels: BTreeMap<String, String> = case
            .labels
            .iter()
            .map(|(k, v)| ((*k).to_string(), v.clone()))
            .collect();
        let annotations = alert
            .annotations(opts)
            .into_iter()
            .map(|(k, v)| (k, expand_labels(&v, &labels)))
            .collect();
        labels.insert("severity".into(), alert.severity.into());
        vec![ExpAlert {
            exp_labels: labels,
            exp_annotations: annotations,
        }]
    } else {
        vec![]
    };
    TestGroup {
        name: format!(
            "{} {}",
            alert.name,
            if case.fires { "fires" } else { "stays quiet" }
        ),
        interval: duration(case.interval_s),
        input_series: case.input.clone(),
        alert_rule_test: vec![AlertRuleTest {
            eval_time: format!("{}m", case.eval_min),
            alertname: alert.name.into(),
            exp_alerts,
        }],
        promql_expr_test: vec![],
    }
}

/// `prometheus/tests/vllm-alerting-rules.test.yaml`: for every alert one case where it
/// fires and one where it must not.
pub fn alert_tests_yaml(opts: &KitOptions, alerts: &[Alert]) -> Result<String, KitError> {
    let cases: Vec<(&Alert, &AlertCase)> = alerts
        .iter()
        .flat_map(|a| [(a, &a.firing_case), (a, &a.quiet_case)])
        .collect();
    let body = promtool_test_yaml(
        opts,
        &format!("../{}", file_name(paths::ALERTING_RULES)),
        &cases,
    )?;
    Ok(header(
        opts,
        &[
            "promtool unit tests: one firing and one quiet case per alert.",
            "Run: promtool test rules <this file>",
        ],
    ) + &body)
}

/// A `promtool test rules` file (no header) for any alert cases, evaluated against
/// `rule_file` (relative to the test file). This is how an end-to-end test turns a
/// simulated run's series into an alert check: build [`AlertCase`]s from the simulator's
/// samples and expect the preemption / KV alerts.
pub fn promtool_test_yaml(
    opts: &KitOptions,
    rule_file: &str,
    cases: &[(&Alert, &AlertCase)],
) -> Result<String, KitError> {
    // Rules are evaluated as often as the finest scrape interval among the cases (at most a
    // minute), as a Prometheus with `evaluation_interval` = scrape interval would: a dip in
    // 15 s scrapes must be able to reset a `for`, or a dip-robust rule proves nothing.
    let eval_s = cases
        .iter()
        .map(|(_, c)| c.interval_s)
        .min()
        .unwrap_or(60)
        .clamp(1, 60);
    let file = TestFile {
        rule_files: vec![rule_file.to_string()],
        evaluation_interval: duration(eval_s),
        tests: cases
            .iter()
            .map(|(a, c)| alert_test_group(opts, a, c))
            .collect(),
    };
    to_yaml("alert tests", &file)
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// `prometheus/tests/vllm-recording-rules.test.yaml`: recorded values on a small fixture.
pub fn recording_tests_yaml(opts: &KitOptions) -> Result<String, KitError> {
    let m = |s: &str| opts.metric(s);
    let mut input_series = vec![
        input(
            sel(opts, "vllm:prefix_cache_queries_total", &[]),
            "0+1000x30",
        ),
        input(sel(opts, "vllm:prefix_cache_hits_total", &[]), "0+900x30"),
        input(sel(opts, "vllm:num_requests_running", &[]), "3x30"),
        input(
            sel(opts, "vllm:num_requests_running", &[("engine", "1")]),
            "5x30",
        ),
        input(sel(opts, "vllm:kv_cache_usage_perc", &[]), "0.5x30"),
        input(
            sel(opts, "vllm:kv_cache_usage_perc", &[("engine", "1")]),
            "0.75x30",
        ),
    ];
    // 60 finished requests a minute: 54 stop, 6 length.
    input_series.extend(["stop", "length"].iter().map(|r| {
        input(
            sel(
                opts,
                "vllm:request_success_total",
                &[("finished_reason", r)],
            ),
            if *r == "stop" { "0+54x30" } else { "0+6x30" },
        )
    }));
    // TTFT: everything in the (0.5, 0.75] bucket.
    let land = TTFT_BUCKETS.iter().position(|b| *b == 0.75).unwrap_or(0);
    input_series.extend(histogram_input(
        opts,
        "vllm:time_to_first_token_seconds",
        TTFT_BUCKETS,
        land,
        60,
        30,
    ));
    let model_sel = format!("{{model_name=\"{MODEL}\"}}");
    let sample = |record: &str, value: f64| PromqlExprTest {
        expr: record.to_string(),
        eval_time: "10m".into(),
        exp_samples: vec![ExpSample {
            labels: format!("{record}{model_sel}"),
            value,
        }],
    };
    let share = PromqlExprTest {
        expr: "model_name_finished_reason:vllm_request_success:share_5m".into(),
        eval_time: "10m".into(),
        exp_samples: vec![
            ExpSample {
                labels: format!(
                    "model_name_finished_reason:vllm_request_success:share_5m{{finished_reason=\"length\",model_name=\"{MODEL}\"}}"
                ),
                value: 0.1,
            },
            ExpSample {
                labels: format!(
                    "model_name_finished_reason:vllm_request_success:share_5m{{finished_reason=\"stop\",model_name=\"{MODEL}\"}}"
                ),
                value: 0.9,
            },
        ],
    };
    let raw = PromqlExprTest {
        // The raw seed expression for the hit rate agrees with the recorded one.
        expr: m("sum(rate(vllm:prefix_cache_hits_total[5m])) by (model_name) / sum(rate(vllm:prefix_cache_queries_total[5m])) by (model_name)"),
        eval_time: "10m".into(),
        exp_samples: vec![ExpSample {
            labels: model_sel.clone(),
            value: 0.9,
        }],
    };
    let tests = vec![TestGroup {
        name: "recording rules on a steady fixture".into(),
        interval: "1m".into(),
        input_series,
        alert_rule_test: vec![],
        promql_expr_test: vec![
            sample("model_name:vllm_prefix_cache_hit_ratio:ratio_5m", 0.9),
            raw,
            sample("model_name:vllm_num_requests_running:sum", 8.0),
            sample("model_name:vllm_kv_cache_usage_perc:max", 0.75),
            sample("model_name:vllm_request_success:rate5m", 1.0),
            share,
            // All observations in (0.5, 0.75]: P95 = 0.5 + 0.95 * 0.25.
            sample("model_name:vllm_time_to_first_token_seconds:p95_5m", 0.7375),
            sample(
                "model_name:vllm_ttft_slo_attainment:ratio_5m",
                if opts.ttft_slo_s >= 0.75 { 1.0 } else { 0.0 },
            ),
        ],
    }];
    let file = TestFile {
        rule_files: vec![format!("../{}", file_name(paths::RECORDING_RULES))],
        evaluation_interval: "1m".into(),
        tests,
    };
    let body = to_yaml("recording tests", &file)?;
    Ok(header(
        opts,
        &["promtool unit tests for the recording rules. Run: promtool test rules <this file>"],
    ) + &body)
}
