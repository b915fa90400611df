//! The answer: ranked table, winner, `vllm serve` line, Pareto front (SVG), text and JSON.

use std::collections::HashMap;
use std::fmt::Write as _;

use twin_sim::charts::{line_chart_with_thresholds, Series, Threshold};
use twin_sim::run_info::shell_words;
use twin_sim::vllm_flags;

use crate::{
    check_base, rank_key_cmp, score, slo_ms, Best, Evaluation, Objective, Row, ShardResult,
    TuneError, TuneResult, SCHEMA,
};

/// Does the twin flag `--name` take a value (so the next argument is its)?
fn twin_flag_takes_value(name: &str) -> bool {
    twin_sim::engine_args::twin_args("")
        .into_iter()
        .chain(twin_sim::engine_args::fleet_args())
        .find(|a| a.get_long() == Some(name))
        .is_none_or(|a| {
            // Boolean twin flags take `=true` attached, never the next argument.
            a.get_action().takes_values()
                && !a.is_require_equals_set()
                && a.get_num_args().is_none_or(|n| n.min_values() > 0)
        })
}

/// The vLLM part of a `simulate` command line: MODEL and vLLM's flags, without the twin's
/// (`--gpu`, the workload, `--slo-*`).
pub fn vllm_args(args: &[String]) -> Vec<String> {
    vllm_arg_groups(args).into_iter().flatten().collect()
}

/// [`vllm_args`] as one group per argument: MODEL, or a flag with its value.
fn vllm_arg_groups(args: &[String]) -> Vec<Vec<String>> {
    let argv = vllm_flags::normalize_argv(args);
    let t = vllm_flags::table();
    let mut out = Vec::new();
    let mut it = argv.iter().peekable();
    while let Some(a) = it.next() {
        let Some(rest) = a.strip_prefix("--") else {
            out.push(vec![a.clone()]); // MODEL
            continue;
        };
        let (key, inline) = match rest.split_once('=') {
            Some((k, _)) => (k, true),
            None => (rest, false),
        };
        let takes_value = match t.by_option(&format!("--{key}")) {
            Some(f) => {
                let mut group = vec![a.clone()];
                if !f.action.is_bool() && !inline {
                    if let Some(v) = it.next() {
                        group.push(v.clone());
                    }
                }
                out.push(group);
                continue;
            }
            None => twin_flag_takes_value(key),
        };
        if takes_value && !inline {
            it.next();
        }
    }
    out
}

/// `vllm serve MODEL ...` for a candidate: the base line's vLLM part, then its flags.
pub fn vllm_serve_line(model: &str, base_args: &[String], flags: &[String]) -> String {
    let mut words = vec!["vllm".to_string(), "serve".to_string()];
    // A flag the candidate sets replaces the base line's (`--no-X` and `--X` are one flag).
    let key = |group: &[String]| -> Option<String> {
        let flag = group.first()?.strip_prefix("--")?;
        let flag = flag.split_once('=').map_or(flag, |(k, _)| k);
        Some(flag.strip_prefix("no-").unwrap_or(flag).to_string())
    };
    let candidate = vllm_arg_groups(flags);
    let overridden: Vec<String> = candidate.iter().filter_map(|g| key(g)).collect();
    let base: Vec<String> = vllm_arg_groups(base_args)
        .into_iter()
        .filter(|g| key(g).is_none_or(|k| !overridden.contains(&k)))
        .flatten()
        .collect();
    // The model positional (or --model) comes from the base line; name it when it does not.
    let has_model = base.first().is_some_and(|a| !a.starts_with("--"))
        || base
            .iter()
            .any(|a| a == "--model" || a.starts_with("--model="));
    if !has_model {
        words.push(model.to_string());
    }
    words.extend(base);
    // `--replicas` is the twin's: the line is one replica's.
    words.extend(candidate.into_iter().flatten());
    shell_words(&words)
}

/// The `--replicas` a candidate's flags ask for (1: one `vllm serve`).
pub fn replicas_of(flags: &[String]) -> usize {
    flags
        .windows(2)
        .find(|w| w[0] == "--replicas")
        .and_then(|w| w[1].parse().ok())
        .unwrap_or(1)
}

