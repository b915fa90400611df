//! The predicted-vs-measured chart: every point before (hollow) and after (filled) the fit,
//! log-log, with the diagonal where prediction equals measurement.

use std::fmt::Write;

/// One input's points: (predicted, measured) seconds before and after.
pub struct Series<'a> {
    pub label: String,
    pub before: &'a [(f64, f64)],
    pub after: &'a [(f64, f64)],
}

const COLOURS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The chart as an SVG document (milliseconds on both axes).
pub fn predicted_vs_measured(title: &str, series: &[Series<'_>]) -> String {
    let (w, h, m) = (640.0, 560.0, 70.0);
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    for s in series {
        for &(p, q) in s.before.iter().chain(s.after) {
            for v in [p, q] {
                if v.is_finite() && v > 0.0 {
                    lo = lo.min(v * 1e3);
                    hi = hi.max(v * 1e3);
                }
            }
        }
    }
    if !lo.is_finite() || !hi.is_finite() {
        lo = 1.0;
        hi = 10.0;
    }
    let (l0, l1) = (
        (lo / 1.5).log10().floor(),
        (hi * 1.5)
            .log10()
            .ceil()
            .max((lo / 1.5).log10().floor() + 1.0),
    );
    let plot = w - 2.0 * m;
    let px = |ms: f64| m + (ms.max(1e-12).log10() - l0) / (l1 - l0) * plot;
    let py = |ms: f64| h - m - 40.0 - (ms.max(1e-12).log10() - l0) / (l1 - l0) * plot;
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(o, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        o,
        r#"<text x="{}" y="24" text-anchor="middle" font-size="14">{}</text>"#,
        w / 2.0,
        esc(title)
    );
    let (x0, x1, y0, y1) = (
        px(10f64.powf(l0)),
        px(10f64.powf(l1)),
        py(10f64.powf(l0)),
        py(10f64.powf(l1)),
    );
    let _ = writeln!(
        o,
        r##"<rect x="{x0:.1}" y="{y1:.1}" width="{:.1}" height="{:.1}" fill="none" stroke="#888"/>"##,
        x1 - x0,
        y0 - y1
    );
    let mut d = l0;
    while d <= l1 + 1e-9 {
        let v = 10f64.powf(d);
        let (x, y) = (px(v), py(v));
        let _ = writeln!(
            o,
            r##"<line x1="{x:.1}" y1="{y0:.1}" x2="{x:.1}" y2="{y1:.1}" stroke="#eee"/><line x1="{x0:.1}" y1="{y:.1}" x2="{x1:.1}" y2="{y:.1}" stroke="#eee"/>"##
        );
        let _ = writeln!(
            o,
            r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{v}</text><text x="{:.1}" y="{:.1}" text-anchor="end">{v}</text>"#,
            y0 + 16.0,
            x0 - 6.0,
            y + 4.0
        );
        d += 1.0;
    }
    let _ = writeln!(
        o,
        r##"<line x1="{x0:.1}" y1="{y0:.1}" x2="{x1:.1}" y2="{y1:.1}" stroke="#444" stroke-dasharray="4 3"/>"##
    );
    let _ = writeln!(
        o,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">measured (ms)</text>"#,
        (x0 + x1) / 2.0,
        y0 + 34.0
    );
    let _ = writeln!(
        o,
        r#"<text transform="translate(18 {:.1}) rotate(-90)" text-anchor="middle">twin (ms)</text>"#,
        (y0 + y1) / 2.0
    );
    for (i, s) in series.iter().enumerate() {
        let c = COLOURS[i % COLOURS.len()];
        for &(p, q) in s.before {
            if p > 0.0 && q > 0.0 && p.is_finite() && q.is_finite() {
                let _ = writeln!(
                    o,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="none" stroke="{c}" opacity="0.6"/>"#,
                    px(q * 1e3),
                    py(p * 1e3)
                );
            }
        }
        for &(p, q) in s.after {
            if p > 0.0 && q > 0.0 && p.is_finite() && q.is_finite() {
                let _ = writeln!(
                    o,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{c}"/>"#,
                    px(q * 1e3),
                    py(p * 1e3)
                );
            }
        }
        let ly = h - 30.0 + (i / 2) as f64 * 14.0 - 10.0;
        let lx = m + (i % 2) as f64 * plot / 2.0;
        let _ = writeln!(
            o,
            r#"<circle cx="{lx:.1}" cy="{:.1}" r="4" fill="{c}"/><text x="{:.1}" y="{ly:.1}">{}</text>"#,
            ly - 4.0,
            lx + 8.0,
            esc(&s.label)
        );
    }
    let _ = writeln!(
        o,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="end" fill="#666">hollow: before · filled: after</text>"##,
        w - m,
        44.0
    );
    o.push_str("</svg>\n");
    o
}
