//! The Grafana dashboard (classic JSON model) in the seed article's three layers: golden
//! signals, engine scheduling, GPU hardware (DCGM), plus the seed's playbooks as text.
//!
//! The seed's eight PromQL panels are [`seed_panels`]; the dashboard uses them verbatim
//! except for the template-variable selector and the corrections each one lists.

use serde_json::{json, Value};

use crate::families::le_label;
use crate::options::num;
use crate::{KitError, KitOptions};

/// Grafana's classic dashboard schema version the kit writes (Grafana 12.x / 13.x).
pub const SCHEMA_VERSION: u32 = 42;

/// The vLLM selector every engine query carries (the dashboard's template variables).
pub const VLLM_SELECTOR: &str =
    r#"model_name=~"$model_name",instance=~"$instance",engine=~"$engine""#;

/// The selector on dcgm-exporter queries.
pub const DCGM_SELECTOR: &str = r#"Hostname=~"$hostname",gpu=~"$gpu""#;

/// One of the seed article's eight "core PromQL panels".
#[derive(Debug, Clone, PartialEq)]
pub struct SeedPanel {
    /// 1–8, as numbered in the seed.
    pub number: u8,
    /// The seed's title, in English.
    pub title: &'static str,
    /// (legend, expression) pairs as the dashboard queries them.
    pub queries: Vec<(&'static str, String)>,
    /// What was changed from the seed's text for vLLM 0.34, or "as written".
    pub correction: &'static str,
}

/// The seed's eight panels with the dashboard's selector inserted.
pub fn seed_panels(opts: &KitOptions) -> Vec<SeedPanel> {
    let v = VLLM_SELECTOR;
    let m = |s: String| opts.metric(&s);
    let mean = |fam: &str| {
        m(format!(
            "rate({fam}_sum{{{v}}}[5m]) / rate({fam}_count{{{v}}}[5m])"
        ))
    };
    vec![
        SeedPanel {
            number: 1,
            title: "Time to first token (TTFT) P95",
            queries: vec![(
                "P95 {{model_name}}",
                m(format!("histogram_quantile(0.95, sum(rate(vllm:time_to_first_token_seconds_bucket{{{v}}}[5m])) by (le, model_name))")),
            )],
            correction: "as written",
        },
        SeedPanel {
            number: 2,
            title: "Inter-token latency (ITL) P95",
            queries: vec![(
                "P95 {{model_name}}",
                m(format!("histogram_quantile(0.95, sum(rate(vllm:inter_token_latency_seconds_bucket{{{v}}}[5m])) by (le, model_name))")),
            )],
            correction: "as written (vllm:inter_token_latency_seconds replaced the removed vllm:time_per_output_token_seconds)",
        },
        SeedPanel {
            number: 3,
            title: "Request lifecycle breakdown: mean queue vs prefill vs decode time",
            queries: vec![
                ("queue {{model_name}} e{{engine}}", mean("vllm:request_queue_time_seconds")),
                ("prefill {{model_name}} e{{engine}}", mean("vllm:request_prefill_time_seconds")),
                ("decode {{model_name}} e{{engine}}", mean("vllm:request_decode_time_seconds")),
            ],
            correction: "as written; note that in 0.34 queue time ends at the first scheduling and prefill time includes any preemption before the first token",
        },
        SeedPanel {
            number: 4,
            title: "Throughput: prompt tokens/s vs generation tokens/s",
            queries: vec![
                ("generation tok/s {{model_name}}", m(format!("sum(rate(vllm:generation_tokens_total{{{v}}}[$__rate_interval])) by (model_name)"))),
                ("prompt tok/s incl. cached {{model_name}}", m(format!("sum(rate(vllm:prompt_tokens_total{{{v}}}[$__rate_interval])) by (model_name)"))),
                ("prefill computed tok/s {{model_name}}", m(format!("sum(rate(vllm:prompt_tokens_by_source_total{{{v},source=\"local_compute\"}}[$__rate_interval])) by (model_name)"))),
            ],
            correction: "[1m] -> [$__rate_interval] (1m holds < 2 samples at common 30-60 s scrape intervals); vllm:prompt_tokens_total counts the full prompt, prefix-cache hits included, at the first token, so the real prefill compute rate is added from vllm:prompt_tokens_by_source_total{source=\"local_compute\"}",
        },
        SeedPanel {
            number: 5,
            title: "KV-cache usage and preemption rate",
            queries: vec![
                ("KV usage {{instance}} e{{engine}}", m(format!("vllm:kv_cache_usage_perc{{{v}}}"))),
                ("preemptions/s {{instance}} e{{engine}}", m(format!("rate(vllm:num_preemptions_total{{{v}}}[$__rate_interval])"))),
            ],
            correction: "[1m] -> [$__rate_interval]; the metric is vllm:kv_cache_usage_perc (vllm:gpu_cache_usage_perc was removed in 0.12)",
        },
        SeedPanel {
            number: 6,
            title: "Prefix-cache hit rate",
            queries: vec![(
                "hit rate {{model_name}}",
                m(format!("sum(rate(vllm:prefix_cache_hits_total{{{v}}}[5m])) by (model_name) / sum(rate(vllm:prefix_cache_queries_total{{{v}}}[5m])) by (model_name)")),
            )],
            correction: "as written; only the _total series exist in 0.34 (the monitoring guide's \"or without _total\" does not apply), and 0.34 counts each admission once, preempted re-admissions excluded",
        },
        SeedPanel {
            number: 7,
            title: "Tokens per engine step (batch fullness)",
            queries: vec![(
                "tokens/step {{instance}} e{{engine}}",
                mean("vllm:iteration_tokens_total"),
            )],
            correction: "as written; in 0.34 a step is observed only when it emits output and prompt tokens count computed (non-cached) tokens only, so this reads low under heavy chunked prefill or high prefix hit rates",
        },
        SeedPanel {
            number: 8,
            title: "Mean prompt / generation length (workload shape)",
            queries: vec![
                ("prompt len {{instance}} e{{engine}}", mean("vllm:request_prompt_tokens")),
                ("generation len {{instance}} e{{engine}}", mean("vllm:request_generation_tokens")),
            ],
            correction: "as written",
        },
    ]
}

/// Lays panels out on Grafana's 24-column grid, left to right, top to bottom.
struct Layout {
    panels: Vec<Value>,
    next_id: u32,
    x: u32,
    y: u32,
    line_h: u32,
}

struct Target {
    legend: String,
    expr: String,
    heatmap: bool,
}

fn t(legend: &str, expr: String) -> Target {
    Target {
        legend: legend.into(),
        expr,
        heatmap: false,
    }
}

/// Grafana threshold steps: a green base, then the given levels in ascending order.
fn threshold_steps(levels: &[(f64, &str)]) -> Vec<Value> {
    let mut sorted: Vec<(f64, &str)> = levels.to_vec();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut steps = vec![json!({"color": "green", "value": null})];
    steps.extend(sorted.iter().map(|(v, c)| json!({"color": c, "value": v})));
    steps
}

fn ds() -> Value {
    json!({"type": "prometheus", "uid": "${datasource}"})
}

/// What a panel says: its title, hover description and Grafana unit.
struct PanelText<'a> {
    title: &'a str,
    description: &'a str,
    unit: &'a str,
}

