//! The fit: which terms the inputs identify, the objective, and a bounded Nelder–Mead.
//!
//! The objective is the mean over inputs of each input's mean |ln(predicted / measured)|:
//! symmetric in over- and under-prediction, and each input weighs the same however many
//! points it holds. Step timings are priced by the cost model directly; bench results and
//! timelines are replayed through twin-sim (the same workload seed every evaluation, so the
//! objective is a deterministic function of the terms). No randomness enters the search.

use twin_cost::{CostCalibration, CostModel, GpuSpec, ModelSpec, ResolvedServeConfig};
use twin_sim::{ReportBuilder, SimConfig, SimError, Slo, Startup};

use crate::steps::StepInput;

/// A latency the inputs measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    Ttft,
    Itl,
    Tpot,
    E2e,
}

impl Metric {
    pub fn name(self) -> &'static str {
        match self {
            Metric::Ttft => "TTFT",
            Metric::Itl => "ITL",
            Metric::Tpot => "TPOT",
            Metric::E2e => "E2E",
        }
    }
}

/// Which statistic of the metric was measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stat {
    Median,
    Mean,
}

/// One measured statistic.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Target {
    pub metric: Metric,
    pub stat: Stat,
    pub measured_s: f64,
}

impl Target {
    pub fn median(metric: Metric, measured_s: f64) -> Self {
        Target {
            metric,
            stat: Stat::Median,
            measured_s,
        }
    }
    pub fn mean(metric: Metric, measured_s: f64) -> Self {
        Target {
            metric,
            stat: Stat::Mean,
            measured_s,
        }
    }
    pub fn label(&self) -> String {
        let s = match self.stat {
            Stat::Median => "median",
            Stat::Mean => "mean",
        };
        format!("{s} {}", self.metric.name())
    }
}

/// An input ready to predict.
#[derive(Debug, Clone)]
pub enum Prepared {
    /// Step timings, priced by the cost model for the declared model, GPU and flags.
    Steps {
        input: StepInput,
        model: Box<ModelSpec>,
        gpu: Box<GpuSpec>,
        resolved: Box<ResolvedServeConfig>,
    },
    /// Published measurements (`twin_cost::calibration`): the indexes of those to fit.
    Published { indexes: Vec<usize> },
    /// A bench result or a timeline, replayed through the simulator.
    Replay {
        kind: &'static str,
        path: String,
        config: Box<SimConfig>,
        startup: Box<Startup>,
        targets: Vec<Target>,
        /// The measured mean output length: a mean E2E is compared at it, not at the
        /// replay's sampled mean (a thousand log-normal draws miss it by a few percent).
        mean_output: Option<f64>,
    },
}

impl Prepared {
    pub fn kind(&self) -> &'static str {
        match self {
            Prepared::Steps { .. } => "step-timings",
            Prepared::Published { .. } => "published",
            Prepared::Replay { kind, .. } => kind,
        }
    }
    pub fn path(&self) -> &str {
        match self {
            Prepared::Steps { input, .. } => &input.path,
            Prepared::Published { .. } => "calibration.md",
            Prepared::Replay { path, .. } => path,
        }
    }
    /// The replayed workload's mean prompt length (bench results and timelines).
    pub fn mean_prompt_tokens(&self) -> Option<f64> {
        match self {
            Prepared::Replay { config, .. } => Some(config.workload.mean_prompt_tokens()),
            _ => None,
        }
    }

    /// Labels of the points, in [`Prepared::predict`] order.
    pub fn labels(&self) -> Vec<String> {
        match self {
            Prepared::Steps { input, .. } => input
                .points
                .iter()
                .map(|p| format!("line {}", p.line))
                .collect(),
            Prepared::Published { indexes } => {
                let all = twin_cost::calibration::all_points();
                indexes.iter().map(|&i| all[i].name.to_string()).collect()
            }
            Prepared::Replay { targets, .. } => targets.iter().map(Target::label).collect(),
        }
    }

    /// (predicted, measured) per point under `cal`: seconds, or a published point's own unit.
    pub fn predict(&self, cal: &CostCalibration) -> Result<Vec<(f64, f64)>, SimError> {
        match self {
            Prepared::Steps {
                input,
                model,
                gpu,
                resolved,
            } => {
                let cost = CostModel::with_calibration(model, gpu, resolved, cal)?;
                Ok(input
                    .points
                    .iter()
                    .map(|p| {
                        // A DP MoE engine's timed step: its peers idle beside it.
                        let c = cost.step_time_s_beside_idle_peers(&p.batch);
                        let pred = if p.gpu_only {
                            c.gpu_time_s - c.breakdown.launch_overhead_s
                        } else {
                            c.step_time_s
                        };
                        (pred, p.measured_s)
                    })
                    .collect())
            }
            Prepared::Published { indexes } => {
                let all = twin_cost::calibration::all_points_with(cal);
                Ok(indexes
                    .iter()
                    .map(|&i| (all[i].predicted, all[i].published))
                    .collect())
            }
            Prepared::Replay {
                config,
                startup,
                targets,
                mean_output,
                ..
            } => {
                let mut cfg = (**config).clone();
                cfg.calibration = *cal;
                let mut b =
                    ReportBuilder::new(Slo::default()).with_arrivals(&cfg.workload.arrivals);
                twin_sim::run(&cfg, startup, &mut b)?;
                let r = b.finish();
                Ok(targets
                    .iter()
                    .map(|t| {
                        let d = match t.metric {
                            Metric::Ttft => &r.ttft_s,
                            Metric::Itl => &r.itl_s,
                            Metric::Tpot => &r.tpot_s,
                            Metric::E2e => &r.e2e_s,
                        };
                        let mut pred = match t.stat {
                            Stat::Median => d.p50,
                            Stat::Mean => d.mean,
                        };
                        if let (Metric::E2e, Stat::Mean, Some(m)) = (t.metric, t.stat, mean_output)
                        {
                            // Mean E2E = mean TTFT + mean decode time, the latter linear in
                            // the output length.
                            let replayed = r.output_tokens.mean;
                            if replayed > 1.0 && *m > 1.0 {
                                let ttft = r.ttft_s.mean;
                                pred = ttft + (pred - ttft) * (m - 1.0) / (replayed - 1.0);
                            }
                        }
                        (pred, t.measured_s)
                    })
                    .collect())
            }
        }
    }
}

