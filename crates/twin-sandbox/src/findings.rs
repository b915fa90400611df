//! Live findings for the current state of a run, from two sources:
//!
//! - **Alerts** ([`alerts`]): the seed article's alert lines, evaluated on the points as a
//!   dashboard would (KV > 0.85 warning, > 0.98 critical, any preemption in the last minute
//!   critical). They say *what* is wrong, at once.
//! - **The doctor** ([`LiveDoctor`]): `twin-doctor`'s own analysis (panels → bottleneck →
//!   playbook → recommendations) of the twin's `/metrics`, scraped every
//!   [`DOCTOR_INTERVAL_S`] over a trailing [`DOCTOR_WINDOW_S`], i.e. what
//!   `vllm-twin doctor URL --window 60s --interval 5s` would report if pointed at this
//!   engine now. It says *why*, names the playbook branch and what to change. Nothing of
//!   the doctor is re-implemented here: the sandbox only builds its input (the scrape
//!   twin-metrics' parser would read from the exposition text, built straight from the
//!   recorder by `MetricsRecorder::scrape`) and converts its answer for the page.

use serde::Serialize;
use twin_doctor::bottleneck::Class;
use twin_doctor::sources::{normalize, Instance, Observation, Snapshot};
use twin_metrics::MetricsRecorder;

use crate::series::Point;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

impl From<twin_doctor::Severity> for Severity {
    fn from(s: twin_doctor::Severity) -> Self {
        match s {
            twin_doctor::Severity::Info => Severity::Info,
            twin_doctor::Severity::Warning => Severity::Warning,
            twin_doctor::Severity::Critical => Severity::Critical,
        }
    }
}

/// One finding, as the page shows it (a banner).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Finding {
    /// Stable id (tests and the page key on it): an alert (`kv_warning`, `kv_critical`,
    /// `preemptions`), a doctor playbook branch (`kv-preemption`, docs/doctor.md lists them)
    /// or the doctor's bottleneck (`bottleneck-capacity`, `-compute`, `-memory-bandwidth`).
    pub id: &'static str,
    /// `alert` (the seed's thresholds) or `doctor`.
    pub source: &'static str,
    /// The doctor's playbook scenario (`1` … `4`, `extra`); empty for alerts and the
    /// bottleneck.
    pub scenario: &'static str,
    pub severity: Severity,
    pub title: String,
    pub detail: String,
    /// Metric values against their thresholds, as the doctor tested them.
    pub evidence: Vec<String>,
    /// What to change: vLLM flags (the doctor's, version-checked for 0.34) or actions.
    pub advice: Vec<String>,
}

/// The seed's alert lines (section 五).
#[derive(Clone, Debug, Serialize)]
pub struct Thresholds {
    pub kv_warning: f64,
    pub kv_critical: f64,
    /// `rate(vllm:num_preemptions_total[1m])` must be 0.
    pub preempt_window_s: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            kv_warning: 0.85,
            kv_critical: 0.98,
            preempt_window_s: 60.0,
        }
    }
}

fn pct(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

/// The seed's alerts for the latest point (`recent` oldest first, one point per second).
pub fn alerts(recent: &[Point], th: &Thresholds) -> Vec<Finding> {
    let Some(now) = recent.last() else {
        return Vec::new();
    };
    let alert = |id, severity, title: String, detail: &str| Finding {
        id,
        source: "alert",
        scenario: "",
        severity,
        title,
        detail: detail.to_string(),
        evidence: Vec::new(),
        advice: Vec::new(),
    };
    let mut out = Vec::new();
    if now.kv > th.kv_critical {
        out.push(alert(
            "kv_critical",
            Severity::Critical,
            format!("KV cache {} full (> {})", pct(now.kv), pct(th.kv_critical)),
            "vllm:kv_cache_usage_perc is at the preemption edge: running requests that grow \
             will evict others.",
        ));
    } else if now.kv > th.kv_warning {
        out.push(alert(
            "kv_warning",
            Severity::Warning,
            format!("KV cache {} full (> {})", pct(now.kv), pct(th.kv_warning)),
            "vllm:kv_cache_usage_perc above the monitoring guide's warning line; at 0.98+ preemptions \
             follow.",
        ));
    }
    let win = (th.preempt_window_s.round() as usize).max(1);
    let tail = &recent[recent.len().saturating_sub(win)..];
    let rate = tail.iter().map(|p| p.preempt).sum::<f64>() / tail.len() as f64;
    if rate > 0.0 {
        out.push(alert(
            "preemptions",
            Severity::Critical,
            format!("Preemptions: rate(vllm:num_preemptions_total[1m]) = {rate:.2}/s (must be 0)"),
            "The scheduler evicts running requests and recomputes them. The doctor's finding \
             says why and what to change.",
        ));
    }
    out
}

/// How often the doctor scrapes the twin, and over how long: `vllm-twin doctor URL`'s
/// defaults (`--interval 5s --window 60s`).
pub const DOCTOR_INTERVAL_S: f64 = 15.0;
pub const DOCTOR_WINDOW_S: f64 = 60.0;

/// When the doctor scrapes: on the [`DOCTOR_INTERVAL_S`] grid after the baseline at 0, at
/// the first point at or past each grid time (a late point takes the scrape, and grid times
/// it skipped are not made up).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScrapeClock {
    next_s: f64,
}