/// How a time-series panel is laid out and drawn: grid size, threshold lines, stacking.
struct PanelStyle<'a> {
    w: u32,
    h: u32,
    thresholds: &'a [(f64, &'a str)],
    stacked: bool,
}

impl Layout {
    fn new() -> Self {
        Layout {
            panels: Vec::new(),
            next_id: 1,
            x: 0,
            y: 0,
            line_h: 0,
        }
    }

    fn place(&mut self, w: u32, h: u32) -> Value {
        if self.x + w > 24 {
            self.y += self.line_h;
            self.x = 0;
            self.line_h = 0;
        }
        let pos = json!({"h": h, "w": w, "x": self.x, "y": self.y});
        self.x += w;
        self.line_h = self.line_h.max(h);
        pos
    }

    fn id(&mut self) -> u32 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn row(&mut self, title: &str) {
        if self.x > 0 {
            self.y += self.line_h;
            self.x = 0;
            self.line_h = 0;
        }
        let id = self.id();
        let pos = self.place(24, 1);
        self.y += 1;
        self.x = 0;
        self.line_h = 0;
        self.panels.push(json!({
            "collapsed": false, "gridPos": pos, "id": id, "panels": [], "title": title, "type": "row"
        }));
    }

    fn targets(targets: &[Target]) -> Value {
        let refs = "ABCDEFGHIJKLMNOPQRSTUVWXYZ";
        Value::Array(
            targets
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let mut v = json!({
                        "datasource": ds(),
                        "editorMode": "code",
                        "expr": t.expr,
                        "legendFormat": t.legend,
                        "range": true,
                        "refId": refs.get(i..i + 1).unwrap_or("Z"),
                    });
                    if t.heatmap {
                        v["format"] = json!("heatmap");
                    }
                    v
                })
                .collect(),
        )
    }

    fn timeseries(&mut self, text: PanelText<'_>, targets: Vec<Target>, style: PanelStyle<'_>) {
        let PanelText {
            title,
            description,
            unit,
        } = text;
        let PanelStyle {
            w,
            h,
            thresholds,
            stacked,
        } = style;
        let id = self.id();
        let pos = self.place(w, h);
        let steps = threshold_steps(thresholds);
        let mode = if thresholds.is_empty() { "off" } else { "line" };
        self.panels.push(json!({
            "datasource": ds(),
            "description": description,
            "fieldConfig": {
                "defaults": {
                    "color": {"mode": "palette-classic"},
                    "custom": {
                        "drawStyle": "line",
                        "fillOpacity": if stacked { 30 } else { 10 },
                        "lineWidth": 1,
                        "showPoints": "never",
                        "spanNulls": false,
                        "stacking": {"group": "A", "mode": if stacked { "normal" } else { "none" }},
                        "thresholdsStyle": {"mode": mode}
                    },
                    "thresholds": {"mode": "absolute", "steps": steps},
                    "unit": unit
                },
                "overrides": []
            },
            "gridPos": pos,
            "id": id,
            "options": {
                "legend": {"calcs": ["mean", "max"], "displayMode": "table", "placement": "bottom", "showLegend": true},
                "tooltip": {"mode": "multi", "sort": "desc"}
            },
            "targets": Self::targets(&targets),
            "title": title,
            "type": "timeseries"
        }));
    }

    fn stat(
        &mut self,
        title: &str,
        description: &str,
        unit: &str,
        target: Target,
        thresholds: &[(f64, &str)],
    ) {
        let id = self.id();
        let pos = self.place(4, 4);
        let steps = threshold_steps(thresholds);
        self.panels.push(json!({
            "datasource": ds(),
            "description": description,
            "fieldConfig": {
                "defaults": {
                    "color": {"mode": "thresholds"},
                    "thresholds": {"mode": "absolute", "steps": steps},
                    "unit": unit
                },
                "overrides": []
            },
            "gridPos": pos,
            "id": id,
            "options": {
                "colorMode": "background",
                "graphMode": "area",
                "justifyMode": "auto",
                "orientation": "auto",
                "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": false},
                "textMode": "auto"
            },
            "targets": Self::targets(&[target]),
            "title": title,
            "type": "stat"
        }));
    }

    fn heatmap(&mut self, title: &str, description: &str, expr: String, w: u32, h: u32) {
        let id = self.id();
        let pos = self.place(w, h);
        self.panels.push(json!({
            "datasource": ds(),
            "description": description,
            "gridPos": pos,
            "id": id,
            "options": {
                "calculate": false,
                "cellGap": 1,
                "color": {"mode": "scheme", "scheme": "Oranges", "steps": 64},
                "tooltip": {"mode": "single", "yHistogram": true},
                "yAxis": {"axisPlacement": "left"}
            },
            "targets": Self::targets(&[Target { legend: "{{le}}".into(), expr, heatmap: true }]),
            "title": title,
            "type": "heatmap"
        }));
    }

    fn text(&mut self, title: &str, markdown: &str, w: u32, h: u32) {
        let id = self.id();
        let pos = self.place(w, h);
        self.panels.push(json!({
            "gridPos": pos,
            "id": id,
            "options": {"code": {"language": "markdown", "showLineNumbers": false, "showMiniMap": false}, "content": markdown.trim(), "mode": "markdown"},
            "title": title,
            "type": "text"
        }));
    }
}