/// |ln(predicted / measured)|, large where a prediction is missing.
pub fn log_error(pred: f64, meas: f64) -> f64 {
    let e = (pred / meas).ln().abs();
    if e.is_finite() {
        e
    } else {
        10.0
    }
}

/// Median of |predicted / measured − 1| over the points.
pub fn median_relative_error(points: &[(f64, f64)]) -> f64 {
    let mut v: Vec<f64> = points
        .iter()
        .map(|(p, m)| {
            let e = (p / m - 1.0).abs();
            if e.is_finite() {
                e
            } else {
                f64::MAX
            }
        })
        .collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scale {
    /// A multiplier searched as its logarithm.
    Log,
    /// Seconds searched in milliseconds.
    Ms,
    /// Seconds searched in microseconds.
    Us,
}

/// Terms that move together, with the search's bounds and first step in search units.
#[derive(Debug, Clone, Copy)]
struct Group {
    terms: &'static [&'static str],
    scale: Scale,
    lo: f64,
    hi: f64,
    step: f64,
}

const MULT_LO: f64 = -2.995_732_273_553_991; // ln 0.05
const MULT_HI: f64 = 2.995_732_273_553_991; // ln 20

/// A multiplier on the cost model's speed, searched in log space within its bounds.
const fn multiplier(terms: &'static [&'static str]) -> Group {
    Group {
        terms,
        scale: Scale::Log,
        lo: MULT_LO,
        hi: MULT_HI,
        step: 0.3,
    }
}

/// Seconds added to every step, searched in milliseconds (-5 ms, which takes off the exposed
/// host time and then the kernel floors of a deployment quicker than the defaults, to 200 ms).
const STEP_OVERHEAD: Group = Group {
    terms: &["step_overhead_s"],
    scale: Scale::Ms,
    lo: -5.0,
    hi: 200.0,
    step: 0.5,
};

/// Seconds added to the frontend's time per request, searched in milliseconds. TTFT alone
/// sees it, as it sees prefill speed: only inputs whose prompts differ in length tell the two
/// apart. The first step is 10 ms (the size of the term itself), so the ridge does not hold a
/// real gateway's tens of milliseconds back.
const FRONTEND: Group = Group {
    terms: &["frontend_request_s"],
    scale: Scale::Ms,
    lo: -twin_cost::frontend::REQUEST_S * 1e3,
    hi: 2000.0,
    step: 10.0,
};

/// Aggregate latencies (bench, timelines) see a memory-bound speed (decode), a compute-bound
/// speed (prefill) and a fixed cost per step: the terms are tied in those three groups. The
/// last is told apart from the memory-bound speed only by inputs at two or more loads.
const TIED: [Group; 4] = [
    multiplier(&["weight_stream", "attention_decode"]),
    multiplier(&["gemm", "attention_prefill"]),
    STEP_OVERHEAD,
    FRONTEND,
];

/// Step timings over varied shapes identify each term on its own.
const FREE: [Group; 7] = [
    multiplier(&["weight_stream"]),
    multiplier(&["gemm"]),
    multiplier(&["attention_decode"]),
    multiplier(&["attention_prefill"]),
    STEP_OVERHEAD,
    Group {
        terms: &["per_seq_overhead_s"],
        scale: Scale::Us,
        lo: -5.0,
        hi: 1000.0,
        step: 5.0,
    },
    FRONTEND,
];

