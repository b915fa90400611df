//! Shared test helpers: start an in-process server on an ephemeral port.
#![allow(dead_code)]

use twin_server::{parse_serve_args, start, Running};

/// Start `serve` with `args` (a `vllm serve` line) on 127.0.0.1, ephemeral ports.
pub async fn serve(args: &str) -> Running {
    let argv: Vec<String> = args.split_whitespace().map(str::to_string).collect();
    let mut cfg = parse_serve_args(&argv).expect("flags parse");
    cfg.port = 0;
    // Ephemeral DCGM port unless the test disabled it.
    if cfg.dcgm_port.is_some() {
        cfg.dcgm_port = Some(0);
    }
    match start(&cfg).await {
        Ok(r) => r,
        Err(e) => panic!("server did not start: {e}"),
    }
}

pub fn base(r: &Running) -> String {
    format!("http://{}", r.addr)
}

/// Split an SSE body into its `data:` payloads.
pub fn sse_payloads(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter_map(|f| f.strip_prefix("data: "))
        .map(str::to_string)
        .collect()
}

/// Send a request and read its JSON answer (whatever the status).
pub async fn get_json(c: &reqwest::Client, url: String) -> serde_json::Value {
    c.get(url).send().await.unwrap().json().await.unwrap()
}

/// POST a JSON body and read the JSON answer (whatever the status).
pub async fn post_json(
    c: &reqwest::Client,
    url: String,
    body: &serde_json::Value,
) -> serde_json::Value {
    c.post(url)
        .json(body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The status a request gets.
pub async fn status_of(r: reqwest::RequestBuilder) -> u16 {
    r.send().await.unwrap().status().as_u16()
}

/// Debian's Prometheus scraping `targets` every second, on a free loopback port; killed and
/// its data removed when dropped. Fails loudly when /usr/bin/prometheus is missing.
pub struct Prometheus {
    child: std::process::Child,
    dir: std::path::PathBuf,
    /// `http://127.0.0.1:PORT/api/v1`.
    pub api: String,
}

impl Prometheus {
    pub fn start(name: &str, targets: &[String]) -> Self {
        let prom =
            std::env::var("TWIN_PROMETHEUS").unwrap_or_else(|_| "/usr/bin/prometheus".into());
        assert!(
            std::path::Path::new(&prom).exists(),
            "{prom} not found: apt-get install -y prometheus (or set TWIN_PROMETHEUS)"
        );
        let dir = std::env::temp_dir().join(format!("twin-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let quoted: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        let cfg = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: twin\n    static_configs:\n      - targets: [{}]\n",
            quoted.join(", ")
        );
        std::fs::write(dir.join("prometheus.yml"), cfg).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = std::process::Command::new(&prom)
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start prometheus");
        Prometheus {
            child,
            dir,
            api: format!("http://127.0.0.1:{port}/api/v1"),
        }
    }

    /// An instant query's result: `instance` label → value (`""` when aggregated away).
    pub async fn query(
        &self,
        c: &reqwest::Client,
        q: &str,
    ) -> Option<std::collections::BTreeMap<String, f64>> {
        let v: serde_json::Value = c
            .get(format!("{}/query", self.api))
            .query(&[("query", q)])
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        let mut out = std::collections::BTreeMap::new();
        for r in v["data"]["result"].as_array()? {
            let inst = r["metric"]["instance"].as_str().unwrap_or("").to_string();
            out.insert(inst, r["value"][1].as_str()?.parse::<f64>().ok()?);
        }
        Some(out)
    }

    /// The first series' value of an instant query.
    pub async fn value(&self, c: &reqwest::Client, q: &str) -> Option<f64> {
        self.query(c, q).await?.into_values().next()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// GET `url` and read the body as text.
pub async fn get_text(c: &reqwest::Client, url: String) -> String {
    c.get(url).send().await.unwrap().text().await.unwrap()
}