fn row_for(
    objective: Objective,
    rung: usize,
    gpus: usize,
    index: usize,
    flags: &[String],
    e: &Evaluation,
) -> Row {
    let rate = e.max_requests_per_s;
    // Screening rungs measure the rate only; their rows show no goodput or tokens.
    let goodput = rate
        .and(e.at_max.as_ref())
        .map(|a| a.goodput_requests_per_s);
    Row {
        rank: 0,
        index,
        flags: flags.to_vec(),
        gpus,
        rung,
        num_requests: e.num_requests,
        score: score(objective, gpus, e),
        max_requests_per_s: rate,
        goodput_requests_per_s: goodput,
        output_tokens_per_s_per_gpu: e
            .at_max
            .as_ref()
            .filter(|_| rate.is_some())
            .map(|a| a.output_tokens_per_s / gpus.max(1) as f64),
        gpus_per_request_per_s: goodput.filter(|g| *g > 0.0).map(|g| gpus as f64 / g),
        ttft_p95_s: e.at_max.as_ref().map(|a| a.ttft_p95_s).or(e.ttft_p95_s),
        tpot_p95_s: e.at_max.as_ref().map(|a| a.tpot_p95_s).or(e.tpot_p95_s),
        best_goodput_share: e.best_goodput_share,
        equivalent: vec![],
    }
}

/// Finalists first, then by the rung each stopped at (later first); within one, by score.
pub(crate) fn build_result(
    shard: &ShardResult,
    finals: &[(usize, Evaluation)],
) -> Result<TuneResult, TuneError> {
    let spec = &shard.spec;
    let base = check_base(&spec.base_args)?;
    let final_rung = shard.rung_requests.len() - 1;
    let mut latest: HashMap<usize, (usize, &Evaluation)> = HashMap::new();
    for (r, evals) in shard.screening.iter().enumerate() {
        for (i, e) in evals {
            latest.insert(*i, (r, e));
        }
    }
    for (i, e) in finals {
        latest.insert(*i, (final_rung, e));
    }
    let mut rows = Vec::new();
    let mut failed = Vec::new();
    for c in &shard.candidates {
        if c.pruned.is_some() || c.same_as.is_some() {
            continue;
        }
        let Some((rung, e)) = latest.get(&c.index) else {
            continue;
        };
        if let Some(err) = &e.error {
            failed.push((c.index, err.clone()));
            continue;
        }
        let mut row = row_for(spec.objective, *rung, c.gpus, c.index, &c.flags, e);
        row.equivalent = shard
            .candidates
            .iter()
            .filter(|o| o.same_as == Some(c.index))
            .map(|o| o.index)
            .collect();
        rows.push(row);
    }
    rows.sort_by(|a, b| {
        b.rung.cmp(&a.rung).then(rank_key_cmp(
            (a.score, a.best_goodput_share, a.index),
            (b.score, b.best_goodput_share, b.index),
        ))
    });
    for (k, r) in rows.iter_mut().enumerate() {
        r.rank = k + 1;
    }
    let reachable = rows.iter().any(|r| r.score.is_some());
    let default_score = rows
        .iter()
        .find(|r| r.index == 0 && r.rung == final_rung)
        .and_then(|r| r.score);
    let router = base
        .fleet
        .as_ref()
        .map_or(twin_sim::fleet::RouterKind::RoundRobin, |f| f.router.kind);
    let best = rows.first().filter(|r| r.score.is_some()).map(|r| {
        let replicas = replicas_of(&r.flags);
        Best {
            index: r.index,
            flags: r.flags.clone(),
            vllm_serve: vllm_serve_line(&base.model_name, &spec.base_args, &r.flags),
            replicas,
            router: (replicas > 1).then(|| router.name().to_string()),
            score: r.score.unwrap_or(0.0),
            default_score,
        }
    });
    Ok(TuneResult {
        schema: SCHEMA.into(),
        model: base.model_name.clone(),
        gpu: base.gpu_name.clone(),
        gpus: spec.gpus,
        objective: spec.objective,
        slo: slo_ms(&base.slo),
        axes: spec.axes.clone(),
        rung_requests: shard.rung_requests.clone(),
        num_candidates: shard.candidates.len(),
        reachable,
        best,
        table: rows,
        pruned: shard
            .candidates
            .iter()
            .filter(|c| c.pruned.is_some())
            .cloned()
            .collect(),
        failed,
    })
}

