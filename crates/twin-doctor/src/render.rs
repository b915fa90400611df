//! Output: the terminal report (findings first, then bottleneck and panels; plain text,
//! readable without colour), `--markdown` for tickets, and `--json` (the [`Diagnosis`]
//! itself, schema in docs/doctor.md).

use std::fmt::Write as _;

use crate::panels::{Quantiles, Signals};
use crate::playbook::Finding;
use crate::recommend::Recommendation;
use crate::Diagnosis;

fn ms(x: Option<f64>) -> String {
    match x {
        Some(v) if v.is_finite() => {
            if v >= 10.0 {
                format!("{v:.1} s")
            } else if v >= 1.0 {
                format!("{v:.2} s")
            } else {
                format!("{:.0} ms", v * 1000.0)
            }
        }
        _ => "-".into(),
    }
}

fn num(x: Option<f64>, digits: usize) -> String {
    match x {
        Some(v) if v.is_finite() => format!("{v:.digits$}"),
        _ => "-".into(),
    }
}

fn pct(x: Option<f64>) -> String {
    match x {
        Some(v) if v.is_finite() => format!("{:.0}%", v * 100.0),
        _ => "-".into(),
    }
}

fn q(qs: &Quantiles) -> String {
    let approx = if qs.approximate {
        " (approximate: a lower bound, truncated histogram)"
    } else {
        ""
    };
    format!(
        "P95 {}  P99 {}  mean {}{approx}",
        ms(qs.p95),
        ms(qs.p99),
        ms(qs.mean)
    )
}

