//! Small, dependency-free SVG charts for the report: time series and latency CDFs.

use std::fmt::Write as _;

use crate::report::{Report, SecondRow};

const W: f64 = 720.0;
const H: f64 = 320.0;
const PAD_L: f64 = 64.0;
const PAD_R: f64 = 16.0;
const PAD_T: f64 = 36.0;
const PAD_B: f64 = 40.0;
const COLORS: [&str; 4] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];

/// One line of a chart: label and (x, y) points.
pub struct Series<'a> {
    pub label: &'a str,
    pub points: Vec<(f64, f64)>,
}

/// A tick step of 1, 2, 2.5 or 5 × 10^k giving at most four intervals up to `v`.
fn nice_step(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 0.25;
    }
    let raw = v / 4.0;
    let p = 10f64.powf(raw.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if raw <= m * p * (1.0 + 1e-9) {
            return m * p;
        }
    }
    10.0 * p
}

/// The axis top: a whole number of nice steps at or above `v`.
fn nice_max(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let step = nice_step(v);
    (v / step - 1e-9).ceil().max(1.0) * step
}

/// Decimals that show a tick step exactly (0.25 → 2, 5 → 0).
fn step_decimals(step: f64) -> usize {
    let mut d = 0;
    while d < 9
        && ((step * 10f64.powi(d as i32)).round() - step * 10f64.powi(d as i32)).abs() > 1e-6
    {
        d += 1;
    }
    d
}

/// A dashed reference line: an SLO on a latency axis, a KV threshold on usage.
pub struct Threshold {
    pub value: f64,
    pub label: String,
    /// On the x axis (a vertical line) rather than the y axis.
    pub on_x: bool,
    pub color: &'static str,
}

/// Text for SVG or HTML (element content and attribute values).
pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A line chart with axes, ticks and a legend.
pub fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series<'_>],
    y_max_hint: Option<f64>,
) -> String {
    line_chart_with_thresholds(title, x_label, y_label, series, y_max_hint, &[])
}

/// [`line_chart`] with dashed threshold lines (SLOs, alert thresholds).
pub fn line_chart_with_thresholds(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series<'_>],
    y_max_hint: Option<f64>,
    thresholds: &[Threshold],
) -> String {
    chart(
        title, x_label, y_label, series, y_max_hint, false, thresholds,
    )
}

/// [`line_chart`] with a log-scaled x axis, ticks at each decade of seconds (1 ms, 10 ms, …):
/// latency CDFs whose TTFT and ITL would vanish at the left of a linear axis to 50 s.
pub fn line_chart_log_x(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series<'_>],
    y_max_hint: Option<f64>,
    thresholds: &[Threshold],
) -> String {
    chart(
        title, x_label, y_label, series, y_max_hint, true, thresholds,
    )
}

/// A decade of seconds as a person reads it.
fn fmt_seconds_decade(e: i32) -> String {
    match e {
        ..=-7 => format!("1e{e} s"),
        -6 => "1 µs".into(),
        -5 => "10 µs".into(),
        -4 => "100 µs".into(),
        -3 => "1 ms".into(),
        -2 => "10 ms".into(),
        -1 => "100 ms".into(),
        0 => "1 s".into(),
        1 => "10 s".into(),
        2 => "100 s".into(),
        3 => "1000 s".into(),
        _ => format!("1e{e} s"),
    }
}