fn opt(x: Option<f64>, scale: f64, decimals: usize) -> String {
    x.map_or("-".into(), |v| format!("{:.*}", decimals, v * scale))
}

fn flags_text(flags: &[String]) -> String {
    if flags.is_empty() {
        "(vLLM defaults)".into()
    } else {
        shell_words(flags)
    }
}

impl TuneResult {
    /// Rows on the Pareto front of output tokens/s per GPU (up) against p95 TTFT (down), by TTFT.
    pub fn pareto_front(&self) -> Vec<&Row> {
        let pts: Vec<(&Row, f64, f64)> = self
            .table
            .iter()
            .filter_map(|r| Some((r, r.ttft_p95_s?, r.output_tokens_per_s_per_gpu?)))
            .collect();
        let mut front: Vec<&Row> = pts
            .iter()
            .filter(|(_, t, y)| {
                !pts.iter()
                    .any(|(_, t2, y2)| t2 <= t && y2 >= y && (t2 < t || y2 > y))
            })
            .map(|(r, _, _)| *r)
            .collect();
        front.sort_by(|a, b| {
            a.ttft_p95_s
                .unwrap_or(0.0)
                .total_cmp(&b.ttft_p95_s.unwrap_or(0.0))
                .then(a.index.cmp(&b.index))
        });
        front
    }

    /// The Pareto front as an SVG line chart, with the TTFT SLO as a vertical line.
    pub fn pareto_svg(&self) -> String {
        let front: Vec<(f64, f64)> = self
            .pareto_front()
            .iter()
            .filter_map(|r| Some((r.ttft_p95_s? * 1e3, r.output_tokens_per_s_per_gpu?)))
            .collect();
        let thresholds: Vec<Threshold> = self
            .slo
            .ttft_ms
            .map(|v| Threshold {
                value: v,
                label: format!("TTFT SLO {v} ms"),
                on_x: true,
                color: "#d62728",
            })
            .into_iter()
            .collect();
        line_chart_with_thresholds(
            &format!(
                "Pareto front: {} configs at their max sustainable rate",
                self.table.iter().filter(|r| r.at_max_known()).count()
            ),
            "p95 TTFT (ms)",
            "output tokens/s per GPU",
            &[Series {
                label: "Pareto front",
                points: front,
            }],
            None,
            &thresholds,
        )
    }

