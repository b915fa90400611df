//! `vllm-twin bench-serve`: a load generator (closed loop, or open loop at `--request-rate`)
//! measuring what `vllm bench serve`
//! measures from the client side of SSE: TTFT (first chunk with text), ITL (gaps between
//! chunks with text), TPOT ((E2E − TTFT) / (output tokens − 1)) and E2E, against any
//! OpenAI-compatible server (the twin or a real vLLM).
//! vLLM: `vllm/benchmarks/lib/endpoint_request_func.py` (`async_request_openai_completions`)
//! and `benchmarks/serve.py` (`calculate_metrics`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde::Serialize;

/// Why `bench-serve`'s command line was refused; each names the flag or argument.
#[derive(Debug, thiserror::Error)]
pub enum BenchArgsError {
    /// clap's refusals (unknown flag with a suggestion, a bad value), naming the flag.
    #[error(transparent)]
    Flag(#[from] twin_sim::SimError),
    #[error("{0}: more than one URL given")]
    MoreThanOneUrl(String),
    #[error("bench-serve URL: missing (e.g. http://127.0.0.1:8000)")]
    MissingUrl,
    #[error("--timeout: must be > 0 seconds")]
    Timeout,
    #[error("--request-rate: {0}")]
    RequestRate(String),
    #[error("--burstiness: {0} must be > 0")]
    Burstiness(f64),
}

/// Why a load run could not start or finish.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("cannot build the HTTP client: {0}")]
    Client(reqwest::Error),
    #[error("GET /v1/models: {0}")]
    Models(reqwest::Error),
    #[error("GET /v1/models listed no model")]
    NoModel,
    #[error("a load worker stopped: {0}")]
    Worker(tokio::task::JoinError),
}

/// What to run.
#[derive(Clone, Debug)]
pub struct BenchArgs {
    /// Base URL, e.g. `http://127.0.0.1:8000`.
    pub url: String,
    /// Requests in flight at most: the clients of a closed loop, or the cap of an open one
    /// (`usize::MAX`: none).
    pub concurrency: usize,
    /// Open-loop arrivals per second (`f64::INFINITY`: a closed loop of `concurrency` clients,
    /// each sending its next request when its last one ends).
    pub request_rate: f64,
    /// Gamma inter-arrivals with this shape (`vllm bench serve`'s convention; 1 = Poisson).
    pub burstiness: f64,
    /// Seeds the arrival gaps.
    pub seed: u64,
    /// Draw a progress bar on stderr.
    pub progress: bool,
    pub num_requests: usize,
    pub input_len: usize,
    pub output_len: usize,
    /// None: the first model `/v1/models` lists.
    pub model: Option<String>,
    pub api_key: Option<String>,
    /// `completions` (default, as `vllm bench serve --backend openai`) or `chat`.
    pub chat: bool,
    pub json: bool,
    pub timeout_s: f64,
}

impl Default for BenchArgs {
    /// `bench-serve URL` with no flags: one client, 100 requests of 128 → 128 tokens.
    fn default() -> Self {
        BenchArgs {
            url: String::new(),
            concurrency: 1,
            request_rate: f64::INFINITY,
            burstiness: 1.0,
            seed: 0,
            progress: false,
            num_requests: 100,
            input_len: 128,
            output_len: 128,
            model: None,
            api_key: None,
            chat: false,
            json: false,
            timeout_s: 600.0,
        }
    }
}

/// One request's client-side timing.
#[derive(Clone, Debug, Default)]
pub struct RequestResult {
    pub ok: bool,
    pub ttft_s: f64,
    pub itl_s: Vec<f64>,
    pub e2e_s: f64,
    pub output_tokens: usize,
    pub prompt_tokens: usize,
    pub error: String,
}

/// `{mean, median, p99, ...}` in milliseconds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    pub count: usize,
    pub mean_ms: f64,
    pub median_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// The run's result (`--json`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct BenchReport {
    /// The offered rate (`inf`: closed loop) and the in-flight cap (None: no cap).
    #[serde(serialize_with = "rate_json")]
    pub request_rate: f64,
    pub max_concurrency: Option<usize>,
    pub completed: usize,
    pub failed: usize,
    pub duration_s: f64,
    pub total_input_tokens: usize,
    pub total_output_tokens: usize,
    pub request_throughput: f64,
    pub output_throughput: f64,
    pub ttft: Summary,
    pub tpot: Summary,
    pub itl: Summary,
    pub e2el: Summary,
    pub errors: Vec<String>,
}