impl Default for ScrapeClock {
    fn default() -> Self {
        ScrapeClock {
            next_s: DOCTOR_INTERVAL_S,
        }
    }
}

impl ScrapeClock {
    /// The next grid time a scrape waits for.
    pub fn next_s(&self) -> f64 {
        self.next_s
    }

    /// Whether a point ending at `t_s` takes a scrape; if it does, the clock moves to the
    /// first grid time after `t_s`.
    pub fn due(&mut self, t_s: f64) -> bool {
        if t_s + 1e-9 < self.next_s {
            return false;
        }
        while self.next_s <= t_s + 1e-9 {
            self.next_s += DOCTOR_INTERVAL_S;
        }
        true
    }
}

/// The doctor watching the run: scrapes of the twin's recorder over a trailing window,
/// analysed by `twin_doctor::analyze` after each scrape. [`Self::at`] does both on the
/// caller's thread when the [`ScrapeClock`] says so; `runs::run` instead keeps the clock on
/// the simulation's thread and hands each due recorder state to [`Self::diagnose`] on a
/// second thread.
pub struct LiveDoctor {
    obs: Observation,
    opts: twin_doctor::Options,
    clock: ScrapeClock,
    current: Vec<Finding>,
    /// How a scrape is read: [`MetricsRecorder::scrape`]; tests swap in the text path
    /// (`parse(encode_text())`) to show both give the doctor the same input.
    read: fn(&MetricsRecorder) -> twin_metrics::parser::Scrape,
}

impl LiveDoctor {
    /// `serve_args` are the `vllm serve` flags the engine runs with (the doctor's
    /// `--serve-args`), `max_model_len` what `/v1/models` would say.
    pub fn new(serve_args: &[String], max_model_len: u64) -> Self {
        let (argv, mut known) = twin_doctor::verify::parse_serve_args(&serve_args.join(" "));
        known.max_model_len = Some(max_model_len);
        let opts = twin_doctor::Options {
            // The twin is vLLM 0.34: the doctor offers 0.34's flags, as `/version` would
            // tell it.
            vllm_version: Some("0.34.0".into()),
            serve_args: argv,
            known,
            ..Default::default()
        };
        LiveDoctor {
            obs: Observation {
                source: "vllm-twin sandbox".into(),
                instances: vec![Instance {
                    name: "twin".into(),
                    snapshots: Vec::new(),
                }],
                ..Default::default()
            },
            opts,
            clock: ScrapeClock::default(),
            current: Vec::new(),
            read: MetricsRecorder::scrape,
        }
    }

    /// The doctor's findings as of its latest diagnosis.
    pub fn findings(&self) -> &[Finding] {
        &self.current
    }

    /// The first scrape, as the engine starts (`recorder` has seen no event yet): the
    /// window's baseline, so the first diagnosis at [`DOCTOR_INTERVAL_S`] has rates, not
    /// since-start averages of a second of traffic.
    pub fn start(&mut self, recorder: &MetricsRecorder) {
        self.scrape(0.0, recorder);
        self.clock = ScrapeClock::default();
    }