fn chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series<'_>],
    y_max_hint: Option<f64>,
    log_x: bool,
    thresholds: &[Threshold],
) -> String {
    // Threshold lines widen the axes so they are always drawn.
    let xs = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .chain(thresholds.iter().filter(|t| t.on_x).map(|t| t.value));
    let ys = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .chain(thresholds.iter().filter(|t| !t.on_x).map(|t| t.value));
    let x_hi = xs.clone().fold(0.0, f64::max);
    let x_lo = xs.filter(|&x| x > 0.0).fold(f64::INFINITY, f64::min);
    // Linear: 0..nice max. Log: whole decades around the positive data.
    let (e_lo, e_hi) = if x_lo.is_finite() && x_hi > 0.0 {
        let lo = x_lo.log10().floor() as i32;
        (lo, (x_hi.log10().ceil() as i32).max(lo + 1))
    } else {
        (-3, 0)
    };
    let x_max = nice_max(x_hi);
    let y_max = y_max_hint.unwrap_or_else(|| nice_max(ys.fold(0.0, f64::max)));
    let (x_step, y_step) = (nice_step(x_max), nice_step(y_max));
    let pw = W - PAD_L - PAD_R;
    let ph = H - PAD_T - PAD_B;
    let fx = |x: f64| {
        if log_x {
            let e = x.max(10f64.powi(e_lo)).log10();
            (e - f64::from(e_lo)) / f64::from(e_hi - e_lo)
        } else {
            x / x_max
        }
    };
    let px = |x: f64| PAD_L + fx(x).clamp(0.0, 1.0) * pw;
    let py = |y: f64| PAD_T + ph - (y / y_max).clamp(0.0, 1.0) * ph;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/><text x="{}" y="20" font-size="14" font-weight="bold">{}</text>"#,
        PAD_L,
        esc(title)
    );
    let y_ticks = (y_max / y_step + 1e-9).floor() as usize;
    for i in 0..=y_ticks {
        let v = i as f64 * y_step;
        let gy = py(v);
        let _ = write!(
            s,
            r##"<line x1="{PAD_L}" y1="{gy:.1}" x2="{:.1}" y2="{gy:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            PAD_L + pw,
            PAD_L - 6.0,
            gy + 4.0,
            fmt_tick(v, y_step),
        );
    }
    let x_ticks: Vec<(f64, String)> = if log_x {
        (e_lo..=e_hi)
            .map(|e| (px(10f64.powi(e)), fmt_seconds_decade(e)))
            .collect()
    } else {
        (0..=(x_max / x_step + 1e-9).floor() as usize)
            .map(|i| {
                let v = i as f64 * x_step;
                (px(v), fmt_tick(v, x_step))
            })
            .collect()
    };
    for (gx, label) in &x_ticks {
        let _ = write!(
            s,
            r##"<line x1="{gx:.1}" y1="{PAD_T}" x2="{gx:.1}" y2="{:.1}" stroke="#f0f0f0"/><text x="{gx:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            PAD_T + ph,
            PAD_T + ph + 16.0,
            label
        );
    }
    let _ = write!(
        s,
        r##"<line x1="{PAD_L}" y1="{PAD_T}" x2="{PAD_L}" y2="{:.1}" stroke="#333"/><line x1="{PAD_L}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#333"/><text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text><text transform="translate(14,{:.1}) rotate(-90)" text-anchor="middle">{}</text>"##,
        PAD_T + ph,
        PAD_T + ph,
        PAD_L + pw,
        PAD_T + ph,
        PAD_L + pw / 2.0,
        H - 6.0,
        esc(x_label),
        PAD_T + ph / 2.0,
        esc(y_label)
    );
    for (i, t) in thresholds.iter().enumerate() {
        let (x1, y1, x2, y2, tx, ty, anchor) = if t.on_x {
            let x = px(t.value);
            (
                x,
                PAD_T,
                x,
                PAD_T + ph,
                x - 4.0,
                PAD_T + 12.0 + 14.0 * i as f64,
                "end",
            )
        } else {
            // Labels side by side, so two lines close together stay readable.
            let y = py(t.value);
            let tx = PAD_L + 6.0 + 150.0 * i as f64;
            (PAD_L, y, PAD_L + pw, y, tx, y - 4.0, "start")
        };
        let _ = write!(
            s,
            r#"<line class="threshold" x1="{x1:.1}" y1="{y1:.1}" x2="{x2:.1}" y2="{y2:.1}" stroke="{}" stroke-width="1.5" stroke-dasharray="6,4"/><text x="{tx:.1}" y="{ty:.1}" text-anchor="{anchor}" fill="{}">{}</text>"#,
            t.color,
            t.color,
            esc(&t.label)
        );
    }
    for (i, ser) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mut d = String::new();
        // Thin long series to at most ~2000 points per line.
        let step = (ser.points.len() / 2000).max(1);
        for (j, (x, y)) in ser.points.iter().step_by(step).enumerate() {
            let _ = write!(
                d,
                "{}{:.1},{:.1} ",
                if j == 0 { "M" } else { "L" },
                px(*x),
                py(*y)
            );
        }
        let _ = write!(
            s,
            r#"<path d="{}" fill="none" stroke="{color}" stroke-width="1.5"/><rect x="{:.1}" y="{:.1}" width="10" height="10" fill="{color}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            d.trim_end(),
            PAD_L + pw - 150.0,
            PAD_T + 4.0 + 16.0 * i as f64,
            PAD_L + pw - 136.0,
            PAD_T + 13.0 + 16.0 * i as f64,
            esc(ser.label)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// A tick value with the decimals its step needs (0.25, 0.5, 0.75; never 0.062).
fn fmt_tick(v: f64, step: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    format!("{v:.*}", step_decimals(step))
}

/// Per-replica lines: each replica when there are a few, else the spread across replicas
/// (min, mean, max each second) so 64 replicas still read.
fn per_replica(f: &crate::fleet::report::FleetReport, y: fn(&SecondRow) -> f64) -> Vec<Series<'_>> {
    const EACH_UP_TO: usize = 6;
    if f.replicas.len() <= EACH_UP_TO {
        return f
            .replicas
            .iter()
            .map(|r| Series {
                label: &r.name,
                points: r
                    .seconds
                    .iter()
                    .map(|row| (row.t_s as f64, y(row)))
                    .collect(),
            })
            .collect();
    }
    let len = f
        .replicas
        .iter()
        .map(|r| r.seconds.len())
        .max()
        .unwrap_or(0);
    let mut min = Vec::with_capacity(len);
    let mut mean = Vec::with_capacity(len);
    let mut max = Vec::with_capacity(len);
    for t in 0..len {
        let vals: Vec<f64> = f
            .replicas
            .iter()
            .map(|r| r.seconds.get(t).map_or(0.0, y))
            .collect();
        let x = t as f64;
        min.push((x, vals.iter().copied().fold(f64::INFINITY, f64::min)));
        max.push((x, vals.iter().copied().fold(0.0, f64::max)));
        mean.push((x, vals.iter().sum::<f64>() / vals.len() as f64));
    }
    vec![
        Series {
            label: "replica max",
            points: max,
        },
        Series {
            label: "replica mean",
            points: mean,
        },
        Series {
            label: "replica min",
            points: min,
        },
    ]
}

