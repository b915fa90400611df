//! `simulate --find-max-rate`: the highest arrival rate a configuration sustains, found by
//! re-running the same workload (same seed, so the same lengths and the same arrival gaps,
//! scaled) at other rates and bisecting on the knee, like guidellm's sweep finds the edge of
//! its constant-rate runs. A rate is sustained when the queue stops growing and, with
//! `--slo-*`, when at least [`SLO_ATTAINMENT`] of the requests meet every SLO.

use serde::Serialize;
use twin_workload::{ArrivalProcess, Arrivals, RateProfile};

use crate::fleet::FleetConfig;
use crate::report::{ReportBuilder, Slo};
use crate::{SimConfig, SimError, Startup};

/// What a search runs at each rate: one `vllm serve` (its DP ranks included) or a fleet of
/// them behind a router.
#[derive(Clone, Copy)]
pub enum RateTarget<'a> {
    Engine {
        config: &'a SimConfig,
        startup: &'a Startup,
    },
    Fleet(&'a FleetConfig),
}

impl RateTarget<'_> {
    pub fn workload(&self) -> &twin_workload::WorkloadSpec {
        match self {
            RateTarget::Engine { config, .. } => &config.workload,
            RateTarget::Fleet(f) => &f.workload,
        }
    }

    /// One run of the workload at `factor` times its rate (the same requests, the gaps scaled).
    pub fn run_at_factor(&self, slo: Slo, factor: f64) -> Result<crate::Report, SimError> {
        match *self {
            RateTarget::Engine { config, startup } => run_at_factor(config, startup, slo, factor),
            RateTarget::Fleet(fleet) => {
                let mut fc = fleet.clone();
                fc.workload.arrivals = scaled(&fleet.workload.arrivals, factor);
                let mut b = ReportBuilder::new(slo).with_workload(&fc.workload);
                crate::fleet::run_fleet(&fc, slo, None, &mut b)?;
                Ok(b.finish())
            }
        }
    }
}

/// Share of requests that must meet every SLO (the goodput share) for a rate to count.
pub const SLO_ATTAINMENT: f64 = 0.95;
/// Bisection stops when the bracket is this tight (relative to its top).
pub const RELATIVE_TOLERANCE: f64 = 0.02;
/// Doublings or halvings from the workload's own rate before giving up on a bracket.
const MAX_BRACKET_STEPS: u32 = 16;
/// Probes in all (bracketing plus bisection).
const MAX_PROBES: usize = 40;
/// How a probe too short to judge says so (and how the search recognises one).
pub const TOO_FEW_REQUESTS: &str = "too few requests to judge";

/// One simulation at one rate.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RateProbe {
    /// Factor applied to the workload's rate (1 = as given).
    pub factor: f64,
    /// The workload's nominal rate times the factor.
    pub requests_per_s: f64,
    pub sustained: bool,
    /// Why not, in words (empty when sustained).
    pub reason: String,
    /// Finished requests over the run, its drain included (the capacity only when overloaded).
    pub served_requests_per_s: f64,
    pub goodput_share: f64,
    pub ttft_p95_s: f64,
    pub tpot_p95_s: f64,
    /// Mean queue time of the last fifth of arrivals.
    pub queue_late_mean_s: f64,
}

/// The search's answer (`--find-max-rate --json` prints this).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MaxRateSearch {
    /// The highest rate found sustained (None: not even the lowest probe).
    pub max_requests_per_s: Option<f64>,
    /// The same as a factor on the workload's rate (for a trace: a --trace-speedup).
    pub max_factor: Option<f64>,
    /// The lowest rate found not sustained (None: never broke within the search).
    pub first_unsustained_requests_per_s: Option<f64>,
    pub slo: Slo,
    pub slo_attainment: f64,
    /// What the rate means for this workload ("Poisson rate", "peak of the step profile", …).
    pub rate_meaning: &'static str,
    /// The first unsustained rate failed only for want of requests to judge it by (no
    /// `--slo-*`): the true limit may be higher; more `--num-requests` would tell.
    pub limited_by_requests: bool,
    pub probes: Vec<RateProbe>,
}