fn to_value(scale: Scale, x: f64) -> f64 {
    match scale {
        Scale::Log => x.exp(),
        Scale::Ms => x / 1e3,
        Scale::Us => x / 1e6,
    }
}

/// Search settings.
#[derive(Debug, Clone, Copy)]
pub struct FitOptions {
    /// Objective evaluations at most (each replays every bench and timeline input once).
    pub max_evals: usize,
}

impl Default for FitOptions {
    fn default() -> Self {
        FitOptions { max_evals: 150 }
    }
}

/// What the fit found.
#[derive(Debug, Clone)]
pub struct FitResult {
    pub calibration: CostCalibration,
    /// Term groups searched, joined by `=` when tied (`weight_stream=attention_decode`).
    pub fitted: Vec<String>,
    /// Terms the inputs cannot move or tell apart (left at their defaults).
    pub frozen: Vec<String>,
    /// Only bench results or timelines at one load: the per-step overhead was left out.
    pub one_load: bool,
    /// Bench results or timelines whose mean prompts are all within 2× of each other: the
    /// frontend's time was left out (TTFT alone cannot tell it from prefill speed).
    pub one_prompt_length: bool,
    /// Searched groups that ended on a bound: the data want more than the model allows.
    pub at_bound: Vec<String>,
    pub evals: usize,
    pub objective_before: f64,
    pub objective_after: f64,
    /// Per input, (predicted, measured) before and after.
    pub before: Vec<Vec<(f64, f64)>>,
    pub after: Vec<Vec<(f64, f64)>>,
}

struct Search<'a> {
    inputs: &'a [Prepared],
    groups: Vec<Group>,
    evals: usize,
}

impl Search<'_> {
    fn calibration(&self, x: &[f64]) -> CostCalibration {
        let mut c = CostCalibration::default();
        for (g, &xi) in self.groups.iter().zip(x) {
            for t in g.terms {
                c.set(t, to_value(g.scale, xi));
            }
        }
        c
    }

    fn objective_of(&mut self, cal: &CostCalibration) -> Result<f64, SimError> {
        self.evals += 1;
        let mut total = 0.0;
        for input in self.inputs {
            let pts = input.predict(cal)?;
            let n = pts.len().max(1) as f64;
            total += pts.iter().map(|&(p, m)| log_error(p, m)).sum::<f64>() / n;
        }
        Ok(total / self.inputs.len().max(1) as f64)
    }

    fn objective(&mut self, x: &[f64]) -> Result<f64, SimError> {
        let cal = self.calibration(x);
        // A faint pull toward the defaults settles directions the data leave flat; at 1e-5
        // per first step squared it moves no identified term measurably.
        let ridge: f64 = self
            .groups
            .iter()
            .zip(x)
            .map(|(g, xi)| (xi / g.step).powi(2))
            .sum::<f64>()
            * 1e-5;
        Ok(self.objective_of(&cal)? + ridge)
    }

    fn clamp(&self, x: &mut [f64]) {
        for (g, xi) in self.groups.iter().zip(x.iter_mut()) {
            *xi = xi.clamp(g.lo, g.hi);
        }
    }

    /// Nelder–Mead (reflection 1, expansion 2, contraction ½, shrink ½), clamped to bounds.
    fn nelder_mead(&mut self, x0: Vec<f64>, max_evals: usize) -> Result<(Vec<f64>, f64), SimError> {
        let n = x0.len();
        let f0 = self.objective(&x0)?;
        if n == 0 {
            return Ok((x0, f0));
        }
        let mut simplex: Vec<(Vec<f64>, f64)> = vec![(x0.clone(), f0)];
        for i in 0..n {
            let mut x = x0.clone();
            let g = self.groups[i];
            // Step toward the roomier side of the bound.
            x[i] += if x[i] + g.step <= g.hi {
                g.step
            } else {
                -g.step
            };
            self.clamp(&mut x);
            let f = self.objective(&x)?;
            simplex.push((x, f));
        }
        while self.evals < max_evals {
            simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
            let (best, worst) = (simplex[0].1, simplex[n].1);
            let spread = (0..n)
                .map(|d| {
                    simplex
                        .iter()
                        .map(|s| (s.0[d] - simplex[0].0[d]).abs())
                        .fold(0.0, f64::max)
                })
                .fold(0.0, f64::max);
            if worst - best < 1e-7 && spread < 1e-4 {
                break;
            }
            let centroid: Vec<f64> = (0..n)
                .map(|d| simplex[..n].iter().map(|s| s.0[d]).sum::<f64>() / n as f64)
                .collect();
            let along = |t: f64, this: &Self| -> Vec<f64> {
                let mut x: Vec<f64> = (0..n)
                    .map(|d| centroid[d] + t * (simplex[n].0[d] - centroid[d]))
                    .collect();
                this.clamp(&mut x);
                x
            };
            let xr = along(-1.0, self);
            let fr = self.objective(&xr)?;
            if fr < best {
                let xe = along(-2.0, self);
                let fe = self.objective(&xe)?;
                simplex[n] = if fe < fr { (xe, fe) } else { (xr, fr) };
            } else if fr < simplex[n - 1].1 {
                simplex[n] = (xr, fr);
            } else {
                let xc = if fr < worst {
                    along(-0.5, self)
                } else {
                    along(0.5, self)
                };
                let fc = self.objective(&xc)?;
                if fc < worst.min(fr) {
                    simplex[n] = (xc, fc);
                } else {
                    let x_best = simplex[0].0.clone();
                    for s in simplex.iter_mut().skip(1) {
                        for (v, b) in s.0.iter_mut().zip(&x_best) {
                            *v = b + 0.5 * (*v - b);
                        }
                        s.1 = self.objective(&s.0)?;
                    }
                }
            }
        }
        simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
        let (x, f) = simplex.swap_remove(0);
        Ok((x, f))
    }
}

