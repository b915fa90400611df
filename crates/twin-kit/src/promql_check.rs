//! Parses every PromQL expression of the kit (promql-parser, after substituting Grafana's
//! and prometheus-adapter's template macros) and checks that each selector names a series
//! vLLM 0.34 / dcgm-exporter exports (or a recording rule of the kit) and filters only on
//! labels that series carries.

use std::collections::BTreeSet;

use promql_parser::label::{MatchOp, Matcher};
use promql_parser::parser::{self, Expr, VectorSelector};
use serde_norway::Value as Yaml;

use crate::families::{all_families, lookup_series, Series, TARGET_LABELS};
use crate::{paths, KitFile, KitOptions};

/// A selector found in an expression: the series name (if any) and its matchers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectorRef {
    /// The metric name, from the selector or an `__name__="..."` matcher.
    pub name: Option<String>,
    /// `__name__=~` regex, when the name is chosen by regex, with the known series names
    /// (both spellings) it matches.
    pub name_regex: Option<(String, Vec<String>)>,
    /// Label names matched on (excluding `__name__`).
    pub labels: Vec<String>,
}

/// Replaces Grafana's macros and template variables so the expression parses:
/// `$__rate_interval`/`$__interval`/`$__range` (and `${...}` forms) become durations, any
/// other `$var` becomes `x` (it only ever appears inside label-value strings).
pub fn substitute_grafana(expr: &str) -> String {
    let mut out = String::with_capacity(expr.len());
    let chars: Vec<char> = expr.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '$' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let braced = chars.get(i + 1) == Some(&'{');
        let start = if braced { i + 2 } else { i + 1 };
        let mut end = start;
        while end < chars.len() && (chars[end].is_ascii_alphanumeric() || chars[end] == '_') {
            end += 1;
        }
        if end == start {
            out.push('$');
            i += 1;
            continue;
        }
        let name: String = chars[start..end].iter().collect();
        let mut next = end;
        if braced {
            // ${var} or ${var:format}
            while next < chars.len() && chars[next] != '}' {
                next += 1;
            }
            next += 1;
        }
        out.push_str(match name.as_str() {
            "__rate_interval" | "__interval" | "__rate_interval_ms" => "5m",
            "__range" => "1h",
            _ => "x",
        });
        i = next;
    }
    out
}

/// Replaces prometheus-adapter's Go-template fields for parsing: `<<.Series>>` with
/// `series`, `<<.LabelMatchers>>` with a namespace/pod matcher, `<<.GroupBy>>` with `pod`.
pub fn substitute_adapter(expr: &str, series: &str) -> String {
    expr.replace("<<.Series>>", series)
        .replace(
            "<<.LabelMatchers>>",
            "namespace=\"default\",pod=~\"vllm-.*\"",
        )
        .replace("<<.GroupBy>>", "pod")
}

fn collect(expr: &Expr, out: &mut Vec<SelectorRef>) {
    match expr {
        Expr::Aggregate(a) => {
            collect(&a.expr, out);
            if let Some(p) = &a.param {
                collect(p, out);
            }
        }
        Expr::Unary(u) => collect(&u.expr, out),
        Expr::Binary(b) => {
            collect(&b.lhs, out);
            collect(&b.rhs, out);
        }
        Expr::Paren(p) => collect(&p.expr, out),
        Expr::Subquery(s) => collect(&s.expr, out),
        Expr::VectorSelector(vs) => out.push(selector_ref(vs)),
        Expr::MatrixSelector(ms) => out.push(selector_ref(&ms.vs)),
        Expr::Call(c) => {
            for a in &c.args.args {
                collect(a, out);
            }
        }
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
    }
}

fn selector_ref(vs: &VectorSelector) -> SelectorRef {
    let mut name = vs.name.clone();
    let mut name_regex = None;
    let mut labels = Vec::new();
    let all: Vec<&Matcher> = vs
        .matchers
        .matchers
        .iter()
        .chain(vs.matchers.or_matchers.iter().flatten())
        .collect();
    for m in all {
        if m.name == "__name__" {
            match &m.op {
                MatchOp::Equal => name = Some(m.value.clone()),
                MatchOp::Re(re) => {
                    let matched = known_series_names()
                        .into_iter()
                        .filter(|n| re.is_match(n))
                        .collect();
                    name_regex = Some((m.value.clone(), matched));
                }
                MatchOp::NotEqual | MatchOp::NotRe(_) => {}
            }
        } else {
            labels.push(m.name.clone());
        }
    }
    SelectorRef {
        name,
        name_regex,
        labels,
    }
}