    /// Virtual time `t_s` has come and `recorder` holds everything before it: scrape and
    /// re-diagnose if the clock says a scrape is due.
    pub fn at(&mut self, t_s: f64, recorder: &MetricsRecorder) {
        if self.clock.due(t_s) {
            self.diagnose(t_s, recorder);
        }
    }

    /// Scrape `recorder` as of virtual time `t_s` and diagnose the window, whether or not
    /// a scrape is due (whoever calls it keeps the [`ScrapeClock`]).
    pub fn diagnose(&mut self, t_s: f64, recorder: &MetricsRecorder) {
        self.scrape(t_s, recorder);
        let d = twin_doctor::analyze(&self.obs, &self.opts);
        self.current = convert(&d);
    }

    fn scrape(&mut self, t_s: f64, recorder: &MetricsRecorder) {
        // Exactly what parsing a scrape of the twin's /metrics gives, without the text
        // (`MetricsRecorder::scrape`, tested equal to `parse(encode_text())`), normalised
        // as the doctor normalises a live scrape.
        let scrape = (self.read)(recorder);
        let snaps = &mut self.obs.instances[0].snapshots;
        snaps.push(Snapshot {
            t_s,
            scrape: normalize(scrape),
        });
        let keep_from = t_s - DOCTOR_WINDOW_S - 1e-9;
        let drop = snaps.iter().take_while(|s| s.t_s < keep_from).count();
        snaps.drain(..drop);
    }
}

fn number(v: f64) -> String {
    if v == 0.0 || (0.01..1e4).contains(&v.abs()) {
        format!("{:.3}", v)
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    } else {
        format!("{v:.3e}")
    }
}

/// The doctor's answer as the page's findings: each playbook finding with its evidence and
/// recommendations, and the bottleneck when it names one.
fn convert(d: &twin_doctor::Diagnosis) -> Vec<Finding> {
    let mut out: Vec<Finding> = d
        .findings
        .iter()
        .map(|f| Finding {
            id: f.id,
            source: "doctor",
            scenario: f.scenario,
            severity: f.severity.into(),
            title: f.title.clone(),
            detail: f.cause.clone(),
            evidence: f
                .evidence
                .iter()
                .map(|e| {
                    let t = if e.threshold.is_empty() {
                        String::new()
                    } else {
                        format!(" [{}]", e.threshold)
                    };
                    format!("{} = {}{t}", e.metric, number(e.value))
                })
                .collect(),
            advice: f
                .recommendations
                .iter()
                .map(|r| match &r.caveat {
                    Some(c) => format!("{} ({c})", r.action),
                    None => r.action.clone(),
                })
                .collect(),
        })
        .collect();
    for b in &d.bottlenecks {
        let id = match b.class {
            Class::Compute => "bottleneck-compute",
            Class::MemoryBandwidth => "bottleneck-memory-bandwidth",
            Class::Capacity => "bottleneck-capacity",
            Class::None => continue,
        };
        out.push(Finding {
            id,
            source: "doctor",
            scenario: "",
            severity: Severity::Info,
            title: format!("Bottleneck: {}", b.class.name()),
            detail: format!(
                "The doctor's bottleneck table, decided by {} signals.",
                if b.decided_by == "dcgm" {
                    "DCGM"
                } else {
                    "the engine's"
                }
            ),
            evidence: b.evidence.clone(),
            advice: Vec::new(),
        });
    }
    out
}