/// The workload's nominal rate and what it means, or why it has none.
pub fn nominal_rate(
    workload: &twin_workload::WorkloadSpec,
) -> Result<(f64, &'static str), SimError> {
    match &workload.arrivals {
        Arrivals::Open(p) => Ok(match &p.rate {
            RateProfile::Constant(r) => (*r, "--request-rate"),
            profile => (
                profile.max_rate(),
                "the profile's peak rate; the whole profile scales",
            ),
        }),
        Arrivals::Trace(records) => {
            // The run replays the first `num_requests` records.
            let records = &records[..workload.num_requests.min(records.len())];
            let span_s = records.last().map_or(0.0, |r| r.arrival_time_s)
                - records.first().map_or(0.0, |r| r.arrival_time_s);
            if records.len() < 2 || span_s <= 0.0 {
                return Err(SimError::Config {
                    field: "--find-max-rate".into(),
                    message:
                        "the trace has no arrival rate (fewer than two distinct arrival times)"
                            .into(),
                });
            }
            Ok((
                (records.len() - 1) as f64 / span_s,
                "the trace's mean rate; its gaps scale as --trace-speedup does",
            ))
        }
        Arrivals::Staged(_) => Err(SimError::Config {
            field: "--find-max-rate".into(),
            message: "--stages gives each stage its own rate; search one rate with --request-rate"
                .into(),
        }),
        Arrivals::Closed { .. } => Err(SimError::Config {
            field: "--find-max-rate".into(),
            message: "needs arrivals at a rate (--request-rate, --rate-profile or a trace); a \
                      closed loop (--max-concurrency, --request-rate inf) has none"
                .into(),
        }),
    }
}

/// The same arrivals at `factor` times the rate.
fn scaled(arrivals: &Arrivals, factor: f64) -> Arrivals {
    match arrivals {
        Arrivals::Open(p) => Arrivals::Open(ArrivalProcess {
            shape: p.shape.clone(),
            rate: match &p.rate {
                RateProfile::Constant(r) => RateProfile::Constant(r * factor),
                // The profile's shape in time stays; every rate scales.
                RateProfile::Steps(pieces) => {
                    RateProfile::Steps(pieces.iter().map(|&(t, r)| (t, r * factor)).collect())
                }
                RateProfile::Ramp { from, to, over_s } => RateProfile::Ramp {
                    from: from * factor,
                    to: to * factor,
                    over_s: *over_s,
                },
            },
        }),
        Arrivals::Trace(records) => Arrivals::Trace(
            records
                .iter()
                .map(|r| {
                    let mut r = r.clone();
                    r.arrival_time_s /= factor;
                    r
                })
                .collect(),
        ),
        closed @ (Arrivals::Closed { .. } | Arrivals::Staged(_)) => closed.clone(),
    }
}

/// One run of the workload at `factor` times its rate (the same requests, the gaps scaled).
pub fn run_at_factor(
    config: &SimConfig,
    startup: &Startup,
    slo: Slo,
    factor: f64,
) -> Result<crate::Report, SimError> {
    let mut cfg = config.clone();
    cfg.workload.arrivals = scaled(&config.workload.arrivals, factor);
    let mut b = ReportBuilder::new(slo).with_workload(&cfg.workload);
    crate::run(&cfg, startup, &mut b)?;
    Ok(b.finish())
}

