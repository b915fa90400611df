//! A fleet's /metrics as Prometheus holds them: every replica's families, each series
//! labelled with its `pod` and `instance`, merged by family (what a `/federate` scrape or a
//! backfill of every target gives), so the kit's dashboards and the doctor read a simulated
//! fleet as they read a real one.

use twin_metrics::{encode_text, MetricFamily, OpenMetricsTimeline};

use super::ReplicaOutcome;

/// Merge `more` into `into`: a family seen before takes the new series after its own.
pub fn merge_families(into: &mut Vec<MetricFamily>, more: Vec<MetricFamily>) {
    for fam in more {
        match into
            .iter_mut()
            .find(|f| f.name == fam.name && f.kind == fam.kind)
        {
            Some(f) => f.series.extend(fam.series),
            None => into.push(fam),
        }
    }
}

/// Every replica's final /metrics in one exposition (text format 0.0.4).
pub fn fleet_exposition(replicas: &[ReplicaOutcome]) -> String {
    let mut all = Vec::new();
    for r in replicas {
        if let Some(m) = &r.metrics {
            merge_families(&mut all, m.labelled_families());
        }
    }
    encode_text(&all)
}

/// Every replica's scrapes up to `end_s`, as one OpenMetrics file with timestamps (for
/// `promtool tsdb create-blocks-from openmetrics`).
pub fn fleet_scrapes(replicas: &mut [ReplicaOutcome], end_s: f64) -> (String, usize) {
    let mut timeline = OpenMetricsTimeline::new();
    let mut scrapes = 0;
    for r in replicas {
        if let Some(m) = r.metrics.as_mut() {
            m.finish_scrapes(end_s);
            scrapes += m.num_scrapes();
            timeline.merge(m.timeline());
        }
    }
    (timeline.encode(), scrapes)
}