/// Everything for the latest point: alerts first, then the doctor's findings, most severe
/// first within each.
pub fn merge(alerts: Vec<Finding>, doctor: &[Finding]) -> Vec<Finding> {
    let mut out = alerts;
    out.extend(doctor.iter().cloned());
    // Stable: an alert stays before a doctor finding of the same severity.
    out.sort_by_key(|f| std::cmp::Reverse(f.severity));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A live scrape of the twin's `/metrics`, read as the doctor reads any endpoint.
    fn scrape_via_text(r: &MetricsRecorder) -> twin_metrics::parser::Scrape {
        let (scrape, errors) = twin_metrics::parser::parse_lossy(&r.encode_text());
        assert!(errors.is_empty(), "{errors:?}");
        scrape
    }

    #[test]
    fn direct_scrapes_give_the_doctor_what_parsed_text_gives() {
        let mut named = Vec::new();
        for preset in crate::presets::presets() {
            let crate::runs::Prepare::Ready(prep) =
                crate::runs::prepare(&preset.controls).expect("valid preset")
            else {
                panic!("{} refused", preset.id);
            };
            let new = || LiveDoctor::new(&prep.doctor_serve_args, prep.plan.max_model_len);
            let (mut direct, mut text) = (new(), new());
            text.read = scrape_via_text;
            let metrics = crate::runs::metrics_observer(&prep);
            direct.start(metrics.recorder());
            text.start(metrics.recorder());
            let mut diagnoses = 0;
            let mut on_point = |p: crate::series::Point, rec: &MetricsRecorder| {
                let due = p.t + 1e-9 >= direct.clock.next_s();
                direct.at(p.t, rec);
                text.at(p.t, rec);
                if !due {
                    return;
                }
                diagnoses += 1;
                let (a, b) = (&direct.obs.instances[0], &text.obs.instances[0]);
                assert_eq!(a.snapshots.len(), b.snapshots.len());
                for (x, y) in a.snapshots.iter().zip(&b.snapshots) {
                    assert_eq!(x.t_s, y.t_s);
                    assert_eq!(x.scrape, y.scrape, "{} at {} s", preset.id, p.t);
                }
                // The doctor's whole answer, not only the page's findings.
                let (da, db) = (
                    twin_doctor::analyze(&direct.obs, &direct.opts),
                    twin_doctor::analyze(&text.obs, &text.opts),
                );
                assert_eq!(
                    serde_json::to_string(&da).expect("json"),
                    serde_json::to_string(&db).expect("json"),
                    "{} at {} s",
                    preset.id,
                    p.t
                );
                assert_eq!(direct.findings(), text.findings());
                for f in direct.findings() {
                    if !named.contains(&f.id) {
                        named.push(f.id);
                    }
                }
            };
            crate::runs::run_points(&prep, metrics, &mut on_point).expect("runs");
            assert!(diagnoses >= 20, "{}: {diagnoses}", preset.id);
        }
        // Not vacuous: the runs made the doctor name its branches.
        for id in [
            "kv-preemption",
            "ttft-queue-pseudo-saturation",
            "autoscale-signal",
        ] {
            assert!(named.contains(&id), "{id} not in {named:?}");
        }
    }

    #[test]
    fn seed_alert_lines() {
        let th = Thresholds::default();
        let p = |kv: f64, preempt: f64| Point {
            kv,
            preempt,
            ..Point::default()
        };
        let ids = |pts: &[Point]| -> Vec<&'static str> {
            alerts(pts, &th).iter().map(|f| f.id).collect()
        };
        assert!(ids(&[]).is_empty());
        assert!(ids(&[p(0.5, 0.0)]).is_empty());
        assert!(ids(&[p(0.85, 0.0)]).is_empty());
        assert_eq!(ids(&[p(0.86, 0.0)]), ["kv_warning"]);
        assert_eq!(ids(&[p(0.99, 0.0)]), ["kv_critical"]);
        assert_eq!(ids(&[p(0.5, 1.0)]), ["preemptions"]);
        // A preemption 59 s ago still counts for rate(...[1m]); one 60 s ago does not.
        let mut pts = vec![p(0.5, 1.0)];
        pts.extend(std::iter::repeat_n(p(0.5, 0.0), 59));
        assert_eq!(ids(&pts), ["preemptions"]);
        pts.push(p(0.5, 0.0));
        assert!(ids(&pts).is_empty());
    }

    #[test]
    fn merge_puts_the_most_severe_first_alerts_before_doctor() {
        let f = |id, source, severity| Finding {
            id,
            source,
            scenario: "",
            severity,
            title: String::new(),
            detail: String::new(),
            evidence: Vec::new(),
            advice: Vec::new(),
        };
        let m = merge(
            vec![f("kv_warning", "alert", Severity::Warning)],
            &[
                f("autoscale-signal", "doctor", Severity::Info),
                f("kv-preemption", "doctor", Severity::Critical),
                f("itl-prefill-interference", "doctor", Severity::Warning),
            ],
        );
        let ids: Vec<_> = m.iter().map(|x| x.id).collect();
        assert_eq!(
            ids,
            [
                "kv-preemption",
                "kv_warning",
                "itl-prefill-interference",
                "autoscale-signal"
            ]
        );
    }
}