/// A fleet run's charts: replicas in service over time, per-replica KV usage and queue.
fn fleet_charts(f: &crate::fleet::report::FleetReport, end_s: f64) -> Vec<(&'static str, String)> {
    // A step line: each count holds until the next change.
    let mut steps = Vec::new();
    for (i, &(t, n)) in f.replica_count.iter().enumerate() {
        if i > 0 {
            steps.push((t, f.replica_count[i - 1].1 as f64));
        }
        steps.push((t, n as f64));
    }
    if let Some(&(_, n)) = f.replica_count.last() {
        steps.push((end_s, n as f64));
    }
    vec![
        (
            "fleet_replicas.svg",
            line_chart(
                "Replicas in service",
                "time (s)",
                "replicas",
                &[Series {
                    label: "replicas",
                    points: steps,
                }],
                None,
            ),
        ),
        (
            "fleet_kv_cache_usage.svg",
            line_chart(
                "KV cache usage per replica (per-second means)",
                "time (s)",
                "fraction of blocks",
                &per_replica(f, |row| row.kv_cache_usage_mean),
                Some(1.0),
            ),
        ),
        (
            "fleet_waiting.svg",
            line_chart(
                "Requests waiting per replica (per-second means)",
                "time (s)",
                "requests",
                &per_replica(f, |row| row.num_waiting_mean),
                None,
            ),
        ),
    ]
}