/// Fit the terms the inputs identify. Step timings free every term; bench results and
/// timelines alone fit the tied groups.
pub fn fit(inputs: &[Prepared], opts: FitOptions) -> Result<FitResult, SimError> {
    // Published points are step-level too (batch-1 sweeps and load points of known shape).
    let has_steps = inputs
        .iter()
        .any(|i| matches!(i, Prepared::Steps { .. } | Prepared::Published { .. }));
    let all: Vec<Group> = if has_steps {
        FREE.to_vec()
    } else {
        TIED.to_vec()
    };
    // One load level: TTFT, ITL and E2E are two equations (E2E is TTFT plus the ITLs), so
    // a per-step overhead trades off against the memory-bound speed with nothing to choose.
    let one_load = !has_steps && inputs.len() < 2;
    // TTFT holds the frontend's time and the prefill's alike; only prompts of different
    // lengths (means at least 2× apart) tell a constant from a speed.
    let prompt_means: Vec<f64> = inputs
        .iter()
        .filter_map(Prepared::mean_prompt_tokens)
        .collect();
    let one_prompt_length = !has_steps
        && prompt_means.iter().copied().fold(0.0, f64::max)
            < 2.0 * prompt_means.iter().copied().fold(f64::INFINITY, f64::min);
    let identity = CostCalibration::default();
    let mut probe = Search {
        inputs,
        groups: all.clone(),
        evals: 0,
    };
    let before: Vec<Vec<(f64, f64)>> = inputs
        .iter()
        .map(|i| i.predict(&identity))
        .collect::<Result<_, _>>()?;
    let objective_before = probe.objective_of(&identity)?;
    // A group that moves no prediction is not identifiable from these inputs.
    let mut active = Vec::new();
    let mut frozen = Vec::new();
    for (i, g) in all.iter().enumerate() {
        let unidentified =
            (one_load && g.scale != Scale::Log) || (one_prompt_length && g.terms == FRONTEND.terms);
        if unidentified {
            frozen.extend(g.terms.iter().map(|t| t.to_string()));
            continue;
        }
        let mut x = vec![0.0; all.len()];
        x[i] = g.step;
        let cal = probe.calibration(&x);
        let f = probe.objective_of(&cal)?;
        if (f - objective_before).abs() > 1e-12 {
            active.push(*g);
        } else {
            frozen.extend(g.terms.iter().map(|t| t.to_string()));
        }
    }
    let mut search = Search {
        inputs,
        groups: active,
        evals: probe.evals,
    };
    let x0 = vec![0.0; search.groups.len()];
    let (x, objective_after) = search.nelder_mead(x0, opts.max_evals)?;
    let calibration = search.calibration(&x);
    let after: Vec<Vec<(f64, f64)>> = inputs
        .iter()
        .map(|i| i.predict(&calibration))
        .collect::<Result<_, _>>()?;
    let name = |g: &Group| g.terms.join("=");
    let at_bound = search
        .groups
        .iter()
        .zip(&x)
        .filter(|(g, &xi)| (xi - g.lo).abs() < 1e-9 || (xi - g.hi).abs() < 1e-9)
        .map(|(g, _)| name(g))
        .collect();
    Ok(FitResult {
        calibration,
        fitted: search.groups.iter().map(name).collect(),
        frozen,
        one_load,
        one_prompt_length,
        at_bound,
        evals: search.evals,
        objective_before,
        objective_after,
        before,
        after,
    })
}
