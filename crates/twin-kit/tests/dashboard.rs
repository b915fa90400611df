//! The Grafana dashboard is importable JSON with the required variables, layers, seed
//! panels and DCGM panels.

mod common;

use common::option_sets;
use serde_json::Value;
use twin_kit::dashboard::{seed_panels, SCHEMA_VERSION};
use twin_kit::{paths, render_kit, KitOptions};

fn dashboard(opts: &KitOptions) -> Value {
    let files = render_kit(opts).unwrap_or_else(|e| panic!("{e}"));
    let f = files
        .iter()
        .find(|f| f.path == paths::DASHBOARD)
        .unwrap_or_else(|| panic!("no dashboard"));
    serde_json::from_str(&f.contents).unwrap_or_else(|e| panic!("dashboard JSON: {e}"))
}

fn exprs(d: &Value) -> Vec<String> {
    d["panels"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["expr"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn dashboard_is_importable_with_variables() {
    for (name, opts) in option_sets() {
        let d = dashboard(&opts);
        assert_eq!(d["schemaVersion"].as_u64(), Some(u64::from(SCHEMA_VERSION)));
        assert!(d["id"].is_null(), "import needs id null");
        assert_eq!(d["uid"].as_str(), Some(opts.dashboard_uid.as_str()));
        assert!(!d["title"].as_str().unwrap_or("").is_empty());
        let vars: Vec<(&str, &str)> = d["templating"]["list"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|v| {
                (
                    v["name"].as_str().unwrap_or(""),
                    v["type"].as_str().unwrap_or(""),
                )
            })
            .collect();
        for (n, t) in [
            ("datasource", "datasource"),
            ("model_name", "query"),
            ("instance", "query"),
            ("engine", "query"),
        ] {
            assert!(
                vars.contains(&(n, t)),
                "[{name}] variable {n} ({t}) missing: {vars:?}"
            );
        }
        // Every panel with queries uses the datasource variable; ids are unique; the grid is 24 wide.
        let mut ids = std::collections::BTreeSet::new();
        for p in d["panels"].as_array().into_iter().flatten() {
            assert!(
                ids.insert(p["id"].as_u64().unwrap_or(0)),
                "[{name}] duplicate panel id"
            );
            let g = &p["gridPos"];
            let (x, w) = (g["x"].as_u64().unwrap_or(99), g["w"].as_u64().unwrap_or(99));
            assert!(
                x + w <= 24,
                "[{name}] panel {} overflows the grid",
                p["title"]
            );
            if let Some(ts) = p["targets"].as_array() {
                assert_eq!(
                    p["datasource"]["uid"].as_str(),
                    Some("${datasource}"),
                    "[{name}] {}",
                    p["title"]
                );
                for t in ts {
                    assert_eq!(t["datasource"]["uid"].as_str(), Some("${datasource}"));
                    let e = t["expr"].as_str().unwrap_or("");
                    if e.contains("vllm") {
                        assert!(
                            e.contains("model_name=~\"$model_name\"")
                                && e.contains("engine=~\"$engine\""),
                            "[{name}] query ignores the template variables: {e}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn dashboard_has_the_three_layers_and_their_panels() {
    let opts = KitOptions::default();
    let d = dashboard(&opts);
    let panels = d["panels"].as_array().cloned().unwrap_or_default();
    let rows: Vec<&str> = panels
        .iter()
        .filter(|p| p["type"] == "row")
        .filter_map(|p| p["title"].as_str())
        .collect();
    for layer in ["Golden signals", "Engine scheduling", "GPU hardware"] {
        assert!(
            rows.iter().any(|r| r.contains(layer)),
            "no row for {layer}: {rows:?}"
        );
    }
    let all = exprs(&d).join("\n");
    for needle in [
        "histogram_quantile(0.99, sum by (le, model_name) (rate(vllm:time_to_first_token_seconds_bucket",
        "histogram_quantile(0.99, sum by (le, model_name) (rate(vllm:inter_token_latency_seconds_bucket",
        "vllm:e2e_request_latency_seconds_bucket",
        "finished_reason=\"abort\"",
        "finished_reason=\"length\"",
        "finished_reason=\"error\"",
        "vllm:time_to_first_token_seconds_bucket{model_name=~\"$model_name\",instance=~\"$instance\",engine=~\"$engine\",le=\"1.0\"}",
        "vllm:inter_token_latency_seconds_bucket{model_name=~\"$model_name\",instance=~\"$instance\",engine=~\"$engine\",le=\"0.1\"}",
        "vllm:num_requests_waiting_by_reason",
        "vllm:request_prompt_tokens_bucket",
        "vllm:request_generation_tokens_bucket",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
    ] {
        assert!(all.contains(needle), "dashboard lacks {needle}");
    }
    // max-num-seqs threshold line on running vs waiting; KV thresholds.
    let running = panels
        .iter()
        .find(|p| p["title"] == "Running vs waiting")
        .unwrap_or_else(|| panic!("running panel"));
    assert_eq!(
        running["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"],
        "line"
    );
    let steps = running["fieldConfig"]["defaults"]["thresholds"]["steps"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(steps
        .iter()
        .any(|s| s["value"].as_f64() == Some(f64::from(opts.max_num_seqs))));
    // Bottleneck reading notes and the playbooks as text panels.
    let texts: Vec<String> = panels
        .iter()
        .filter(|p| p["type"] == "text")
        .filter_map(|p| p["options"]["content"].as_str().map(str::to_string))
        .collect();
    assert!(texts.iter().any(|t| t.contains("Compute-bound")
        && t.contains("Memory-bandwidth-bound")
        && t.contains("Capacity-bound")));
    assert_eq!(texts.len(), 5, "bottleneck notes + four playbooks");
}

#[test]
fn the_seed_panels_appear_as_written_with_corrections_listed() {
    for (name, opts) in option_sets() {
        let d = dashboard(&opts);
        let all = exprs(&d);
        let seeds = seed_panels(&opts);
        assert_eq!(
            seeds.iter().map(|s| s.number).collect::<Vec<_>>(),
            (1..=8).collect::<Vec<_>>()
        );
        for s in &seeds {
            for (_, q) in &s.queries {
                assert!(
                    all.contains(q),
                    "[{name}] seed panel {} query missing: {q}",
                    s.number
                );
            }
            assert!(!s.correction.is_empty());
        }
        // Seed 1 verbatim apart from the selector.
        let seed1 = seeds[0].queries[0].1.replace(
            "{model_name=~\"$model_name\",instance=~\"$instance\",engine=~\"$engine\"}",
            "",
        );
        assert_eq!(
            seed1,
            opts.metric("histogram_quantile(0.95, sum(rate(vllm:time_to_first_token_seconds_bucket[5m])) by (le, model_name))")
        );
    }
}