fn value(v: f64) -> String {
    if v == 0.0 || v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn rec_line(r: &Recommendation) -> String {
    let mut s = r.action.clone();
    if !r.expect.is_empty() {
        let e: Vec<String> = r
            .expect
            .iter()
            .map(|e| format!("{} {}", e.metric, e.direction.arrow()))
            .collect();
        let _ = write!(s, "  [expect: {}]", e.join(", "));
    }
    if let Some(c) = &r.caveat {
        let _ = write!(s, "  (caveat: {c})");
    }
    s
}

fn verdict_lines(r: &Recommendation, indent: &str) -> Vec<String> {
    let Some(v) = &r.verify else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut head = format!("{indent}twin: {}", v.outcome);
    if let Some(n) = &v.note {
        let _ = write!(head, " ({n})");
    }
    out.push(head);
    for (k, (b, a)) in &v.predicted {
        out.push(format!("{indent}  {k}: {} -> {}", value(*b), value(*a)));
    }
    out
}

fn finding_text(f: &Finding, out: &mut String) {
    let _ = writeln!(
        out,
        "[{}] {} ({}; confidence {:?}; scenario {}; {})",
        f.severity.name(),
        f.title,
        f.id,
        f.confidence,
        f.scenario,
        f.instance
    );
    let _ = writeln!(out, "  cause: {}", f.cause);
    let _ = writeln!(out, "  evidence:");
    for e in &f.evidence {
        let th = if e.threshold.is_empty() {
            String::new()
        } else {
            format!("  ({})", e.threshold)
        };
        let _ = writeln!(out, "    {} = {}{th}", e.metric, value(e.value));
    }
    if !f.could_not_see.is_empty() {
        let _ = writeln!(out, "  could not see:");
        for c in &f.could_not_see {
            let _ = writeln!(out, "    - {c}");
        }
    }
    if let Some(r) = f.reproduced {
        let _ = writeln!(
            out,
            "  twin reproduces the symptom: {}",
            if r {
                "yes"
            } else {
                "no (treat predictions with care)"
            }
        );
    }
    if !f.recommendations.is_empty() {
        let _ = writeln!(out, "  recommend:");
        for r in &f.recommendations {
            let _ = writeln!(out, "    - {}", rec_line(r));
            for l in verdict_lines(r, "      ") {
                let _ = writeln!(out, "{l}");
            }
        }
    }
    if !f.rejected.is_empty() {
        let _ = writeln!(out, "  the twin predicts these will NOT help:");
        for r in &f.rejected {
            let _ = writeln!(out, "    x {}", rec_line(r));
            for l in verdict_lines(r, "      ") {
                let _ = writeln!(out, "{l}");
            }
        }
    }
    out.push('\n');
}

/// One line of what a recommendation should do and what the twin said of it.
fn effect(r: &Recommendation) -> String {
    let mut parts: Vec<String> = r
        .expect
        .iter()
        .map(|e| format!("{} {}", e.metric, e.direction.arrow()))
        .collect();
    if let Some(v) = &r.verify {
        let mut t = format!("twin: {}", v.outcome);
        if let Some((b, a)) = v.predicted.get("goodput_requests_per_s") {
            let _ = write!(t, ", goodput {} -> {} req/s", value(*b), value(*a));
        }
        parts.push(t);
    }
    parts.join("; ")
}

fn plan_text(d: &Diagnosis, out: &mut String) {
    if d.plan.is_empty() {
        return;
    }
    let _ = writeln!(out, "Plan (do this first):");
    for s in &d.plan {
        let _ = writeln!(
            out,
            "  {}. [{}] {} ({}; {})",
            s.order,
            s.severity.name(),
            s.cause,
            s.findings.join(", "),
            s.instance
        );
        if s.actions.is_empty() {
            let _ = writeln!(
                out,
                "     (nothing left to change here: see the steps above)"
            );
        }
        for r in &s.actions {
            let _ = writeln!(out, "     - {}  [{}]", r.action, effect(r));
            if let (Some(_), Some(c)) = (r.replicas, &r.caveat) {
                let _ = writeln!(out, "       {c}");
            }
        }
    }
    out.push('\n');
}

fn panels_text(s: &Signals, out: &mut String) {
    let window = match (s.cumulative, s.window_s) {
        (true, _) => match (s.uptime_s, s.since_start_requests_per_s) {
            (Some(up), Some(rps)) => format!(
                "since server start {:.1} h ago (one scrape; its counters' _created): {rps:.2} req/s, {:.0} output tok/s on average",
                up / 3600.0,
                s.since_start_generation_tokens_per_s.unwrap_or(0.0)
            ),
            _ => "since server start (one scrape)".to_string(),
        },
        (false, Some(w)) => format!("over {w:.0} s, {} scrapes", s.num_scrapes),
        _ => format!("{} scrapes", s.num_scrapes),
    };
    let _ = writeln!(out, "Panels: {} ({window})", s.instance);
    let _ = writeln!(out, "  1 TTFT         {}", q(&s.ttft_s));
    let _ = writeln!(
        out,
        "  2 ITL          {}   (TPOT mean {})",
        q(&s.itl_s),
        ms(s.tpot_s.mean)
    );
    let _ = writeln!(
        out,
        "  3 queue/prefill/decode  mean {} / {} / {}   share {} / {} / {}",
        ms(s.queue_s.mean),
        ms(s.prefill_s.mean),
        ms(s.decode_s.mean),
        pct(s.queue_share),
        pct(s.prefill_share),
        pct(s.decode_share)
    );
    let _ = writeln!(
        out,
        "  4 tokens/s     input {}  output {}   (requests/s {})",
        num(s.prompt_tokens_per_s, 0),
        num(s.generation_tokens_per_s, 0),
        num(s.requests_per_s, 2)
    );
    let kv = s.kv_usage.as_ref();
    let _ = writeln!(
        out,
        "  5 KV usage     mean {} max {}   preemptions {} ({}/s)   running mean {} max {}   waiting mean {} max {}",
        pct(kv.map(|g| g.mean)),
        pct(kv.map(|g| g.max)),
        value(s.preemptions),
        num(s.preemptions_per_s, 3),
        num(s.running.as_ref().map(|g| g.mean), 1),
        num(s.running.as_ref().map(|g| g.max), 0),
        num(s.waiting.as_ref().map(|g| g.mean), 1),
        num(s.waiting.as_ref().map(|g| g.max), 0)
    );
    let _ = writeln!(out, "  6 prefix hits  {}", pct(s.prefix_hit_rate));
    let _ = writeln!(
        out,
        "  7 tokens/step  mean {}{}",
        num(s.tokens_per_step.mean, 1),
        if s.tokens_per_step.approximate {
            " (approximate: truncated histogram)"
        } else {
            ""
        }
    );
    let _ = writeln!(
        out,
        "  8 lengths      input mean {}  output mean {}",
        num(s.mean_input_len, 0),
        num(s.mean_output_len, 0)
    );
    if !s.finish_reasons.is_empty() {
        let r: Vec<String> = s
            .finish_reasons
            .iter()
            .map(|(k, v)| format!("{k} {v:.0}"))
            .collect();
        let _ = writeln!(out, "    finish reasons: {}", r.join(", "));
    }
}

pub fn text(d: &Diagnosis) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "vllm-twin doctor: {}", d.source);
    let _ = writeln!(out, "vLLM version: {}", d.version.describe());
    let _ = writeln!(
        out,
        "status: {} (exit {})\n",
        d.status.to_uppercase(),
        d.exit_code
    );
    if d.findings.is_empty() {
        let _ = writeln!(out, "No findings: nothing in the playbook fires.\n");
    }
    plan_text(d, &mut out);
    for f in &d.findings {
        finding_text(f, &mut out);
    }
    for b in &d.bottlenecks {
        let _ = writeln!(
            out,
            "Bottleneck ({}): {}{} [decided by {}]",
            b.instance,
            b.class.name(),
            b.regime
                .as_ref()
                .map(|r| format!(", {r}"))
                .unwrap_or_default(),
            b.decided_by
        );
        for e in &b.evidence {
            let _ = writeln!(out, "  - {e}");
        }
    }
    out.push('\n');
    for s in &d.panels {
        panels_text(s, &mut out);
        out.push('\n');
    }
    for v in &d.verify {
        let _ = writeln!(
            out,
            "Twin fit ({}): vllm-twin simulate {}",
            v.instance,
            v.simulate_args.join(" ")
        );
        for (k, (o, t)) in &v.fit {
            let _ = writeln!(
                out,
                "  {k}: observed {} twin {}",
                o.map(value).unwrap_or_else(|| "-".into()),
                value(*t)
            );
        }
        for n in &v.notes {
            let _ = writeln!(out, "  note: {n}");
        }
    }
    for n in &d.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