/// Parses `expr` (already substituted) and returns its selectors.
pub fn selectors(expr: &str) -> Result<Vec<SelectorRef>, String> {
    let ast = parser::parse(expr).map_err(|e| format!("does not parse: {e}\n  in: {expr}"))?;
    let mut out = Vec::new();
    collect(&ast, &mut out);
    Ok(out)
}

/// Every exposed series name of the known families, in both spellings.
fn known_series_names() -> Vec<String> {
    let mut names = Vec::new();
    for f in all_families() {
        for (n, _) in f.exposed() {
            if let Some(rest) = n.strip_prefix("vllm:") {
                names.push(format!("vllm_{rest}"));
            }
            names.push(n);
        }
    }
    names
}

/// Checks one (substituted) expression: it parses, every selector names a known series
/// (or one of `recorded`), spelled as `prefer_underscore` asks, and matches only on labels
/// that series has.
pub fn check_expr(
    expr: &str,
    recorded: &BTreeSet<String>,
    prefer_underscore: bool,
) -> Result<Vec<SelectorRef>, String> {
    let sels = selectors(expr)?;
    if sels.is_empty() {
        return Err(format!("references no series: {expr}"));
    }
    for s in &sels {
        if let Some((re, matched)) = &s.name_regex {
            if matched.is_empty() {
                return Err(format!(
                    "__name__=~{re:?} matches no vLLM 0.34 series in: {expr}"
                ));
            }
            continue;
        }
        let Some(name) = &s.name else {
            return Err(format!("selector without a metric name in: {expr}"));
        };
        if recorded.contains(name) {
            continue;
        }
        if prefer_underscore && name.starts_with("vllm:") {
            return Err(format!(
                "{name} uses the colon spelling but prefer_underscore is set: {expr}"
            ));
        }
        if !prefer_underscore && name.starts_with("vllm_") {
            return Err(format!("{name} uses the underscore spelling: {expr}"));
        }
        let Some((family, series)) = lookup_series(name) else {
            return Err(format!(
                "{name} is not a series vLLM 0.34 (or dcgm-exporter) exports, nor a recording rule of the kit: {expr}"
            ));
        };
        for l in &s.labels {
            let ok = family.labels.contains(&l.as_str())
                || TARGET_LABELS.contains(&l.as_str())
                || (l == "le" && series == Series::Bucket);
            if !ok {
                return Err(format!("{name} has no label {l:?}: {expr}"));
            }
        }
    }
    Ok(sels)
}

/// Where an expression came from and the text to parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KitExpr {
    /// The kit file.
    pub file: String,
    /// A short locator (panel title, rule name, ...).
    pub at: String,
    /// The expression as it appears in the file.
    pub raw: String,
    /// The expression with template macros substituted, ready to parse.
    pub promql: String,
}

fn yaml_str<'a>(v: &'a Yaml, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Yaml::as_str)
}

fn yaml_seq<'a>(v: &'a Yaml, key: &str) -> Vec<&'a Yaml> {
    v.get(key)
        .and_then(Yaml::as_sequence)
        .map(|s| s.iter().collect())
        .unwrap_or_default()
}

fn rule_exprs(file: &str, groups: Vec<&Yaml>, out: &mut Vec<KitExpr>) {
    for g in groups {
        for r in yaml_seq(g, "rules") {
            let at = yaml_str(r, "record")
                .or_else(|| yaml_str(r, "alert"))
                .unwrap_or("?")
                .to_string();
            if let Some(e) = yaml_str(r, "expr") {
                out.push(KitExpr {
                    file: file.into(),
                    at,
                    raw: e.into(),
                    promql: e.into(),
                });
            }
        }
    }
}

