//! Every vLLM family the kit knows (and so every family its PromQL may reference) is one
//! the twin exports, with the same type and labels.

use std::collections::BTreeMap;

use twin_kit::families::{vllm_families, Kind};
use twin_metrics::{MetricType, MetricsConfig, MetricsRecorder};

#[test]
fn the_kit_references_only_families_the_twin_exports() {
    let config = MetricsConfig {
        kv_cache_metrics: true,
        num_speculative_tokens: Some(3),
        kv_consumer: true,
        compute_nans_in_logits: true,
        watermark: true,
        lora_max_loras: Some(2),
        ..MetricsConfig::default()
    };
    let mut rec = MetricsRecorder::new(config, 1_767_225_600.0);
    rec.log_engine_initialized().expect("first init");
    let twin: BTreeMap<String, (MetricType, Vec<String>)> = rec
        .families()
        .into_iter()
        .map(|f| {
            let labels = f
                .series
                .first()
                .map(|s| s.labels.iter().map(|(k, _)| k.clone()).collect())
                .unwrap_or_default();
            (f.name.clone(), (f.kind, labels))
        })
        .collect();
    for fam in vllm_families() {
        let name = fam
            .name
            .strip_suffix("_total")
            .filter(|_| fam.kind == Kind::Counter)
            .unwrap_or(fam.name);
        let (kind, labels) = twin
            .get(name)
            .unwrap_or_else(|| panic!("kit family {} is not exported by the twin", fam.name));
        let same_kind = matches!(
            (fam.kind, kind),
            (Kind::Gauge, MetricType::Gauge)
                | (Kind::Counter, MetricType::Counter)
                | (Kind::Histogram, MetricType::Histogram)
        );
        assert!(
            same_kind,
            "{}: kit says {:?}, twin exports {:?}",
            fam.name, fam.kind, kind
        );
        for l in fam.labels {
            assert!(
                labels.is_empty() || labels.iter().any(|x| x == l),
                "{}: label {l} not in twin's {labels:?}",
                fam.name
            );
        }
    }
}
