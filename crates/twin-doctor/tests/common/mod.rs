//! Shared test helpers: twin scenarios as scrape files, and the doctor run on them.
#![allow(dead_code)]

use std::path::PathBuf;

use twin_doctor::Diagnosis;
use twin_sim::engine_args::parse_simulate_args;
use twin_sim::metrics_bridge::MetricsObserver;
use twin_sim::observe::Tee;
use twin_sim::{ReportBuilder, Slo};

/// Run `vllm-twin simulate ARGS --scrape-interval 15s --scrapes-out F` through the library
/// and return F (OpenMetrics with timestamps, several scrapes in one file).
pub fn scenario(name: &str, args: &str) -> PathBuf {
    let argv: Vec<String> = args.split_whitespace().map(str::to_string).collect();
    let a = parse_simulate_args(&argv, &|p| Err(format!("no files ({p})"))).expect("simulate args");
    let startup = twin_sim::startup(&a.config).expect("startup");
    let mut m = MetricsObserver::new(
        &startup,
        &a.served_model_name,
        a.config.data_parallel_size,
        false,
        Some(15.0),
    );
    let mut b = ReportBuilder::new(Slo::default());
    {
        let mut tee = Tee(vec![&mut b, &mut m]);
        twin_sim::run(&a.config, &startup, &mut tee).expect("run");
    }
    let r = b.finish();
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("doctor-{name}.om"));
    std::fs::write(&path, m.scrapes_openmetrics(r.duration_s)).expect("write scrapes");
    path
}

pub fn doctor(args: &[&str]) -> Diagnosis {
    let argv: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    twin_doctor::cli::diagnose_args(&argv)
        .unwrap_or_else(|e| panic!("doctor {args:?}: {e}"))
        .expect("not --help")
}

/// Ids of the findings at warning or worse.
pub fn named(d: &Diagnosis) -> Vec<&'static str> {
    d.findings
        .iter()
        .filter(|f| f.severity >= twin_doctor::Severity::Warning)
        .map(|f| f.id)
        .collect()
}

pub fn finding<'a>(d: &'a Diagnosis, id: &str) -> &'a twin_doctor::Finding {
    d.findings.iter().find(|f| f.id == id).unwrap_or_else(|| {
        panic!(
            "no finding {id}; got {:?}",
            d.findings.iter().map(|f| f.id).collect::<Vec<_>>()
        )
    })
}

/// The verdict of the recommendation whose action starts with `action`, wherever it went.
pub fn verdict(f: &twin_doctor::Finding, action: &str) -> String {
    f.recommendations
        .iter()
        .chain(&f.rejected)
        .find(|r| r.action.starts_with(action))
        .and_then(|r| r.verify.as_ref())
        .map(|v| v.outcome.clone())
        .unwrap_or_else(|| panic!("no verified recommendation {action:?} in {}", f.id))
}

pub fn fixture(name: &str) -> String {
    format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// The findings the plan's first step addresses; also checks that the plan names each
/// flag (or action) once per instance.
pub fn plan_first(d: &Diagnosis) -> Vec<&'static str> {
    let mut seen = std::collections::BTreeSet::new();
    for s in &d.plan {
        for r in &s.actions {
            let key = r.flag.clone().unwrap_or_else(|| r.action.clone());
            assert!(
                seen.insert((s.instance.clone(), key.clone())),
                "{key} twice in the plan"
            );
        }
    }
    d.plan
        .first()
        .map(|s| s.findings.clone())
        .unwrap_or_default()
}