/// `inf` as the string vLLM's bench writes, since JSON has no infinity.
fn rate_json<S: serde::Serializer>(rate: &f64, s: S) -> Result<S::Ok, S::Error> {
    if rate.is_finite() {
        s.serialize_f64(*rate)
    } else {
        s.serialize_str("inf")
    }
}

/// Percentile by linear interpolation, as numpy's default.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let pos = q / 100.0 * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    let w = pos - lo as f64;
    sorted[lo] * (1.0 - w) + sorted[hi.min(sorted.len() - 1)] * w
}

pub fn summarize(mut v: Vec<f64>) -> Summary {
    v.retain(|x| x.is_finite());
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return Summary::default();
    }
    let ms = 1e3;
    Summary {
        count: v.len(),
        mean_ms: v.iter().sum::<f64>() / v.len() as f64 * ms,
        median_ms: percentile(&v, 50.0) * ms,
        p90_ms: percentile(&v, 90.0) * ms,
        p99_ms: percentile(&v, 99.0) * ms,
        max_ms: v.last().copied().unwrap_or(0.0) * ms,
    }
}

/// A prompt of about `n` tokens, distinct per request (no accidental prefix sharing).
fn prompt(i: usize, n: usize) -> String {
    // " w123" is two cl100k tokens; a leading request tag keeps prefixes apart.
    let mut s = format!("req{i}:");
    let mut x = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for _ in 0..n.saturating_sub(2) / 2 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push_str(&format!(" w{}", x % 997));
    }
    s
}

async fn resolve_model(client: &reqwest::Client, a: &BenchArgs) -> Result<String, BenchError> {
    if let Some(m) = &a.model {
        return Ok(m.clone());
    }
    let mut req = client.get(format!("{}/v1/models", a.url));
    if let Some(k) = &a.api_key {
        req = req.bearer_auth(k);
    }
    let v: serde_json::Value = req
        .send()
        .await
        .map_err(BenchError::Models)?
        .json()
        .await
        .map_err(BenchError::Models)?;
    v["data"][0]["id"]
        .as_str()
        .map(str::to_string)
        .ok_or(BenchError::NoModel)
}

/// One streaming request, timed from the client.
pub async fn one_request(
    client: &reqwest::Client,
    a: &BenchArgs,
    model: &str,
    i: usize,
) -> RequestResult {
    let mut r = RequestResult::default();
    let p = prompt(i, a.input_len);
    let (path, body) = if a.chat {
        (
            "/v1/chat/completions",
            serde_json::json!({"model": model, "messages": [{"role": "user", "content": p}],
                "max_tokens": a.output_len, "ignore_eos": true, "stream": true,
                "stream_options": {"include_usage": true}}),
        )
    } else {
        (
            "/v1/completions",
            serde_json::json!({"model": model, "prompt": p, "max_tokens": a.output_len,
                "ignore_eos": true, "stream": true, "stream_options": {"include_usage": true}}),
        )
    };
    let mut req = client.post(format!("{}{}", a.url, path)).json(&body);
    if let Some(k) = &a.api_key {
        req = req.bearer_auth(k);
    }
    let st = Instant::now();
    let resp = match req.send().await {
        Ok(x) => x,
        Err(e) => {
            r.error = e.to_string();
            return r;
        }
    };
    if !resp.status().is_success() {
        r.error = format!("HTTP {}", resp.status());
        return r;
    }
    let mut stream = resp.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    let mut last = st;
    let mut chunks_with_text = 0usize;
    while let Some(item) = stream.next().await {
        let bytes = match item {
            Ok(b) => b,
            Err(e) => {
                r.error = e.to_string();
                return r;
            }
        };
        let now = Instant::now();
        buf.extend_from_slice(&bytes);
        while let Some(pos) = buf.windows(2).position(|w| w == b"\n\n") {
            let frame: Vec<u8> = buf.drain(..pos + 2).collect();
            let line = String::from_utf8_lossy(&frame);
            let Some(data) = line.trim().strip_prefix("data:") else {
                continue;
            };
            let data = data.trim();
            if data == "[DONE]" {
                continue;
            }
            let Ok(v) = serde_json::from_str::<serde_json::Value>(data) else {
                continue;
            };
            if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
                r.output_tokens = u["completion_tokens"].as_u64().unwrap_or(0) as usize;
                r.prompt_tokens = u["prompt_tokens"].as_u64().unwrap_or(0) as usize;
            }
            let c0 = &v["choices"][0];
            let text = if a.chat {
                c0["delta"]["content"].as_str().unwrap_or("")
            } else {
                c0["text"].as_str().unwrap_or("")
            };
            if !text.is_empty() {
                if chunks_with_text == 0 {
                    r.ttft_s = (now - st).as_secs_f64();
                } else {
                    r.itl_s.push((now - last).as_secs_f64());
                }
                chunks_with_text += 1;
                last = now;
            }
        }
    }
    r.e2e_s = (last.max(Instant::now()) - st).as_secs_f64();
    r.ok = chunks_with_text > 0;
    if !r.ok && r.error.is_empty() {
        r.error = "no text received".into();
    }
    r
}

