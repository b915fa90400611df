//! `simulate --out DIR` writes report.html: every chart inline. Debian's headless Chromium
//! (`/usr/bin/chromium`, installed by scripts/test; override with CHROMIUM) renders it to a
//! PNG and the test looks for each chart's lines where the page's grid puts it.

use std::path::{Path, PathBuf};
use std::process::Command;

use twin_sim::html_report::{chart_origin_px, CHART_HEIGHT_PX, CHART_WIDTH_PX};

fn chromium() -> PathBuf {
    let p = PathBuf::from(std::env::var("CHROMIUM").unwrap_or("/usr/bin/chromium".into()));
    assert!(
        p.exists(),
        "{} not found: this test needs Debian's chromium (apt-get install chromium; scripts/test installs it)",
        p.display()
    );
    p
}

struct Shot {
    width: u32,
    rgb: Vec<[u8; 3]>,
}

impl Shot {
    fn take(html: &Path, width: u32, height: u32) -> Shot {
        let png = html.with_extension("png");
        let profile = html.with_file_name("chromium-profile");
        let out = Command::new(chromium())
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--force-device-scale-factor=1",
                &format!("--user-data-dir={}", profile.display()),
                &format!("--window-size={width},{height}"),
                &format!("--screenshot={}", png.display()),
                &format!("file://{}", html.display()),
            ])
            .output()
            .expect("run chromium");
        assert!(
            png.exists(),
            "chromium wrote no screenshot: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let decoder =
            png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&png).unwrap()));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        let channels = info.color_type.samples();
        let rgb = buf[..info.buffer_size()]
            .chunks(channels)
            .map(|c| [c[0], c[1], c[2]])
            .collect();
        assert_eq!(info.width, width);
        Shot { width, rgb }
    }

    /// Pixels near `color` inside the chart cell `i` (its plot area).
    fn count_in_chart(&self, i: u32, color: [u8; 3]) -> usize {
        let (x0, y0) = chart_origin_px(i);
        let mut n = 0;
        for y in y0 + 30..y0 + CHART_HEIGHT_PX - 30 {
            for x in x0 + 60..x0 + CHART_WIDTH_PX - 10 {
                let Some(p) = self.rgb.get((y * self.width + x) as usize) else {
                    continue;
                };
                if p.iter()
                    .zip(color)
                    .all(|(&a, b)| (i32::from(a) - i32::from(b)).abs() <= 12)
                {
                    n += 1;
                }
            }
        }
        n
    }
}

const BLUE: [u8; 3] = [0x1f, 0x77, 0xb4];
const RED: [u8; 3] = [0xd6, 0x27, 0x28];
const ORANGE: [u8; 3] = [0xff, 0x7f, 0x0e];

#[test]
fn the_html_report_shows_every_chart_with_its_thresholds() {
    let dir = std::env::temp_dir().join(format!("twin-html-report-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // A storm: KV-bound with preemptions, overloaded, with SLOs to draw.
    let out = Command::new(env!("CARGO_BIN_EXE_vllm-twin"))
        .args([
            "simulate",
            "--quiet",
            "--num-requests",
            "2000",
            "--request-rate",
            "40",
            "--gpu-memory-utilization",
            "0.3",
            "--max-model-len",
            "16384",
            "--slo-ttft-ms",
            "500",
            "--slo-tpot-ms",
            "50",
            "--out",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html_path = dir.join("report.html");
    let html = std::fs::read_to_string(&html_path).unwrap();
    let names = [
        "kv_cache_usage.svg",
        "running_waiting.svg",
        "latency_over_time.svg",
        "throughput.svg",
        "preemptions.svg",
        "latency_cdf.svg",
    ];
    for (i, name) in names.iter().enumerate() {
        let at = html
            .find(&format!("<figure id=\"{name}\">"))
            .unwrap_or_else(|| panic!("{name}"));
        if i > 0 {
            let prev = html
                .find(&format!("<figure id=\"{}\">", names[i - 1]))
                .unwrap();
            assert!(prev < at, "charts in grid order");
        }
    }
    assert!(html.contains("Overloaded:"), "the verdict is on the page");
    assert!(
        html.contains("--slo-ttft-ms 500"),
        "the command is on the page"
    );
    assert_eq!(
        html.matches("class=\"threshold\"").count(),
        2 + 2 + 2,
        "KV 2, latency 2, CDF 2"
    );

    let shot = Shot::take(&html_path, 1500, 1200);
    for (i, name) in names.iter().enumerate() {
        let blue = shot.count_in_chart(i as u32, BLUE);
        assert!(blue > 150, "{name}: {blue} pixels of its first line");
    }
    // KV chart: the warning (orange) and critical (red, beside the red max line) lines.
    assert!(shot.count_in_chart(0, ORANGE) > 200, "KV warning line");
    // Preemptions happened, so its line rises off the axis: more than a flat line's pixels.
    assert!(shot.count_in_chart(4, BLUE) > 600);
    // The CDF's SLO lines are red and vertical.
    assert!(shot.count_in_chart(5, RED) > 200);
    let _ = std::fs::remove_dir_all(&dir);
}