fn probe(
    target: RateTarget<'_>,
    slo: Slo,
    factor: f64,
    nominal: f64,
) -> Result<RateProbe, SimError> {
    let r = target.run_at_factor(slo, factor)?;
    let goodput_share = if r.requests_per_s > 0.0 {
        r.goodput_requests_per_s / r.requests_per_s
    } else {
        0.0
    };
    let mut reasons = Vec::new();
    if let Some(o) = r.overload.as_ref().filter(|o| o.overloaded) {
        reasons.push(format!(
            "the queue grew ({:.2} s → {:.2} s)",
            o.queue_early_mean_s, o.queue_late_mean_s
        ));
    }
    if r.overload.is_none() && slo == Slo::default() {
        // Nothing else can judge the rate: a short burst fits in the batch at any rate.
        reasons.push(format!(
            "{TOO_FEW_REQUESTS} at this rate ({} requests; a queue verdict needs {} arrivals \
             over {:.0} s or more: raise --num-requests or give --slo-*)",
            target.workload().num_requests,
            crate::overload::MIN_ARRIVALS_FOR_VERDICT,
            crate::overload::MIN_ARRIVAL_SPAN_S
        ));
    }
    if slo != Slo::default() && goodput_share < SLO_ATTAINMENT {
        reasons.push(format!(
            "{:.1}% of requests met the SLOs",
            goodput_share * 100.0
        ));
    }
    if r.num_finished == 0 {
        reasons.push("no request finished".into());
    }
    Ok(RateProbe {
        factor,
        requests_per_s: nominal * factor,
        sustained: reasons.is_empty(),
        reason: reasons.join("; "),
        served_requests_per_s: r.requests_per_s,
        goodput_share,
        ttft_p95_s: r.ttft_s.p95,
        tpot_p95_s: r.tpot_s.p95,
        queue_late_mean_s: r.overload.map_or(0.0, |o| o.queue_late_mean_s),
    })
}

/// Where a search starts and how finely it ends. `tune` starts a config's later, longer runs
/// at the rate its shorter run found, with small steps, instead of at the workload's rate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SearchOptions {
    /// First probe, as a factor on the workload's rate.
    pub start_factor: f64,
    /// Each bracketing step multiplies (or divides) the factor by this (> 1).
    pub growth: f64,
    /// Bisection stops when the bracket is this tight (relative to its top).
    pub relative_tolerance: f64,
}

impl Default for SearchOptions {
    /// `--find-max-rate`'s: from the workload's own rate, doubling or halving, to 2%.
    fn default() -> Self {
        SearchOptions {
            start_factor: 1.0,
            growth: 2.0,
            relative_tolerance: RELATIVE_TOLERANCE,
        }
    }
}

/// Bracket the knee from the workload's own rate by doubling or halving, then bisect.
pub fn find_max_rate(
    config: &SimConfig,
    startup: &Startup,
    slo: Slo,
) -> Result<MaxRateSearch, SimError> {
    find_max_rate_with(config, startup, slo, SearchOptions::default())
}

/// [`find_max_rate`] from another start, with other steps and tolerance.
pub fn find_max_rate_with(
    config: &SimConfig,
    startup: &Startup,
    slo: Slo,
    options: SearchOptions,
) -> Result<MaxRateSearch, SimError> {
    search(RateTarget::Engine { config, startup }, slo, options)
}

/// The search over any [`RateTarget`]: a fleet's max rate is the whole fleet's, behind its
/// router (and autoscaler, when it has one).
pub fn search(
    target: RateTarget<'_>,
    slo: Slo,
    options: SearchOptions,
) -> Result<MaxRateSearch, SimError> {
    let SearchOptions {
        start_factor,
        growth,
        relative_tolerance,
    } = options;
    let valid = start_factor.is_finite()
        && start_factor > 0.0
        && growth.is_finite()
        && growth > 1.0
        && relative_tolerance > 0.0
        && relative_tolerance < 1.0;
    if !valid {
        return Err(SimError::Config {
            field: "find_max_rate".into(),
            message: format!("invalid search options {options:?}"),
        });
    }
    let (nominal, rate_meaning) = nominal_rate(target.workload())?;
    let mut probes = Vec::new();
    let run = |factor: f64, probes: &mut Vec<RateProbe>| -> Result<bool, SimError> {
        let p = probe(target, slo, factor, nominal)?;
        let ok = p.sustained;
        probes.push(p);
        Ok(ok)
    };
    let (mut lo, mut hi) = (None::<f64>, None::<f64>);
    let mut factor = start_factor;
    for _ in 0..=MAX_BRACKET_STEPS {
        if run(factor, &mut probes)? {
            lo = Some(factor);
            if hi.is_some() {
                break;
            }
            factor *= growth;
        } else {
            hi = Some(factor);
            if lo.is_some() {
                break;
            }
            // Two halvings in a row left the goodput share where it was: the SLOs fail on
            // requests that barely meet each other, and no lower rate will meet them.
            if let (false, [.., a, b, c]) = (slo == Slo::default(), probes.as_slice()) {
                let flat =
                    |x: &RateProbe, y: &RateProbe| (x.goodput_share - y.goodput_share).abs() < 0.01;
                if flat(a, b) && flat(b, c) {
                    break;
                }
            }
            factor /= growth;
        }
    }
    if let (Some(mut l), Some(mut h)) = (lo, hi) {
        while (h - l) / h > relative_tolerance && probes.len() < MAX_PROBES {
            let mid = 0.5 * (l + h);
            if run(mid, &mut probes)? {
                l = mid;
            } else {
                h = mid;
            }
        }
        lo = Some(l);
        hi = Some(h);
    }
    let limited_by_requests = hi.is_some_and(|h| {
        probes
            .iter()
            .any(|p| p.factor == h && p.reason.starts_with(TOO_FEW_REQUESTS))
    });
    Ok(MaxRateSearch {
        limited_by_requests,
        max_requests_per_s: lo.map(|f| f * nominal),
        max_factor: lo,
        first_unsustained_requests_per_s: hi.map(|f| f * nominal),
        slo,
        slo_attainment: SLO_ATTAINMENT,
        rate_meaning,
        probes,
    })
}