/// The kit's KV-usage alert thresholds (twin_kit::KitOptions' defaults, the seed's 85% / 98%),
/// drawn on the KV chart.
pub const KV_WARNING: f64 = 0.85;
pub const KV_CRITICAL: f64 = 0.98;

fn fmt_ms(s: f64) -> String {
    if s >= 1.0 {
        format!("{s} s")
    } else {
        format!("{} ms", (s * 1e3 * 1000.0).round() / 1000.0)
    }
}

/// Every chart of a report, as (file name, SVG).
pub fn all(r: &Report) -> Vec<(&'static str, String)> {
    let mut charts = base_charts(r);
    if let Some(f) = &r.fleet {
        charts.extend(fleet_charts(f, r.duration_s));
    }
    charts
}

fn base_charts(r: &Report) -> Vec<(&'static str, String)> {
    // Seconds without a sample have no mean: the line skips them rather than dropping to 0.
    let sampled = |f: &dyn Fn(&crate::report::SecondRow) -> Option<f64>| -> Vec<(f64, f64)> {
        r.seconds
            .iter()
            .filter_map(|row| f(row).map(|v| (row.t_s as f64, v)))
            .collect()
    };
    let t = |f: &dyn Fn(&crate::report::SecondRow) -> f64| sampled(&|row| Some(f(row)));
    let red = "#d62728";
    let slo_line = |v: Option<f64>, name: &str, on_x: bool| {
        v.map(|value| Threshold {
            value,
            label: format!("{name} SLO {}", fmt_ms(value)),
            on_x,
            color: red,
        })
    };
    let kv_lines = [
        Threshold {
            value: KV_WARNING,
            label: format!("warning {KV_WARNING}"),
            on_x: false,
            color: "#ff7f0e",
        },
        Threshold {
            value: KV_CRITICAL,
            label: format!("critical {KV_CRITICAL}"),
            on_x: false,
            color: red,
        },
    ];
    let latency_lines: Vec<Threshold> = [
        slo_line(r.slo.ttft_s, "TTFT", false),
        slo_line(r.slo.tpot_s, "TPOT", false),
    ]
    .into_iter()
    .flatten()
    .collect();
    let cdf_lines: Vec<Threshold> = [
        slo_line(r.slo.ttft_s, "TTFT", true),
        slo_line(r.slo.tpot_s, "TPOT", true),
        slo_line(r.slo.e2e_s, "E2E", true),
    ]
    .into_iter()
    .flatten()
    .collect();
    vec![
        (
            "kv_cache_usage.svg",
            line_chart_with_thresholds(
                "KV cache usage (vllm:kv_cache_usage_perc)",
                "time (s)",
                "fraction of blocks",
                &[
                    Series {
                        label: "mean",
                        points: t(&|x| x.kv_cache_usage_mean),
                    },
                    Series {
                        label: "max",
                        points: t(&|x| x.kv_cache_usage_max),
                    },
                ],
                Some(1.0),
                &kv_lines,
            ),
        ),
        (
            "running_waiting.svg",
            line_chart(
                "Requests running vs waiting",
                "time (s)",
                "requests",
                &[
                    Series {
                        label: "running",
                        points: t(&|x| x.num_running_mean),
                    },
                    Series {
                        label: "waiting",
                        points: t(&|x| x.num_waiting_mean),
                    },
                ],
                None,
            ),
        ),
        (
            "latency_over_time.svg",
            line_chart_with_thresholds(
                "TTFT and ITL over time (per-second means)",
                "time (s)",
                "seconds",
                &[
                    Series {
                        label: "TTFT mean",
                        points: sampled(&|x| (x.ttft_n > 0).then_some(x.ttft_mean_s)),
                    },
                    Series {
                        label: "ITL mean",
                        points: sampled(&|x| (x.itl_n > 0).then_some(x.itl_mean_s)),
                    },
                    Series {
                        label: "ITL max",
                        points: sampled(&|x| (x.itl_n > 0).then_some(x.itl_max_s)),
                    },
                ],
                None,
                &latency_lines,
            ),
        ),
        (
            "throughput.svg",
            line_chart(
                "Throughput (tokens per second)",
                "time (s)",
                "tokens/s",
                &[
                    Series {
                        label: "output",
                        points: t(&|x| x.generation_tokens as f64),
                    },
                    Series {
                        label: "prompt (computed)",
                        points: t(&|x| x.prompt_tokens as f64),
                    },
                ],
                None,
            ),
        ),
        (
            "preemptions.svg",
            line_chart(
                "Preemptions per second (vllm:num_preemptions)",
                "time (s)",
                "preemptions/s",
                &[Series {
                    label: "preemptions",
                    points: t(&|x| x.preemptions as f64),
                }],
                None,
            ),
        ),
        (
            "latency_cdf.svg",
            line_chart_log_x(
                "Latency CDFs",
                "seconds (log scale)",
                "fraction of samples",
                &[
                    Series {
                        label: "TTFT",
                        points: r.ttft_hist.cdf_points(200),
                    },
                    Series {
                        label: "ITL",
                        points: r.itl_hist.cdf_points(200),
                    },
                    Series {
                        label: "E2E",
                        points: r.e2e_hist.cdf_points(200),
                    },
                ],
                Some(1.0),
                &cdf_lines,
            ),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use crate::engine_args::parse_simulate_args;
    use crate::{ReportBuilder, Slo};

    #[test]
    fn seconds_without_a_first_token_are_skipped_not_drawn_at_zero() {
        // One short request every 10 s: most seconds see no first token.
        let argv: Vec<String> =
            "--num-requests 6 --request-rate 0.1 --constant-arrivals --output-len 4"
                .split_whitespace()
                .map(str::to_string)
                .collect();
        let a = parse_simulate_args(&argv, &|_| Err(String::new())).unwrap();
        let startup = crate::startup(&a.config).unwrap();
        let mut b = ReportBuilder::new(Slo::default());
        crate::run(&a.config, &startup, &mut b).unwrap();
        let r = b.finish();
        let with_ttft = r.seconds.iter().filter(|s| s.ttft_n > 0).count();
        assert_eq!(with_ttft, 6);
        assert!(r.seconds.len() > 40);
        let charts = super::all(&r);
        let svg = &charts
            .iter()
            .find(|(n, _)| *n == "latency_over_time.svg")
            .unwrap()
            .1;
        // The first line is TTFT: one point per second that had one.
        let d = svg
            .split("<path d=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        assert_eq!(d.matches('L').count() + 1, with_ttft, "{d}");
    }

    #[test]
    fn the_latency_cdf_has_a_log_x_axis_in_decades_of_seconds() {
        let series = [
            super::Series {
                label: "ITL",
                points: vec![(0.004, 0.1), (0.008, 0.9), (0.02, 1.0)],
            },
            super::Series {
                label: "E2E",
                points: vec![(1.5, 0.1), (30.0, 1.0)],
            },
        ];
        let svg = super::line_chart_log_x("t", "seconds (log scale)", "f", &series, Some(1.0), &[]);
        for tick in ["1 ms", "10 ms", "100 ms", "1 s", "10 s", "100 s"] {
            assert!(svg.contains(&format!(">{tick}</text>")), "{tick}");
        }
        // On a log axis 4 ms and 8 ms are well apart; on a linear one to 100 s they would
        // share a pixel.
        let d = svg
            .split("<path d=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        let xs: Vec<f64> = d
            .split(' ')
            .map(|p| {
                p.trim_start_matches(['M', 'L'])
                    .split(',')
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap()
            })
            .collect();
        assert!(xs[1] - xs[0] > 20.0, "{xs:?}");
    }
}