const BOTTLENECKS: &str = r#"
**Reading the GPU layer (the monitoring guide: three physical bottlenecks).** `DCGM_FI_DEV_GPU_UTIL` (nvidia-smi's utilisation) reads ~100% whenever any kernel runs, and `DCGM_FI_DEV_FB_USED` sits at `--gpu-memory-utilization` from start-up because vLLM preallocates the KV pool: neither says anything about load. Cross-read vLLM metrics with the DCGM profiling fields:

| Bottleneck | vLLM signature | DCGM signature | What helps |
|---|---|---|---|
| **Compute-bound** | prefill time dominates the lifecycle breakdown; tokens/step sits at `--max-num-batched-tokens` | `DCGM_FI_PROF_PIPE_TENSOR_ACTIVE` high (> 0.6–0.7) | prefix caching with session-affine routing; W8A8/FP8 weights+activations; prefill/decode disaggregation |
| **Memory-bandwidth-bound** | decode time dominates (> 85%); ITL grows with concurrency | tensor active low (~0.15) but `DCGM_FI_PROF_DRAM_ACTIVE` high (> 0.75) | `--kv-cache-dtype fp8` and weight quantisation (fewer bytes per step); speculative decoding / MTP |
| **Capacity-bound** | `vllm:kv_cache_usage_perc` > 0.85 for long; waiting requests pile up or preemptions appear | neither tensor nor DRAM saturated, yet concurrency cannot grow | `--kv-cache-dtype fp8` (~2x blocks); higher `--gpu-memory-utilization`; `--max-num-active-seqs` to stop admitting what will be preempted |

DCGM values are ratios 0–1 (profiling fields) or percent (GPU_UTIL). `DCGM_FI_PROF_SM_ACTIVE` is off in dcgm-exporter's default counters; enable it in the counters CSV to see the SM panel.
"#;

const PLAYBOOK_TTFT: &str = r#"
**1. TTFT far over the SLO while ITL is normal**

1. Compare queue time with prefill time (lifecycle breakdown).
2. *Queue dominates:* KV usage near 1.0 → out of blocks: `--kv-cache-dtype fp8` or scale out. KV usage low (~40%) but *running* flat at a ceiling (64, 128, `--max-num-seqs`) → false saturation: raise `--max-num-seqs` / `--max-num-active-seqs`.
3. *Prefill dominates:* very long prompts (prompt-length heatmap)? `--max-num-batched-tokens` too small (an 8K prompt split into 8 steps at 1024) → raise it within the ITL budget. Low prefix hit rate → prefix-hash / session-id routing instead of round-robin.
"#;

const PLAYBOOK_ITL: &str = r#"
**2. Streaming stutters (ITL P99 high)**

1. Compare per-request TPOT (`vllm:request_time_per_output_token_seconds`) with ITL.
2. *TPOT fine, ITL P99 high (periodic stalls):* prefill chunks interfere with decode → lower `--max-num-batched-tokens` (e.g. 8192 → 2048) or set `--long-prefill-token-threshold` (e.g. 1024).
3. *TPOT and ITL P50/P95 both high:* HBM bandwidth saturated by concurrency or context length → `--kv-cache-dtype fp8`, cap concurrency with `--max-num-active-seqs`, scale out.
"#;

const PLAYBOOK_PREEMPT: &str = r#"
**3. Preemptions > 0, throughput swings**

Root cause: the KV block pool is exhausted (`vllm:kv_cache_usage_perc` touches 1.0) and the scheduler evicts half-finished requests to recompute them.

1. Now: set or lower `--max-num-active-seqs` (exists in 0.34; gates WAITING→RUNNING) so requests queue at the door instead of being evicted mid-flight.
2. Then: `--kv-cache-dtype fp8`; raise `--gpu-memory-utilization` (0.34 resolves the default to 0.92, or 1.0 with the extensible KV cache); cap `max_tokens` at the gateway against runaway generations.
"#;

const PLAYBOOK_HPA: &str = r#"
**4. Autoscaling signals (HPA / KEDA)**

*Never* scale on CPU utilisation, `DCGM_FI_DEV_GPU_UTIL` (always ~100%) or `DCGM_FI_DEV_FB_USED` (full from start-up). Scale on `vllm:kv_cache_usage_perc` > 0.65 **or** `vllm:num_requests_waiting` > 3 per pod (queue non-empty for 15–30 s): an HPA with two metrics computes a replica count for each and takes the larger, so either one alone scales out and scale-in needs both below target. KV usage alone can plateau while the queue grows under prefill-heavy load. The kit's `k8s/` files implement exactly this.
"#;

/// `grafana/vllm-dashboard.json`.
pub fn dashboard_json(opts: &KitOptions) -> Result<String, KitError> {
    let v = VLLM_SELECTOR;
    let d = DCGM_SELECTOR;
    let m = |s: String| opts.metric(&s);
    let seeds = seed_panels(opts);
    let seed = |n: u8| -> (String, Vec<Target>) {
        let p = seeds.iter().find(|p| p.number == n);
        let desc = p
            .map(|p| {
                format!(
                    "Seed panel {n}: {}. Corrections for vLLM 0.34: {}.",
                    p.title, p.correction
                )
            })
            .unwrap_or_default();
        let targets = p
            .map(|p| p.queries.iter().map(|(l, e)| t(l, e.clone())).collect())
            .unwrap_or_default();
        (desc, targets)
    };
    let ttft_le = le_label(opts.ttft_slo_s);
    let itl_le = le_label(opts.itl_slo_s);
    let q = |p: &str, fam: &str| {
        m(format!(
            "histogram_quantile({p}, sum by (le, model_name) (rate({fam}_bucket{{{v}}}[$__rate_interval])))"
        ))
    };
    let share = |reason: &str| {
        m(format!(
            "sum by (model_name) (rate(vllm:request_success_total{{{v},finished_reason=\"{reason}\"}}[$__rate_interval])) / (sum by (model_name) (rate(vllm:request_success_total{{{v}}}[$__rate_interval])) > 0)"
        ))
    };
    let attain = |fam: &str, le: &str| {
        m(format!(
            "sum by (model_name) (rate({fam}_bucket{{{v},le=\"{le}\"}}[$__rate_interval])) / (sum by (model_name) (rate({fam}_count{{{v}}}[$__rate_interval])) > 0)"
        ))
    };
    let ttft = "vllm:time_to_first_token_seconds";
    let itl = "vllm:inter_token_latency_seconds";
    let e2e = "vllm:e2e_request_latency_seconds";

    let mut l = Layout::new();

    // ---- Layer 1: golden signals.
    l.row("Layer 1 — Golden signals (user-facing)");
    l.stat(
        "Requests/s",
        "Finished requests per second (vllm:request_success_total, all finish reasons).",
        "reqps",
        t(
            "",
            m(format!(
                "sum(rate(vllm:request_success_total{{{v}}}[$__rate_interval]))"
            )),
        ),
        &[],
    );
    l.stat(
        "TTFT P95",
        "Time to first token, P95 over all selected engines.",
        "s",
        t("", m(format!("histogram_quantile(0.95, sum by (le) (rate({ttft}_bucket{{{v}}}[$__rate_interval])))"))),
        &[(opts.ttft_slo_s, "red")],
    );
    l.stat(
        "ITL P95",
        "Inter-token latency, P95 over all selected engines.",
        "s",
        t("", m(format!("histogram_quantile(0.95, sum by (le) (rate({itl}_bucket{{{v}}}[$__rate_interval])))"))),
        &[(opts.itl_slo_s, "red")],
    );
    l.stat(
        &format!("TTFT SLO attainment (≤ {} s)", num(opts.ttft_slo_s)),
        &format!("Share of requests whose TTFT fell in buckets le=\"{ttft_le}\" or below."),
        "percentunit",
        t("", m(format!("sum(rate({ttft}_bucket{{{v},le=\"{ttft_le}\"}}[$__rate_interval])) / (sum(rate({ttft}_count{{{v}}}[$__rate_interval])) > 0)"))),
        &[],
    );
    l.stat(
        &format!("ITL SLO attainment (≤ {} s)", num(opts.itl_slo_s)),
        &format!("Share of inter-token gaps in buckets le=\"{itl_le}\" or below."),
        "percentunit",
        t("", m(format!("sum(rate({itl}_bucket{{{v},le=\"{itl_le}\"}}[$__rate_interval])) / (sum(rate({itl}_count{{{v}}}[$__rate_interval])) > 0)"))),
        &[],
    );
    l.stat(
        "Error + abort share",
        "Share of finished requests with finished_reason error or abort.",
        "percentunit",
        t("", m(format!("sum(rate(vllm:request_success_total{{{v},finished_reason=~\"error|abort\"}}[$__rate_interval])) / (sum(rate(vllm:request_success_total{{{v}}}[$__rate_interval])) > 0)"))),
        &[(opts.error_share, "orange"), (opts.abort_share, "red")],
    );
    let (desc, mut targets) = seed(1);
    targets.push(t("P99 {{model_name}}", q("0.99", ttft)));
    l.timeseries(
        PanelText {
            title: "TTFT P95 / P99",
            description: &desc,
            unit: "s",
        },
        targets,
        PanelStyle {
            w: 12,
            h: 8,
            thresholds: &[(opts.ttft_slo_s, "red")],
            stacked: false,
        },
    );
    let (desc, mut targets) = seed(2);
    targets.push(t("P99 {{model_name}}", q("0.99", itl)));
    l.timeseries(
        PanelText {
            title: "ITL P95 / P99",
            description: &desc,
            unit: "s",
        },
        targets,
        PanelStyle {
            w: 12,
            h: 8,
            thresholds: &[(opts.itl_slo_s, "red")],
            stacked: false,
        },
    );
    l.timeseries(PanelText { title: "E2E request latency", description: "End-to-end latency (arrival to last token, frontend wall clock). Request-latency buckets start at 0.3 s, so percentiles below that are interpolation.", unit: "s" }, vec![
            t("P50 {{model_name}}", q("0.5", e2e)),
            t("P95 {{model_name}}", q("0.95", e2e)),
            t("P99 {{model_name}}", q("0.99", e2e)),
        ], PanelStyle { w: 8, h: 8, thresholds: &[], stacked: false });
    l.timeseries(PanelText { title: "Request rate by finish reason", description: "Finished requests/s by finished_reason (stop, length, abort, error, repetition). Client disconnects are not counted by vLLM 0.34.", unit: "reqps" }, vec![t(
            "{{finished_reason}} {{model_name}}",
            m(format!("sum by (model_name, finished_reason) (rate(vllm:request_success_total{{{v}}}[$__rate_interval]))")),
        )], PanelStyle { w: 8, h: 8, thresholds: &[], stacked: true });
    l.timeseries(PanelText { title: "Error / abort / length shares", description: "Shares of finished requests; alerts fire above the kit's thresholds (error, abort, length).", unit: "percentunit" }, vec![
            t("error {{model_name}}", share("error")),
            t("abort {{model_name}}", share("abort")),
            t("length (truncated) {{model_name}}", share("length")),
        ], PanelStyle { w: 8, h: 8, thresholds: &[], stacked: false });
    let (desc, targets) = seed(4);
    l.timeseries(
        PanelText {
            title: "Token throughput",
            description: &desc,
            unit: "short",
        },
        targets,
        PanelStyle {
            w: 12,
            h: 8,
            thresholds: &[],
            stacked: false,
        },
    );
    l.timeseries(PanelText { title: "SLO attainment", description: &format!("Share of requests under the SLO, read from _bucket{{le=\"{ttft_le}\"}} (TTFT) and _bucket{{le=\"{itl_le}\"}} (ITL). The SLOs must be bucket bounds."), unit: "percentunit" }, vec![
            t(&format!("TTFT ≤ {} s {{{{model_name}}}}", num(opts.ttft_slo_s)), attain(ttft, &ttft_le)),
            t(&format!("ITL ≤ {} s {{{{model_name}}}}", num(opts.itl_slo_s)), attain(itl, &itl_le)),
        ], PanelStyle { w: 12, h: 8, thresholds: &[], stacked: false });

    // ---- Layer 2: engine scheduling.
    l.row("Layer 2 — Engine scheduling (vLLM V1 EngineCore)");
    let (desc, targets) = seed(3);
    l.timeseries(
        PanelText {
            title: "Request lifecycle: queue vs prefill vs decode (mean)",
            description: &format!("{desc} E2E ≈ queue + prefill + decode; TTFT ≈ queue + prefill."),
            unit: "s",
        },
        targets,
        PanelStyle {
            w: 12,
            h: 8,
            thresholds: &[],
            stacked: true,
        },
    );
    l.timeseries(PanelText { title: "Running vs waiting", description: &format!("Requests RUNNING vs WAITING per engine. The red line is --max-num-seqs ({}): running flat on it with low KV usage is false saturation (playbook 1).", opts.max_num_seqs), unit: "short" }, vec![
            t("running {{instance}} e{{engine}}", m(format!("vllm:num_requests_running{{{v}}}"))),
            t("waiting {{instance}} e{{engine}}", m(format!("vllm:num_requests_waiting{{{v}}}"))),
        ], PanelStyle { w: 12, h: 8, thresholds: &[(opts.max_num_seqs as f64, "red")], stacked: false });
    l.timeseries(PanelText { title: "Waiting by reason", description: "capacity = waiting for slots or KV blocks; deferred = LoRA budget, KV transfer or blocked. The reasons sum to vllm:num_requests_waiting.", unit: "short" }, vec![t(
            "{{reason}} {{instance}} e{{engine}}",
            m(format!("vllm:num_requests_waiting_by_reason{{{v}}}")),
        )], PanelStyle { w: 8, h: 8, thresholds: &[], stacked: true });
    let (desc, targets) = seed(5);
    let (kv, pre): (Vec<Target>, Vec<Target>) = targets
        .into_iter()
        .partition(|t| t.expr.contains("kv_cache_usage_perc"));
    l.timeseries(
        PanelText {
            title: "KV-cache usage",
            description: &format!(
                "{desc} Warning at {}, critical at {} (preemptions follow).",
                num(opts.kv_warning),
                num(opts.kv_critical)
            ),
            unit: "percentunit",
        },
        kv,
        PanelStyle {
            w: 8,
            h: 8,
            thresholds: &[(opts.kv_warning, "orange"), (opts.kv_critical, "red")],
            stacked: false,
        },
    );
    l.timeseries(
        PanelText {
            title: "Preemptions/s",
            description: &format!("{desc} Must be 0 in production."),
            unit: "short",
        },
        pre,
        PanelStyle {
            w: 8,
            h: 8,
            thresholds: &[(0.001, "red")],
            stacked: false,
        },
    );
    let (desc, targets) = seed(6);
    l.timeseries(
        PanelText {
            title: "Prefix-cache hit rate",
            description: &desc,
            unit: "percentunit",
        },
        targets,
        PanelStyle {
            w: 8,
            h: 8,
            thresholds: &[],
            stacked: false,
        },
    );
    let (desc, targets) = seed(7);
    l.timeseries(
        PanelText {
            title: "Tokens per step",
            description: &format!(
                "{desc} The red line is --max-num-batched-tokens ({}).",
                opts.max_num_batched_tokens
            ),
            unit: "short",
        },
        targets,
        PanelStyle {
            w: 8,
            h: 8,
            thresholds: &[(opts.max_num_batched_tokens as f64, "red")],
            stacked: false,
        },
    );
    l.timeseries(PanelText { title: "Input / output token ratio", description: "Prompt tokens over generated tokens of finished requests: > 1 is prefill-heavy (RAG, summarisation), < 1 decode-heavy (code, long-form, reasoning).", unit: "short" }, vec![t(
            "in/out {{model_name}}",
            m(format!("sum by (model_name) (rate(vllm:request_prompt_tokens_sum{{{v}}}[$__rate_interval])) / (sum by (model_name) (rate(vllm:request_generation_tokens_sum{{{v}}}[$__rate_interval])) > 0)")),
        )], PanelStyle { w: 8, h: 8, thresholds: &[], stacked: false });
    let (desc, targets) = seed(8);
    l.timeseries(
        PanelText {
            title: "Mean prompt / generation length",
            description: &desc,
            unit: "short",
        },
        targets,
        PanelStyle {
            w: 12,
            h: 8,
            thresholds: &[],
            stacked: false,
        },
    );
    l.heatmap(
        "Prompt length distribution",
        "Finished requests by prompt length (1-2-5 buckets up to max_model_len).",
        m(format!(
            "sum by (le) (increase(vllm:request_prompt_tokens_bucket{{{v}}}[$__rate_interval]))"
        )),
        6,
        8,
    );
    l.heatmap(
        "Generation length distribution",
        "Finished requests by generated tokens.",
        m(format!("sum by (le) (increase(vllm:request_generation_tokens_bucket{{{v}}}[$__rate_interval]))")),
        6,
        8,
    );

    // ---- Layer 3: GPU hardware.
    l.row("Layer 3 — GPU hardware (dcgm-exporter)");
    l.timeseries(PanelText { title: "Tensor pipe / graphics engine active", description: "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE (ratio of cycles the tensor pipes are busy) and DCGM_FI_PROF_GR_ENGINE_ACTIVE. High tensor activity with prefill-dominated latency = compute-bound.", unit: "percentunit" }, vec![
            t("tensor {{Hostname}} gpu{{gpu}}", format!("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{{d}}}")),
            t("gr engine {{Hostname}} gpu{{gpu}}", format!("DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{d}}}")),
        ], PanelStyle { w: 12, h: 8, thresholds: &[(0.6, "orange")], stacked: false });
    l.timeseries(PanelText { title: "HBM bandwidth (DRAM active)", description: "DCGM_FI_PROF_DRAM_ACTIVE: ratio of cycles the device memory interface is busy. High DRAM with low tensor activity = memory-bandwidth-bound decode.", unit: "percentunit" }, vec![t("dram {{Hostname}} gpu{{gpu}}", format!("DCGM_FI_PROF_DRAM_ACTIVE{{{d}}}"))], PanelStyle { w: 12, h: 8, thresholds: &[(0.75, "orange")], stacked: false });
    l.timeseries(PanelText { title: "GPU utilisation (nvidia-smi) — not a load signal", description: "DCGM_FI_DEV_GPU_UTIL (%) is ~100 whenever any kernel runs. Shown for completeness; do not alert or autoscale on it.", unit: "percent" }, vec![t("util {{Hostname}} gpu{{gpu}}", format!("DCGM_FI_DEV_GPU_UTIL{{{d}}}"))], PanelStyle { w: 8, h: 8, thresholds: &[], stacked: false });
    l.timeseries(PanelText { title: "Framebuffer used / free", description: "DCGM_FI_DEV_FB_USED / FB_FREE (MiB). vLLM preallocates the KV pool at start-up, so FB_USED is flat near --gpu-memory-utilization: use vllm:kv_cache_usage_perc for the real KV level.", unit: "decmbytes" }, vec![
            t("used {{Hostname}} gpu{{gpu}}", format!("DCGM_FI_DEV_FB_USED{{{d}}}")),
            t("free {{Hostname}} gpu{{gpu}}", format!("DCGM_FI_DEV_FB_FREE{{{d}}}")),
        ], PanelStyle { w: 8, h: 8, thresholds: &[], stacked: false });
    l.timeseries(PanelText { title: "Power / SM active", description: "DCGM_FI_DEV_POWER_USAGE (W) and DCGM_FI_PROF_SM_ACTIVE (off in dcgm-exporter's default counters; empty unless enabled).", unit: "watt" }, vec![
            t("power {{Hostname}} gpu{{gpu}}", format!("DCGM_FI_DEV_POWER_USAGE{{{d}}}")),
            t("sm active x100 {{Hostname}} gpu{{gpu}}", format!("100 * DCGM_FI_PROF_SM_ACTIVE{{{d}}}")),
        ], PanelStyle { w: 8, h: 8, thresholds: &[], stacked: false });
    l.text("Bottleneck reading notes", BOTTLENECKS, 24, 11);

    // ---- Playbooks.
    l.row("Playbooks (the monitoring guide: four classic incidents)");
    l.text(
        "Playbook 1 — TTFT over SLO, ITL normal",
        PLAYBOOK_TTFT,
        12,
        9,
    );
    l.text(
        "Playbook 2 — Stuttering stream (ITL P99)",
        PLAYBOOK_ITL,
        12,
        9,
    );
    l.text("Playbook 3 — Preemptions", PLAYBOOK_PREEMPT, 12, 9);
    l.text("Playbook 4 — Autoscaling signals", PLAYBOOK_HPA, 12, 9);

    let running = opts.metric("vllm:num_requests_running");
    let query_var = |name: &str, label: &str, query: String| {
        json!({
            "allValue": ".*",
            "current": {},
            "datasource": ds(),
            "definition": query,
            "includeAll": true,
            "label": label,
            "multi": true,
            "name": name,
            "options": [],
            "query": query,
            "refresh": 2,
            "regex": "",
            "sort": 1,
            "type": "query"
        })
    };
    let templating = json!({"list": [
        {
            "current": {},
            "hide": 0,
            "includeAll": false,
            "label": "Data source",
            "name": "datasource",
            "options": [],
            "query": "prometheus",
            "refresh": 1,
            "regex": "",
            "type": "datasource"
        },
        query_var("model_name", "Model", format!("label_values({running}, model_name)")),
        query_var("instance", "Instance", format!("label_values({running}{{model_name=~\"$model_name\"}}, instance)")),
        query_var("engine", "Engine (DP rank)", format!("label_values({running}{{model_name=~\"$model_name\",instance=~\"$instance\"}}, engine)")),
        query_var("hostname", "GPU host (DCGM)", "label_values(DCGM_FI_DEV_GPU_UTIL, Hostname)".to_string()),
        query_var("gpu", "GPU", "label_values(DCGM_FI_DEV_GPU_UTIL{Hostname=~\"$hostname\"}, gpu)".to_string()),
    ]});

    let dash = json!({
        "annotations": {"list": [{
            "builtIn": 1,
            "datasource": {"type": "grafana", "uid": "-- Grafana --"},
            "enable": true,
            "hide": true,
            "iconColor": "rgba(0, 211, 255, 1)",
            "name": "Annotations & Alerts",
            "type": "dashboard"
        }]},
        "description": "vLLM 0.34 V1 engine: golden signals, engine scheduling, GPU hardware. Generated by vllm-twin's monitoring kit.",
        "editable": true,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "id": null,
        "links": [],
        "panels": l.panels,
        "refresh": "30s",
        "schemaVersion": SCHEMA_VERSION,
        "tags": ["vllm", "vllm-0.34", "vllm-twin"],
        "templating": templating,
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "timezone": "browser",
        "title": "vLLM 0.34 — serving engine (vllm-twin kit)",
        "uid": opts.dashboard_uid,
        "version": 1
    });
    // Descriptions and notes name metrics too: one spelling throughout.
    serde_json::to_string_pretty(&dash)
        .map(|s| opts.metric(&s) + "\n")
        .map_err(|e| KitError::Serialize {
            what: "dashboard",
            reason: e.to_string(),
        })
}