impl MaxRateSearch {
    pub fn render_text(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::from("== Sustainable rate (--find-max-rate) ==\n");
        let _ = writeln!(
            s,
            "a rate is sustained when the queue stops growing{}",
            if self.slo == Slo::default() {
                String::new()
            } else {
                format!(
                    " and {:.0}% of requests meet every SLO",
                    self.slo_attainment * 100.0
                )
            }
        );
        let _ = writeln!(
            s,
            "\n{:>12} {:>12} {:>14} {:>12} {:>12}  verdict",
            "rate req/s", "goodput %", "late queue s", "TTFT p95 ms", "TPOT p95 ms"
        );
        let mut sorted: Vec<&RateProbe> = self.probes.iter().collect();
        sorted.sort_by(|a, b| a.factor.total_cmp(&b.factor));
        for p in sorted {
            let _ = writeln!(
                s,
                "{:>12.2} {:>12.1} {:>14.2} {:>12.1} {:>12.1}  {}",
                p.requests_per_s,
                p.goodput_share * 100.0,
                p.queue_late_mean_s,
                p.ttft_p95_s * 1e3,
                p.tpot_p95_s * 1e3,
                if p.sustained {
                    "sustained".to_string()
                } else {
                    format!("not sustained: {}", p.reason)
                }
            );
        }
        let _ = writeln!(s);
        match (
            self.max_requests_per_s,
            self.first_unsustained_requests_per_s,
        ) {
            (Some(max), Some(over)) => {
                let _ = writeln!(
                    s,
                    "max sustainable rate: {max:.2} req/s ({:.3}x the workload's; rate = {}); \
                     {over:.2} req/s is not sustained",
                    self.max_factor.unwrap_or(0.0),
                    self.rate_meaning
                );
                if self.limited_by_requests {
                    let _ = writeln!(
                        s,
                        "(a floor, not the limit: {over:.2} req/s had too few requests to judge; \
                         raise --num-requests or give --slo-* to search higher)"
                    );
                }
            }
            (Some(max), None) => {
                let _ = writeln!(
                    s,
                    "sustained every rate tried, up to {max:.2} req/s (rate = {}): the limit is higher",
                    self.rate_meaning
                );
            }
            (None, Some(low)) if self.slo == Slo::default() => {
                let _ = writeln!(
                    s,
                    "no rate tried was sustained, down to {low:.3} req/s (see each probe's \
                     verdict)"
                );
            }
            (None, Some(low)) => {
                let _ = writeln!(
                    s,
                    "no rate tried was sustained, down to {low:.3} req/s: the SLOs are out of \
                     reach for this configuration even when requests do not meet (see the \
                     TTFT/TPOT columns)"
                );
            }
            (None, None) => {}
        }
        s
    }
}