/// Run the load and summarize it: a closed loop of `concurrency` clients, or (with a finite
/// `request_rate`) arrivals at that rate, at most `concurrency` in flight.
/// vLLM: `benchmarks/serve.py` (`benchmark`, `get_request`).
pub async fn run(a: BenchArgs) -> Result<BenchReport, BenchError> {
    let in_flight = a.concurrency.max(1).min(a.num_requests.max(1));
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(in_flight.min(1024))
        .timeout(Duration::from_secs_f64(a.timeout_s))
        .build()
        .map_err(BenchError::Client)?;
    let model = resolve_model(&client, &a).await?;
    let bar = progress_bar(a.num_requests, a.progress);
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    if a.request_rate.is_finite() {
        use rand::SeedableRng;
        let arrivals = twin_workload::ArrivalProcess {
            shape: if a.burstiness == 1.0 {
                twin_workload::ArrivalShape::Poisson
            } else {
                twin_workload::ArrivalShape::Gamma {
                    burstiness: a.burstiness,
                }
            },
            rate: twin_workload::RateProfile::Constant(a.request_rate),
        };
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(a.seed);
        let cap = Arc::new(tokio::sync::Semaphore::new(
            in_flight.min(tokio::sync::Semaphore::MAX_PERMITS),
        ));
        let mut t_s = 0.0;
        for i in 0..a.num_requests {
            if i > 0 {
                t_s = arrivals.next_after(t_s, &mut rng).unwrap_or(t_s);
            }
            tokio::time::sleep_until(tokio::time::Instant::from_std(
                t0 + Duration::from_secs_f64(t_s),
            ))
            .await;
            let Ok(permit) = cap.clone().acquire_owned().await else {
                break;
            };
            let (client, a, model, bar) = (client.clone(), a.clone(), model.clone(), bar.clone());
            tasks.push(tokio::spawn(async move {
                let r = one_request(&client, &a, &model, i).await;
                drop(permit);
                bar.inc(1);
                vec![r]
            }));
        }
    } else {
        let next = Arc::new(AtomicUsize::new(0));
        for _ in 0..in_flight {
            let (client, a, model, next, bar) = (
                client.clone(),
                a.clone(),
                model.clone(),
                next.clone(),
                bar.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let mut out = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= a.num_requests {
                        break;
                    }
                    out.push(one_request(&client, &a, &model, i).await);
                    bar.inc(1);
                }
                out
            }));
        }
    }
    let mut results = Vec::with_capacity(a.num_requests);
    for t in tasks {
        results.extend(t.await.map_err(BenchError::Worker)?);
    }
    bar.finish_and_clear();
    let duration_s = t0.elapsed().as_secs_f64();
    let mut r = report(&results, duration_s);
    r.request_rate = a.request_rate;
    r.max_concurrency = (a.concurrency != usize::MAX).then_some(a.concurrency);
    Ok(r)
}