pub fn markdown(d: &Diagnosis) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "## vllm-twin doctor: {}\n", d.status.to_uppercase());
    let _ = writeln!(
        out,
        "- source: `{}`\n- vLLM version: {}\n",
        d.source,
        d.version.describe()
    );
    if !d.plan.is_empty() {
        let _ = writeln!(out, "### Plan (do this first)\n");
        for s in &d.plan {
            let _ = writeln!(
                out,
                "{}. **{}** {} (`{}`; {})",
                s.order,
                s.severity.name(),
                s.cause,
                s.findings.join("`, `"),
                s.instance
            );
            for r in &s.actions {
                let _ = writeln!(out, "   - `{}` — {}", r.action, effect(r));
            }
        }
        out.push('\n');
    }
    for f in &d.findings {
        let _ = writeln!(out, "### {} {} (`{}`)\n", f.severity.name(), f.title, f.id);
        let _ = writeln!(out, "{}\n", f.cause);
        let _ = writeln!(out, "| metric | value | threshold |\n|---|---|---|");
        for e in &f.evidence {
            let _ = writeln!(
                out,
                "| `{}` | {} | {} |",
                e.metric,
                value(e.value),
                e.threshold
            );
        }
        out.push('\n');
        if !f.could_not_see.is_empty() {
            let _ = writeln!(out, "Could not see: {}\n", f.could_not_see.join("; "));
        }
        if let Some(r) = f.reproduced {
            let _ = writeln!(
                out,
                "Twin reproduces the symptom: **{}**\n",
                if r { "yes" } else { "no" }
            );
        }
        for (label, list) in [
            ("Recommended", &f.recommendations),
            ("Predicted not to help", &f.rejected),
        ] {
            if list.is_empty() {
                continue;
            }
            let _ = writeln!(out, "**{label}:**\n");
            for r in list {
                let _ = writeln!(
                    out,
                    "- `{}`{}",
                    r.action,
                    r.caveat
                        .as_ref()
                        .map(|c| format!(" — {c}"))
                        .unwrap_or_default()
                );
                if let Some(v) = &r.verify {
                    let p: Vec<String> = v
                        .predicted
                        .iter()
                        .map(|(k, (b, a))| format!("{k} {} → {}", value(*b), value(*a)))
                        .collect();
                    let _ = writeln!(
                        out,
                        "  - twin: {}{}",
                        v.outcome,
                        if p.is_empty() {
                            String::new()
                        } else {
                            format!(": {}", p.join("; "))
                        }
                    );
                }
            }
            out.push('\n');
        }
    }
    for b in &d.bottlenecks {
        let _ = writeln!(
            out,
            "**Bottleneck ({})**: {} — {}\n",
            b.instance,
            b.class.name(),
            b.evidence.join("; ")
        );
    }
    let _ = writeln!(out, "<details><summary>Panels</summary>\n\n```");
    for s in &d.panels {
        panels_text(s, &mut out);
    }
    let _ = writeln!(out, "```\n</details>");
    out
}

pub fn json(d: &Diagnosis) -> String {
    serde_json::to_string_pretty(d).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}