    /// The ranked table (top `limit`), the winner and its `vllm serve` line, as text.
    pub fn render_text(&self, limit: usize) -> String {
        let mut s = String::new();
        let slo: Vec<String> = [
            ("TTFT", self.slo.ttft_ms),
            ("TPOT", self.slo.tpot_ms),
            ("E2E", self.slo.e2e_ms),
        ]
        .iter()
        .filter_map(|(k, v)| v.map(|v| format!("{k} p95 ≤ {v} ms")))
        .collect();
        let _ = writeln!(
            s,
            "== vllm-twin tune: {} on {} × {} ==\nobjective: {}; SLOs: {}; {} configs ({} pruned \
             at start-up); requests per rung: {:?}",
            self.model,
            self.gpus,
            self.gpu,
            self.objective.name(),
            if slo.is_empty() {
                "none (a rate counts when the queue stops growing)".into()
            } else {
                slo.join(", ")
            },
            self.num_candidates,
            self.pruned.len(),
            self.rung_requests,
        );
        let _ = writeln!(
            s,
            "\n{:>4} {:>10} {:>10} {:>12} {:>10} {:>10} {:>10} {:>8}  flags",
            "rank",
            "max req/s",
            "goodput",
            "out tok/s/GPU",
            "GPU/(r/s)",
            "TTFT p95",
            "TPOT p95",
            "requests"
        );
        for r in self.table.iter().take(limit) {
            let _ = writeln!(
                s,
                "{:>4} {:>10} {:>10} {:>13} {:>10} {:>10} {:>10} {:>8}  {}",
                r.rank,
                opt(r.max_requests_per_s, 1.0, 2),
                opt(r.goodput_requests_per_s, 1.0, 2),
                opt(r.output_tokens_per_s_per_gpu, 1.0, 0),
                opt(r.gpus_per_request_per_s, 1.0, 3),
                opt(r.ttft_p95_s, 1e3, 0),
                opt(r.tpot_p95_s, 1e3, 1),
                r.num_requests,
                flags_text(&r.flags),
            );
        }
        if self.table.len() > limit {
            let _ = writeln!(s, "  … {} more (--json for all)", self.table.len() - limit);
        }
        for c in self.pruned.iter().take(5) {
            let _ = writeln!(
                s,
                "pruned: {}: {}",
                flags_text(&c.flags),
                c.pruned.as_deref().unwrap_or("")
            );
        }
        if self.pruned.len() > 5 {
            let _ = writeln!(s, "pruned: … {} more", self.pruned.len() - 5);
        }
        for (i, why) in &self.failed {
            let _ = writeln!(s, "failed: config #{i}: {why}");
        }
        let _ = writeln!(s);
        match &self.best {
            Some(b) => {
                let _ = writeln!(
                    s,
                    "best ({}): {}{}",
                    self.objective.name(),
                    flags_text(&b.flags),
                    match b.default_score {
                        Some(d) if b.index != 0 => format!(
                            " — {} vs {} for vLLM's defaults",
                            fmt_score(self.objective, b.score),
                            fmt_score(self.objective, d)
                        ),
                        _ => String::new(),
                    }
                );
                if let Some(router) = &b.router {
                    let _ = writeln!(
                        s,
                        "{} replicas behind a {router} router, each started with:",
                        b.replicas
                    );
                }
                let _ = writeln!(s, "{}", b.vllm_serve);
            }
            None => {
                let _ = writeln!(
                    s,
                    "No configuration sustains any rate tried with 95% of requests meeting the \
                     SLOs: they are out of reach on {} × {} for this workload. Closest (best \
                     share of requests meeting them):",
                    self.gpus, self.gpu
                );
                let mut closest: Vec<&Row> = self.table.iter().collect();
                closest.sort_by(|a, b| {
                    b.best_goodput_share
                        .total_cmp(&a.best_goodput_share)
                        .then(a.index.cmp(&b.index))
                });
                for r in closest.iter().take(3) {
                    let _ = writeln!(
                        s,
                        "  {:.1}% met the SLOs (TTFT p95 {} ms, TPOT p95 {} ms): {}",
                        r.best_goodput_share * 100.0,
                        opt(r.ttft_p95_s, 1e3, 0),
                        opt(r.tpot_p95_s, 1e3, 1),
                        flags_text(&r.flags)
                    );
                }
            }
        }
        s
    }
}

fn fmt_score(objective: Objective, v: f64) -> String {
    match objective {
        Objective::Goodput => format!("{v:.2} req/s goodput"),
        Objective::Cost => format!("{:.3} GPUs per req/s", -v),
        Objective::TokensPerGpu => format!("{v:.0} output tokens/s per GPU"),
    }
}

impl Row {
    fn at_max_known(&self) -> bool {
        self.output_tokens_per_s_per_gpu.is_some() && self.ttft_p95_s.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn a_candidates_flag_replaces_the_base_lines() {
        let base = v(&[
            "deepseek-ai/DeepSeek-V3",
            "--gpu",
            "h200",
            "-tp",
            "8",
            "--max-model-len",
            "8192",
            "--no-enable-prefix-caching",
        ]);
        let line = vllm_serve_line(
            "deepseek-ai/DeepSeek-V3",
            &base,
            &v(&[
                "--tensor-parallel-size",
                "1",
                "--data-parallel-size",
                "8",
                "--enable-prefix-caching",
            ]),
        );
        assert_eq!(
            line,
            "vllm serve deepseek-ai/DeepSeek-V3 --max-model-len 8192 --tensor-parallel-size 1 \
             --data-parallel-size 8 --enable-prefix-caching"
        );
    }

    #[test]
    fn vllm_args_keep_model_and_vllm_flags_and_drop_the_twins() {
        let args = v(&[
            "llama-3.1-8b",
            "--gpu",
            "h100-sxm",
            "--workload",
            "chat",
            "--max-model-len",
            "8192",
            "--slo-ttft-ms=500",
            "--enforce-eager",
            "--constant-arrivals",
            "--seed",
            "3",
        ]);
        assert_eq!(
            vllm_args(&args),
            v(&[
                "llama-3.1-8b",
                "--max-model-len",
                "8192",
                "--enforce-eager",
                "--seed",
                "3"
            ])
        );
    }
}
