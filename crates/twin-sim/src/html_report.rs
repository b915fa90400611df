//! `report.html`: one self-contained page a person can attach to a postmortem — what was run,
//! the overload verdict, every chart inline, and the text report. No scripts, no network.

use std::fmt::Write as _;

use crate::charts::esc;
use crate::report::Report;

/// Grid geometry, fixed so a screenshot's cells are where a test expects them.
pub const HEADER_HEIGHT_PX: u32 = 120;
pub const PAGE_PADDING_PX: u32 = 16;
pub const GRID_GAP_PX: u32 = 16;
pub const CHART_WIDTH_PX: u32 = 720;
pub const CHART_HEIGHT_PX: u32 = 320;
pub const GRID_COLUMNS: u32 = 2;

/// The page: `charts` as [`crate::charts::all`] makes them, `text` the terminal report.
pub fn render(report: &Report, charts: &[(&'static str, String)], text: &str) -> String {
    let mut h = String::new();
    let title = match &report.run {
        Some(r) => format!("vllm-twin simulate: {} on {}", r.model, r.gpus),
        None => "vllm-twin simulate".to_string(),
    };
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\
         <title>{}</title><style>\
         body{{margin:0;padding:{PAGE_PADDING_PX}px;font-family:sans-serif;background:#fafafa;color:#222}}\
         header{{height:{HEADER_HEIGHT_PX}px;overflow:hidden}}\
         h1{{font-size:20px;margin:0 0 8px}}\
         .run{{font-family:monospace;font-size:12px;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}}\
         .verdict{{margin-top:8px;padding:6px 10px;border-radius:4px;font-size:13px}}\
         .overloaded{{background:#fde2e1;border:1px solid #d62728}}\
         .served{{background:#e3f4e3;border:1px solid #2ca02c}}\
         .charts{{display:grid;grid-template-columns:repeat({GRID_COLUMNS},{CHART_WIDTH_PX}px);\
         grid-auto-rows:{CHART_HEIGHT_PX}px;gap:{GRID_GAP_PX}px}}\
         figure{{margin:0;width:{CHART_WIDTH_PX}px;height:{CHART_HEIGHT_PX}px}}\
         pre{{font-size:12px;background:white;padding:12px;border:1px solid #ddd}}\
         </style></head><body>",
        esc(&title)
    );
    let _ = write!(h, "<header><h1>{}</h1>", esc(&title));
    if let Some(r) = &report.run {
        let _ = write!(
            h,
            "<div class=\"run\">vllm-twin {} simulate {}</div><div>{}</div>",
            esc(&r.twin_version),
            esc(&crate::run_info::shell_words(&r.command)),
            esc(&r.workload)
        );
    }
    match &report.overload {
        Some(o) if o.overloaded => {
            let _ = write!(
                h,
                "<div class=\"verdict overloaded\"><b>Overloaded:</b> requests arrived at \
                 {:.2} req/s, the engine served {:.2} req/s; the queue grew from {:.2} s to \
                 {:.2} s. Latencies measure the backlog.</div>",
                o.offered_requests_per_s,
                o.served_requests_per_s,
                o.queue_early_mean_s,
                o.queue_late_mean_s
            );
        }
        Some(o) => {
            let _ = write!(
                h,
                "<div class=\"verdict served\">The load was served: {:.2} req/s offered, the \
                 queue did not grow.</div>",
                o.offered_requests_per_s
            );
        }
        None => {}
    }
    h.push_str("</header><main><section class=\"charts\">");
    for (name, svg) in charts {
        let _ = write!(
            h,
            "<figure id=\"{}\">{}</figure>",
            esc(name),
            svg.trim_end()
        );
    }
    let _ = writeln!(h, "</section><pre>{}</pre></main></body></html>", esc(text));
    h
}

/// Top-left corner (x, y) of chart `i` on the page, in CSS pixels.
pub fn chart_origin_px(i: u32) -> (u32, u32) {
    let col = i % GRID_COLUMNS;
    let row = i / GRID_COLUMNS;
    (
        PAGE_PADDING_PX + col * (CHART_WIDTH_PX + GRID_GAP_PX),
        PAGE_PADDING_PX + HEADER_HEIGHT_PX + row * (CHART_HEIGHT_PX + GRID_GAP_PX),
    )
}