/// A bar on stderr (hidden when not asked for, e.g. not a terminal or `--json`).
fn progress_bar(total: usize, shown: bool) -> indicatif::ProgressBar {
    if !shown {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(total as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} requests  {elapsed_precise} elapsed, ~{eta} left",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar
}

/// vLLM bench's `calculate_metrics` over client-side results.
pub fn report(results: &[RequestResult], duration_s: f64) -> BenchReport {
    let ok: Vec<&RequestResult> = results.iter().filter(|r| r.ok).collect();
    let mut errors: Vec<String> = results
        .iter()
        .filter(|r| !r.ok)
        .map(|r| r.error.clone())
        .collect();
    errors.sort();
    errors.dedup();
    let total_out: usize = ok.iter().map(|r| r.output_tokens).sum();
    let tpot: Vec<f64> = ok
        .iter()
        .filter(|r| r.output_tokens > 1)
        .map(|r| (r.e2e_s - r.ttft_s) / (r.output_tokens - 1) as f64)
        .collect();
    BenchReport {
        request_rate: f64::INFINITY,
        max_concurrency: None,
        completed: ok.len(),
        failed: results.len() - ok.len(),
        duration_s,
        total_input_tokens: ok.iter().map(|r| r.prompt_tokens).sum(),
        total_output_tokens: total_out,
        request_throughput: ok.len() as f64 / duration_s.max(1e-9),
        output_throughput: total_out as f64 / duration_s.max(1e-9),
        ttft: summarize(ok.iter().map(|r| r.ttft_s).collect()),
        tpot: summarize(tpot),
        itl: summarize(ok.iter().flat_map(|r| r.itl_s.iter().copied()).collect()),
        e2el: summarize(ok.iter().map(|r| r.e2e_s).collect()),
        errors,
    }
}

/// The text table, in `vllm bench serve`'s layout.
pub fn render(r: &BenchReport) -> String {
    let mut s = String::new();
    // vLLM: `"{:<40} {:<10}"`.
    let line = |s: &mut String, k: &str, v: String| s.push_str(&format!("{k:<40} {v:<10}\n"));
    s.push_str(&format!("{:=^50}\n", " Serving Benchmark Result "));
    line(&mut s, "Successful requests:", r.completed.to_string());
    line(&mut s, "Failed requests:", r.failed.to_string());
    if let Some(c) = r.max_concurrency {
        line(&mut s, "Maximum request concurrency:", c.to_string());
    }
    if r.request_rate.is_finite() {
        line(
            &mut s,
            "Request rate configured (RPS):",
            format!("{:.2}", r.request_rate),
        );
    }
    line(
        &mut s,
        "Benchmark duration (s):",
        format!("{:.2}", r.duration_s),
    );
    line(
        &mut s,
        "Total input tokens:",
        r.total_input_tokens.to_string(),
    );
    line(
        &mut s,
        "Total generated tokens:",
        r.total_output_tokens.to_string(),
    );
    line(
        &mut s,
        "Request throughput (req/s):",
        format!("{:.2}", r.request_throughput),
    );
    line(
        &mut s,
        "Output token throughput (tok/s):",
        format!("{:.2}", r.output_throughput),
    );
    for (title, name, m) in [
        ("Time to First Token", "TTFT", &r.ttft),
        ("Time per Output Token (excl. 1st token)", "TPOT", &r.tpot),
        ("Inter-token Latency", "ITL", &r.itl),
        ("End-to-end Latency", "E2EL", &r.e2el),
    ] {
        s.push_str(&format!("{:-^50}\n", title));
        line(
            &mut s,
            &format!("Mean {name} (ms):"),
            format!("{:.2}", m.mean_ms),
        );
        line(
            &mut s,
            &format!("Median {name} (ms):"),
            format!("{:.2}", m.median_ms),
        );
        line(
            &mut s,
            &format!("P90 {name} (ms):"),
            format!("{:.2}", m.p90_ms),
        );
        line(
            &mut s,
            &format!("P99 {name} (ms):"),
            format!("{:.2}", m.p99_ms),
        );
    }
    s.push_str(&"=".repeat(50));
    s.push('\n');
    for e in &r.errors {
        s.push_str(&format!("error: {e}\n"));
    }
    s
}

/// `bench-serve`'s flags; the aliases are `vllm bench serve`'s names for the same knobs.
#[derive(clap::Parser, Debug)]
#[command(
    name = "vllm-twin bench-serve",
    no_binary_name = true,
    about = "Load generator measuring TTFT / ITL / E2E client-side, like `vllm bench serve`."
)]
struct BenchCli {
    /// Server base URL, e.g. http://127.0.0.1:8000 (http:// is added when missing; a
    /// trailing /v1 is dropped).
    url: Option<String>,
    /// The server's base URL, as `vllm bench serve --base-url` (instead of URL).
    #[arg(long)]
    base_url: Option<String>,
    /// Requests in flight at most: the clients of a closed loop [default: 1], or the cap of
    /// an open loop at --request-rate [default: none].
    #[arg(long, visible_alias = "max-concurrency")]
    concurrency: Option<usize>,
    /// Open loop: requests per second, Poisson (or gamma, --burstiness) arrivals; inf: a
    /// closed loop of --concurrency clients.
    #[arg(long, default_value = "inf")]
    request_rate: String,
    /// Gamma shape of the inter-arrival gaps (1 = Poisson; smaller is burstier).
    #[arg(long, default_value_t = 1.0)]
    burstiness: f64,
    /// Seed of the arrival gaps.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Requests to send.
    #[arg(long, visible_alias = "num-prompts", default_value_t = 100)]
    num_requests: usize,
    /// Prompt length in tokens.
    #[arg(long, visible_alias = "random-input-len", default_value_t = 128)]
    input_len: usize,
    /// Tokens to generate per request.
    #[arg(long, visible_alias = "random-output-len", default_value_t = 128)]
    output_len: usize,
    /// Model name (default: the first one /v1/models lists).
    #[arg(long)]
    model: Option<String>,
    /// Bearer token.
    #[arg(long)]
    api_key: Option<String>,
    /// /v1/completions (default) or /v1/chat/completions.
    #[arg(long, default_value = "/v1/completions")]
    endpoint: String,
    /// Per-request timeout in seconds.
    #[arg(long, default_value_t = 600.0)]
    timeout: f64,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// No progress bar (it is drawn only on a terminal, and never with --json).
    #[arg(long)]
    quiet: bool,
}