/// Every PromQL expression in the kit's files (dashboard targets and variable queries,
/// rules, promtool tests' expressions and input series, adapter and KEDA queries).
pub fn kit_expressions(
    files: &[KitFile],
    opts: &KitOptions,
) -> Result<Vec<KitExpr>, (String, String)> {
    let mut out = Vec::new();
    for f in files {
        let err = |e: String| (f.path.clone(), e);
        match f.path.as_str() {
            paths::DASHBOARD => {
                let v: serde_json::Value =
                    serde_json::from_str(&f.contents).map_err(|e| err(e.to_string()))?;
                let empty = Vec::new();
                let panels = v["panels"].as_array().unwrap_or(&empty);
                for p in panels {
                    let title = p["title"].as_str().unwrap_or("?");
                    for t in p["targets"].as_array().unwrap_or(&empty) {
                        if let Some(e) = t["expr"].as_str() {
                            out.push(KitExpr {
                                file: f.path.clone(),
                                at: title.into(),
                                raw: e.into(),
                                promql: substitute_grafana(e),
                            });
                        }
                    }
                }
                for var in v["templating"]["list"].as_array().unwrap_or(&empty) {
                    let Some(q) = var["query"].as_str() else {
                        continue;
                    };
                    if let Some(inner) = q
                        .strip_prefix("label_values(")
                        .and_then(|r| r.strip_suffix(')'))
                    {
                        if let Some((sel, _label)) = inner.rsplit_once(',') {
                            out.push(KitExpr {
                                file: f.path.clone(),
                                at: format!("variable {}", var["name"].as_str().unwrap_or("?")),
                                raw: q.into(),
                                promql: substitute_grafana(sel.trim()),
                            });
                        }
                    }
                }
            }
            paths::RECORDING_RULES | paths::ALERTING_RULES => {
                let v: Yaml =
                    serde_norway::from_str(&f.contents).map_err(|e| err(e.to_string()))?;
                rule_exprs(&f.path, yaml_seq(&v, "groups"), &mut out);
            }
            paths::PROMETHEUS_RULE_CR => {
                let v: Yaml =
                    serde_norway::from_str(&f.contents).map_err(|e| err(e.to_string()))?;
                let groups = v
                    .get("spec")
                    .map(|s| yaml_seq(s, "groups"))
                    .unwrap_or_default();
                rule_exprs(&f.path, groups, &mut out);
            }
            paths::ALERT_TESTS | paths::RECORDING_TESTS => {
                let v: Yaml =
                    serde_norway::from_str(&f.contents).map_err(|e| err(e.to_string()))?;
                for (i, t) in yaml_seq(&v, "tests").into_iter().enumerate() {
                    for s in yaml_seq(t, "input_series") {
                        if let Some(e) = yaml_str(s, "series") {
                            out.push(KitExpr {
                                file: f.path.clone(),
                                at: format!("test {i} input"),
                                raw: e.into(),
                                promql: e.into(),
                            });
                        }
                    }
                    for pt in yaml_seq(t, "promql_expr_test") {
                        if let Some(e) = yaml_str(pt, "expr") {
                            out.push(KitExpr {
                                file: f.path.clone(),
                                at: format!("test {i} expr"),
                                raw: e.into(),
                                promql: e.into(),
                            });
                        }
                    }
                }
            }
            paths::ADAPTER => {
                let v: Yaml =
                    serde_norway::from_str(&f.contents).map_err(|e| err(e.to_string()))?;
                let custom = v
                    .get("rules")
                    .map(|r| yaml_seq(r, "custom"))
                    .unwrap_or_default();
                for r in custom {
                    let as_ = r.get("name").and_then(|n| yaml_str(n, "as")).unwrap_or("?");
                    // The adapter exposes `vllm_x` from `vllm:x` (or `vllm_x`): parse with
                    // the spelling the rest of the kit uses.
                    let series = opts.metric(&as_.replacen("vllm_", "vllm:", 1));
                    if let Some(q) = yaml_str(r, "seriesQuery") {
                        out.push(KitExpr {
                            file: f.path.clone(),
                            at: format!("{as_} seriesQuery"),
                            raw: q.into(),
                            promql: q.into(),
                        });
                    }
                    if let Some(q) = yaml_str(r, "metricsQuery") {
                        out.push(KitExpr {
                            file: f.path.clone(),
                            at: format!("{as_} metricsQuery"),
                            raw: q.into(),
                            promql: substitute_adapter(q, &series),
                        });
                    }
                }
            }
            paths::KEDA => {
                let v: Yaml =
                    serde_norway::from_str(&f.contents).map_err(|e| err(e.to_string()))?;
                let triggers = v
                    .get("spec")
                    .map(|s| yaml_seq(s, "triggers"))
                    .unwrap_or_default();
                for (i, t) in triggers.into_iter().enumerate() {
                    if let Some(q) = t.get("metadata").and_then(|m| yaml_str(m, "query")) {
                        out.push(KitExpr {
                            file: f.path.clone(),
                            at: format!("trigger {i}"),
                            raw: q.into(),
                            promql: q.into(),
                        });
                    }
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// Recording-rule names defined by the kit's recording-rules file.
pub fn recorded_names(files: &[KitFile]) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for f in files.iter().filter(|f| f.path == paths::RECORDING_RULES) {
        if let Ok(v) = serde_norway::from_str::<Yaml>(&f.contents) {
            for g in yaml_seq(&v, "groups") {
                for r in yaml_seq(g, "rules") {
                    if let Some(n) = yaml_str(r, "record") {
                        names.insert(n.to_string());
                    }
                }
            }
        }
    }
    names
}

/// Checks every expression of the kit; the error names the file and the problem.
pub fn check_kit(files: &[KitFile], opts: &KitOptions) -> Result<(), (String, String)> {
    let recorded = recorded_names(files);
    for e in kit_expressions(files, opts)? {
        // The adapter's discovery regex accepts both spellings on purpose.
        let underscore = opts.prefer_underscore;
        check_expr(&e.promql, &recorded, underscore)
            .map_err(|m| (e.file.clone(), format!("{}: {m}", e.at)))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none() -> BTreeSet<String> {
        BTreeSet::new()
    }

    #[test]
    fn grafana_macros_are_substituted() {
        assert_eq!(
            substitute_grafana(r#"rate(x{a=~"$model_name",b=~"${engine}"}[$__rate_interval])"#),
            r#"rate(x{a=~"x",b=~"x"}[5m])"#
        );
        assert_eq!(
            substitute_grafana("increase(x[${__range}])"),
            "increase(x[1h])"
        );
        assert_eq!(
            substitute_grafana(r#"{__name__=~"^a$"}"#),
            r#"{__name__=~"^a$"}"#
        );
    }

    #[test]
    fn accepts_vllm_names_and_rejects_removed_or_misspelled_ones() {
        assert!(check_expr("rate(vllm:num_preemptions_total[5m])", &none(), false).is_ok());
        // The bug in vLLM's and llm-d's published alerts: the family name without _total.
        assert!(check_expr("rate(vllm:num_preemptions[5m])", &none(), false).is_err());
        assert!(check_expr("vllm:gpu_cache_usage_perc", &none(), false).is_err());
        assert!(check_expr("vllm_kv_cache_usage_perc", &none(), false).is_err());
        assert!(check_expr("vllm_kv_cache_usage_perc", &none(), true).is_ok());
        assert!(check_expr(
            "DCGM_FI_PROF_DRAM_ACTIVE{Hostname=\"a\",gpu=\"0\"}",
            &none(),
            false
        )
        .is_ok());
        assert!(check_expr("DCGM_FI_DEV_GPU_UTILIZATION", &none(), false).is_err());
    }

    #[test]
    fn checks_labels_against_the_family() {
        assert!(check_expr(
            r#"vllm:request_success_total{finished_reason="abort"}"#,
            &none(),
            false
        )
        .is_ok());
        assert!(check_expr(
            r#"vllm:generation_tokens_total{finished_reason="abort"}"#,
            &none(),
            false
        )
        .is_err());
        assert!(check_expr(
            r#"vllm:time_to_first_token_seconds_bucket{le="1.0"}"#,
            &none(),
            false
        )
        .is_ok());
        assert!(check_expr(
            r#"vllm:time_to_first_token_seconds_count{le="1.0"}"#,
            &none(),
            false
        )
        .is_err());
        assert!(check_expr(
            r#"vllm:num_requests_running{pod=~"vllm-.*",namespace="x"}"#,
            &none(),
            false
        )
        .is_ok());
    }

    #[test]
    fn adapter_discovery_regex_must_match_a_series() {
        assert!(check_expr(
            r#"{__name__=~"^vllm[:_]num_requests_waiting$",pod!=""}"#,
            &none(),
            false
        )
        .is_ok());
        assert!(check_expr(
            r#"{__name__=~"^vllm[:_]num_requests_swapped$"}"#,
            &none(),
            false
        )
        .is_err());
    }

    #[test]
    fn unparsable_expressions_fail() {
        assert!(check_expr(
            "rate(vllm:num_preemptions_total[$__rate_interval])",
            &none(),
            false
        )
        .is_err());
        assert!(check_expr("sum(", &none(), false).is_err());
    }
}