/// `bench-serve`'s clap command (shell completions and man pages are made from it).
pub fn bench_command() -> clap::Command {
    <BenchCli as clap::CommandFactory>::command()
}

/// `bench-serve`'s usage and flags.
pub fn bench_help() -> String {
    <BenchCli as clap::CommandFactory>::command()
        .render_help()
        .to_string()
}

/// Parse `bench-serve URL --concurrency C --num-requests N ...` (`--a_b` spellings accepted).
pub fn parse_bench_args(args: &[String]) -> Result<BenchArgs, BenchArgsError> {
    use clap::Parser;
    // Like vLLM's parser: underscores in a flag's name are dashes.
    let argv = args.iter().map(|a| match a.strip_prefix("--") {
        Some(rest) => match rest.split_once('=') {
            Some((k, v)) => format!("--{}={v}", k.replace('_', "-")),
            None => format!("--{}", rest.replace('_', "-")),
        },
        None => a.clone(),
    });
    let cli = BenchCli::try_parse_from(argv).map_err(|e| {
        use clap::error::{ContextKind, ContextValue, ErrorKind};
        match (e.kind(), e.get(ContextKind::InvalidArg)) {
            (ErrorKind::UnknownArgument, Some(ContextValue::String(a))) if !a.starts_with('-') => {
                BenchArgsError::MoreThanOneUrl(a.clone())
            }
            _ => twin_sim::engine_args::clap_error(e, "bench-serve").into(),
        }
    })?;
    let url = match (cli.url, cli.base_url) {
        (Some(u), None) | (None, Some(u)) => u,
        (Some(_), Some(b)) => return Err(BenchArgsError::MoreThanOneUrl(b)),
        (None, None) => return Err(BenchArgsError::MissingUrl),
    };
    // Routes are appended to it: `http://h:8000/v1` (an OpenAI client's base) means the server.
    let trimmed = url.trim_end_matches('/');
    let mut url = trimmed.strip_suffix("/v1").unwrap_or(trimmed).to_string();
    if !url.starts_with("http://") && !url.starts_with("https://") {
        url = format!("http://{url}");
    }
    if !(cli.timeout.is_finite() && cli.timeout > 0.0) {
        return Err(BenchArgsError::Timeout);
    }
    let request_rate = match cli.request_rate.trim() {
        "inf" => f64::INFINITY,
        r => match r.parse::<f64>() {
            Ok(x) if x.is_finite() && x > 0.0 => x,
            _ => {
                return Err(BenchArgsError::RequestRate(format!(
                    "{r:?} is not a rate > 0 (or inf)"
                )))
            }
        },
    };
    if !(cli.burstiness.is_finite() && cli.burstiness > 0.0) {
        return Err(BenchArgsError::Burstiness(cli.burstiness));
    }
    let concurrency = match (cli.concurrency, request_rate.is_finite()) {
        (Some(c), _) => c.max(1),
        (None, false) => 1,
        (None, true) => usize::MAX,
    };
    use std::io::IsTerminal;
    Ok(BenchArgs {
        url,
        concurrency,
        request_rate,
        burstiness: cli.burstiness,
        seed: cli.seed,
        progress: !cli.quiet && !cli.json && std::io::stderr().is_terminal(),
        num_requests: cli.num_requests,
        input_len: cli.input_len,
        output_len: cli.output_len.max(1),
        model: cli.model,
        api_key: cli.api_key,
        chat: cli.endpoint.contains("chat"),
        json: cli.json,
        timeout_s: cli.timeout,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<BenchArgs, String> {
        let argv: Vec<String> = s.split_whitespace().map(str::to_string).collect();
        parse_bench_args(&argv).map_err(|e| e.to_string())
    }

    #[test]
    fn vllm_bench_serve_spellings_are_accepted() {
        let a = parse(
            "127.0.0.1:8000/ --max_concurrency 0 --num-prompts 7 --random-input-len=64 \
             --random-output-len 0 --endpoint /v1/chat/completions --json",
        )
        .unwrap();
        assert_eq!(a.url, "http://127.0.0.1:8000");
        assert_eq!((a.concurrency, a.num_requests), (1, 7));
        assert_eq!((a.input_len, a.output_len), (64, 1));
        assert!(a.chat && a.json);
        let d = parse("http://h:1").unwrap();
        assert_eq!(
            (d.concurrency, d.num_requests, d.timeout_s),
            (1, 100, 600.0)
        );
        assert!(!d.chat && !d.json);
        assert!(d.request_rate.is_infinite());
        // An OpenAI client's base URL, and vLLM's --base-url.
        assert_eq!(parse("http://h:1/v1/").unwrap().url, "http://h:1");
        assert_eq!(parse("--base-url h:1/v1").unwrap().url, "http://h:1");
        // Open loop: no cap unless asked.
        let o = parse("h:1 --request-rate 2.5 --burstiness 0.5 --seed 3").unwrap();
        assert_eq!((o.request_rate, o.burstiness, o.seed), (2.5, 0.5, 3));
        assert_eq!(o.concurrency, usize::MAX);
        let o = parse("h:1 --request-rate 2.5 --max-concurrency 8").unwrap();
        assert_eq!(o.concurrency, 8);
    }

    #[test]
    fn errors_name_the_flag() {
        let e = parse("http://h:1 --concurency 4").unwrap_err();
        assert!(e.contains("did you mean --concurrency"), "{e}");
        let e = parse("http://h:1 --num-requests many").unwrap_err();
        assert!(e.starts_with("--num-requests:"), "{e}");
        let e = parse("http://h:1 --json=maybe").unwrap_err();
        assert!(e.contains("--json"), "{e}");
        assert!(parse("--json").unwrap_err().contains("URL: missing"));
        assert!(parse("http://a http://b")
            .unwrap_err()
            .contains("more than one URL"));
        assert!(parse("http://h:1 --timeout 0")
            .unwrap_err()
            .contains("--timeout"));
        assert!(parse("h:1 --request-rate 0")
            .unwrap_err()
            .starts_with("--request-rate:"));
        assert!(parse("h:1 --burstiness=-1")
            .unwrap_err()
            .starts_with("--burstiness:"));
        assert!(parse("h:1 --base-url h:2")
            .unwrap_err()
            .contains("more than one URL"));
    }
}
