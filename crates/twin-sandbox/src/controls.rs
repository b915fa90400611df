//! What the page's controls say, checked, and turned into the argv `vllm-twin simulate`
//! would take (vLLM's flag names, parsed by `twin_sim::engine_args`), the equivalent
//! `vllm serve` line, and the equivalent `vllm-twin simulate` line.

use serde::{Deserialize, Serialize};

/// A bad control value: the control's name (as the page and the JSON use it) and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ControlError {
    pub field: String,
    pub message: String,
}

impl ControlError {
    pub fn new(field: &str, message: impl Into<String>) -> Self {
        ControlError {
            field: field.to_string(),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for ControlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for ControlError {}

/// How requests arrive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Traffic {
    /// Open loop: Poisson arrivals at `rate` requests per second.
    Rate,
    /// Closed loop: `concurrency` clients, each sending its next request when the last ends.
    Concurrency,
}

/// Every control of the page. Numbers set to 0 in the `Option`-like fields mean "vLLM's
/// default" (the flag is left out of the command line). Unknown fields are an error.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Controls {
    pub model: String,
    pub gpu: String,
    pub tp: u32,
    pub traffic: Traffic,
    /// Requests per second (open loop).
    pub rate: f64,
    /// Clients in flight (closed loop).
    pub concurrency: u32,
    /// Mean prompt length in tokens.
    pub prompt_mean: u32,
    /// Spread of the prompt length: lognormal sigma (0 = every prompt the same length).
    pub prompt_spread: f64,
    pub output_mean: u32,
    pub output_spread: f64,
    /// Share of requests starting with one of `prefix_groups` shared system prompts.
    pub prefix_share: f64,
    pub prefix_len: u32,
    pub prefix_groups: u32,
    /// Turns per multi-turn session (0 or 1: single requests).
    pub turns: u32,
    pub think_time_s: f64,
    /// `--max-model-len` (0 = the model's own, vLLM's default).
    pub max_model_len: u32,
    /// `--max-num-batched-tokens` (0 = vLLM's default for the GPU).
    pub max_num_batched_tokens: u32,
    /// `--max-num-seqs` (0 = vLLM's default).
    pub max_num_seqs: u32,
    /// `--max-num-active-seqs` (0 = unset).
    pub max_num_active_seqs: u32,
    /// `--long-prefill-token-threshold` (0 = off, vLLM's default).
    pub long_prefill_token_threshold: u32,
    pub long_prefill_adaptive: bool,
    pub kv_cache_dtype: String,
    /// `--gpu-memory-utilization` (0 = vLLM's default: 1.0 with 0.34's extensible KV cache).
    pub gpu_memory_utilization: f64,
    /// `--block-size` (0 = vLLM's default).
    pub block_size: u32,
    pub prefix_caching: bool,
    pub chunked_prefill: bool,
    pub enforce_eager: bool,
    /// Virtual seconds of traffic to simulate.
    pub duration_s: f64,
    pub seed: u64,
    /// Fleet: vLLM replicas behind `router` (1 = one engine, no fleet).
    pub replicas: u32,
    /// `--router`: round-robin, least-loaded, session-affinity, prefix-aware, random.
    pub router: String,
    /// An HPA scaling the fleet (1–8 replicas): `off`, `waiting` (num_requests_waiting > 3)
    /// or `kv` (kv_cache_usage_perc > 0.65).
    pub autoscale: String,
}

impl Default for Controls {
    fn default() -> Self {
        Controls {
            model: "meta-llama/Llama-3.1-8B-Instruct".into(),
            gpu: "h100-sxm".into(),
            tp: 1,
            traffic: Traffic::Rate,
            rate: 10.0,
            concurrency: 64,
            prompt_mean: 700,
            prompt_spread: 0.9,
            output_mean: 220,
            output_spread: 0.8,
            prefix_share: 0.3,
            prefix_len: 512,
            prefix_groups: 4,
            turns: 0,
            think_time_s: 5.0,
            max_model_len: 0,
            max_num_batched_tokens: 0,
            max_num_seqs: 0,
            max_num_active_seqs: 0,
            long_prefill_token_threshold: 0,
            long_prefill_adaptive: false,
            kv_cache_dtype: "auto".into(),
            gpu_memory_utilization: 0.0,
            block_size: 0,
            prefix_caching: true,
            chunked_prefill: true,
            enforce_eager: false,
            duration_s: 300.0,
            seed: 0,
            replicas: 1,
            router: "round-robin".into(),
            autoscale: "off".into(),
        }
    }
}

/// The KV cache dtypes the page offers (vLLM 0.34's `--kv-cache-dtype` choices the twin models).
pub const KV_CACHE_DTYPES: &[&str] = &["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "nvfp4"];
/// `--block-size` values the page offers (0 = default). vLLM 0.34 takes any positive integer,
/// but every CUDA attention backend needs a multiple of 16.
pub const BLOCK_SIZES: &[u32] = &[0, 16, 32, 64, 128];
/// Most replicas the page runs.
pub const MAX_REPLICAS: u32 = 16;
/// The page's autoscaler choices: (control value, HPA metric, target, the file name the
/// `vllm-twin simulate` line names).
pub const AUTOSCALERS: &[(&str, &str, &str, &str)] = &[
    (
        "waiting",
        "vllm_num_requests_waiting",
        "3",
        "hpa-waiting.yaml",
    ),
    ("kv", "vllm_kv_cache_usage_perc", "0.65", "hpa-kv.yaml"),
];
/// Longest run the sandbox accepts, in virtual seconds.
pub const MAX_DURATION_S: f64 = 3600.0;
/// Requests one open-loop run may offer (rate × duration × turns). A run past the engine's
/// capacity keeps what it cannot serve waiting, in memory, so what is offered is what is held.
pub const MAX_OFFERED_REQUESTS: f64 = 250_000.0;
/// Prompt tokens one run may offer (open loop) or hold in flight (closed loop): ~1 GiB of
/// token ids at worst.
pub const MAX_OFFERED_PROMPT_TOKENS: f64 = 2.5e8;

fn range_f(field: &str, v: f64, lo: f64, hi: f64, lo_open: bool) -> Result<(), ControlError> {
    let ok = v.is_finite() && v <= hi && if lo_open { v > lo } else { v >= lo };
    if ok {
        Ok(())
    } else {
        let open = if lo_open { "(" } else { "[" };
        Err(ControlError::new(
            field,
            format!("{v} is out of range {open}{lo}, {hi}]"),
        ))
    }
}

fn range_u(field: &str, v: u32, lo: u32, hi: u32) -> Result<(), ControlError> {
    if (lo..=hi).contains(&v) {
        Ok(())
    } else {
        Err(ControlError::new(
            field,
            format!("{v} is out of range [{lo}, {hi}]"),
        ))
    }
}

fn length_spec(mean: u32, spread: f64) -> String {
    if spread <= 0.0 {
        mean.to_string()
    } else {
        format!("lognormal:mean={mean},sigma={spread}")
    }
}

impl Controls {
    /// Parse the page's JSON; a missing field takes its default, an unknown one is an error.
    pub fn from_json(text: &str) -> Result<Controls, ControlError> {
        let c: Controls = serde_json::from_str(text).map_err(|e| {
            // serde names the field in its message ("unknown field `x`", "invalid type ... for `y`").
            ControlError::new("controls", e.to_string())
        })?;
        c.validate()?;
        Ok(c)
    }

    /// Range checks with the control's own name. The simulator's parser and vLLM's start-up
    /// checks run after these (their errors name vLLM's flag).
    pub fn validate(&self) -> Result<(), ControlError> {
        if self.model.trim().is_empty() {
            return Err(ControlError::new("model", "must name a catalog model"));
        }
        if self.gpu.trim().is_empty() {
            return Err(ControlError::new("gpu", "must name a catalog GPU"));
        }
        if !self.tp.is_power_of_two() || self.tp > 8 {
            return Err(ControlError::new(
                "tp",
                format!("{} must be 1, 2, 4 or 8", self.tp),
            ));
        }
        range_f("rate", self.rate, 0.0, 10_000.0, true)?;
        range_u("concurrency", self.concurrency, 1, 16_384)?;
        range_u("prompt_mean", self.prompt_mean, 1, 1_048_576)?;
        range_f("prompt_spread", self.prompt_spread, 0.0, 3.0, false)?;
        range_u("output_mean", self.output_mean, 1, 1_048_576)?;
        range_f("output_spread", self.output_spread, 0.0, 3.0, false)?;
        range_f("prefix_share", self.prefix_share, 0.0, 1.0, false)?;
        range_u("prefix_len", self.prefix_len, 1, 1_048_576)?;
        range_u("prefix_groups", self.prefix_groups, 1, 1024)?;
        range_u("turns", self.turns, 0, 100)?;
        range_f("think_time_s", self.think_time_s, 0.0, 3600.0, false)?;
        range_u("max_model_len", self.max_model_len, 0, 16_777_216)?;
        range_u(
            "max_num_batched_tokens",
            self.max_num_batched_tokens,
            0,
            1_048_576,
        )?;
        range_u("max_num_seqs", self.max_num_seqs, 0, 16_384)?;
        range_u("max_num_active_seqs", self.max_num_active_seqs, 0, 16_384)?;
        range_u(
            "long_prefill_token_threshold",
            self.long_prefill_token_threshold,
            0,
            1_048_576,
        )?;
        if !KV_CACHE_DTYPES.contains(&self.kv_cache_dtype.as_str()) {
            return Err(ControlError::new(
                "kv_cache_dtype",
                format!(
                    "{:?} is not one of {}",
                    self.kv_cache_dtype,
                    KV_CACHE_DTYPES.join(", ")
                ),
            ));
        }
        range_f(
            "gpu_memory_utilization",
            self.gpu_memory_utilization,
            0.0,
            1.0,
            false,
        )?;
        if !BLOCK_SIZES.contains(&self.block_size) {
            return Err(ControlError::new(
                "block_size",
                format!(
                    "{} is not one of 16, 32, 64, 128 (0 = default)",
                    self.block_size
                ),
            ));
        }
        range_f("duration_s", self.duration_s, 0.0, MAX_DURATION_S, true)?;
        range_u("replicas", self.replicas, 1, MAX_REPLICAS)?;
        self.router
            .parse::<twin_sim::fleet::RouterKind>()
            .map_err(|e| ControlError::new("router", e))?;
        if self.autoscale != "off" && !AUTOSCALERS.iter().any(|a| a.0 == self.autoscale) {
            return Err(ControlError::new(
                "autoscale",
                format!("{:?} is not one of off, waiting, kv", self.autoscale),
            ));
        }
        self.check_offered_load()
    }

    /// The run's size as a whole (docs/limits.md): each field may be in range while their
    /// product is not.
    fn check_offered_load(&self) -> Result<(), ControlError> {
        let turns = f64::from(self.turns.max(1));
        let prompt = f64::from(self.prompt_mean);
        match self.traffic {
            Traffic::Rate => {
                let requests = self.rate * self.duration_s * turns;
                if requests > MAX_OFFERED_REQUESTS {
                    return Err(ControlError::new(
                        "rate",
                        format!(
                            "rate × duration_s{} offers {requests:.0} requests; a sandbox run takes at most {MAX_OFFERED_REQUESTS:.0}: lower the rate or the duration",
                            if self.turns > 1 { " × turns" } else { "" }
                        ),
                    ));
                }
                if requests * prompt > MAX_OFFERED_PROMPT_TOKENS {
                    return Err(ControlError::new(
                        "prompt_mean",
                        format!(
                            "{requests:.0} requests × {} prompt tokens offer {:.3e} tokens; a sandbox run takes at most {MAX_OFFERED_PROMPT_TOKENS:.1e}: shorten the prompts, lower the rate or the duration",
                            self.prompt_mean,
                            requests * prompt
                        ),
                    ));
                }
            }
            Traffic::Concurrency => {
                let in_flight = f64::from(self.concurrency) * prompt;
                if in_flight > MAX_OFFERED_PROMPT_TOKENS {
                    return Err(ControlError::new(
                        "concurrency",
                        format!(
                            "{} clients × {} prompt tokens hold {in_flight:.3e} tokens in flight; a sandbox run takes at most {MAX_OFFERED_PROMPT_TOKENS:.1e}",
                            self.concurrency, self.prompt_mean
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The `vllm serve` flags these controls set (vLLM's names; defaults left out).
    pub fn vllm_flags(&self) -> Vec<String> {
        let mut a: Vec<String> = Vec::new();
        let mut kv = |k: &str, v: String| {
            a.push(k.to_string());
            a.push(v);
        };
        if self.tp != 1 {
            kv("--tensor-parallel-size", self.tp.to_string());
        }
        if self.gpu_memory_utilization > 0.0 {
            kv(
                "--gpu-memory-utilization",
                format!("{}", self.gpu_memory_utilization),
            );
        }
        if self.kv_cache_dtype != "auto" {
            kv("--kv-cache-dtype", self.kv_cache_dtype.clone());
        }
        if self.max_model_len > 0 {
            kv("--max-model-len", self.max_model_len.to_string());
        }
        if self.block_size > 0 {
            kv("--block-size", self.block_size.to_string());
        }
        if self.max_num_batched_tokens > 0 {
            kv(
                "--max-num-batched-tokens",
                self.max_num_batched_tokens.to_string(),
            );
        }
        if self.max_num_seqs > 0 {
            kv("--max-num-seqs", self.max_num_seqs.to_string());
        }
        if self.max_num_active_seqs > 0 {
            kv(
                "--max-num-active-seqs",
                self.max_num_active_seqs.to_string(),
            );
        }
        if self.long_prefill_token_threshold > 0 {
            kv(
                "--long-prefill-token-threshold",
                self.long_prefill_token_threshold.to_string(),
            );
        }
        if self.long_prefill_adaptive {
            a.push("--long-prefill-token-threshold-adaptive".into());
        }
        if !self.prefix_caching {
            a.push("--no-enable-prefix-caching".into());
        }
        if !self.chunked_prefill {
            a.push("--no-enable-chunked-prefill".into());
        }
        if self.enforce_eager {
            a.push("--enforce-eager".into());
        }
        if self.seed != 0 {
            a.push("--seed".into());
            a.push(self.seed.to_string());
        }
        a
    }

    /// The twin's workload flags (`vllm-twin simulate`'s own).
    pub fn twin_flags(&self) -> Vec<String> {
        let mut a = vec!["--gpu".to_string(), self.gpu.clone()];
        match self.traffic {
            Traffic::Rate => {
                a.push("--request-rate".into());
                a.push(format!("{}", self.rate));
            }
            Traffic::Concurrency => {
                a.push("--max-concurrency".into());
                a.push(self.concurrency.to_string());
            }
        }
        a.push("--num-requests".into());
        a.push(self.num_requests().to_string());
        a.push("--input-len".into());
        a.push(length_spec(self.prompt_mean, self.prompt_spread));
        a.push("--output-len".into());
        a.push(length_spec(self.output_mean, self.output_spread));
        a.push("--shared-prefix".into());
        a.push(if self.prefix_share > 0.0 {
            format!(
                "groups={},len={},share={}",
                self.prefix_groups, self.prefix_len, self.prefix_share
            )
        } else {
            "none".into()
        });
        if self.turns > 1 {
            a.push("--multi-turn".into());
            a.push(self.turns.to_string());
            a.push("--think-time".into());
            a.push(format!("{}s", self.think_time_s.max(0.001)));
        }
        a.extend(self.fleet_flags());
        a.push("--quiet".into());
        a
    }

    /// Whether the controls ask for a fleet (more than one replica, a router, an autoscaler).
    pub fn is_fleet(&self) -> bool {
        self.replicas > 1 || self.router != "round-robin" || self.autoscale != "off"
    }

    /// `--replicas N --router R [--autoscale FILE]` for a fleet; nothing for one engine.
    pub fn fleet_flags(&self) -> Vec<String> {
        if !self.is_fleet() {
            return Vec::new();
        }
        let mut a = vec![
            "--replicas".to_string(),
            self.replicas.to_string(),
            "--router".to_string(),
            self.router.clone(),
        ];
        if let Some(&(_, _, _, file)) = AUTOSCALERS.iter().find(|x| x.0 == self.autoscale) {
            a.extend(["--autoscale".to_string(), file.to_string()]);
        }
        a
    }

    /// Requests the workload may issue: enough to keep arriving past the horizon (the run
    /// stops at `duration_s`; see `runs`).
    pub fn num_requests(&self) -> u64 {
        let per_s = match self.traffic {
            Traffic::Rate => self.rate,
            // A closed-loop client issues at most one request per (tiny) round trip.
            Traffic::Concurrency => f64::from(self.concurrency) * 50.0,
        };
        // Each session issues `turns` requests; the rate is of sessions.
        let turns = f64::from(self.turns.max(1));
        ((per_s * turns * self.duration_s * 1.2).ceil() as u64 + 16).min(50_000_000)
    }

    /// The full argv for `twin_sim::engine_args::parse_simulate_args`.
    pub fn simulate_argv(&self) -> Vec<String> {
        let mut a = vec![self.model.clone()];
        a.extend(self.vllm_flags());
        a.extend(self.twin_flags());
        a
    }

    /// `vllm serve MODEL ...`: what to paste on a real server.
    pub fn serve_command(&self) -> String {
        let mut parts = vec!["vllm".to_string(), "serve".to_string(), self.model.clone()];
        parts.extend(self.vllm_flags());
        shell_join(&parts)
    }

    /// `vllm-twin simulate ...`: the same run from the command line.
    pub fn simulate_command(&self) -> String {
        let mut parts = vec!["vllm-twin".to_string(), "simulate".to_string()];
        parts.extend(self.simulate_argv().into_iter().filter(|a| a != "--quiet"));
        shell_join(&parts)
    }
}

/// Join for a POSIX shell, quoting what needs it.
pub fn shell_join(parts: &[String]) -> String {
    parts
        .iter()
        .map(|p| {
            let safe = !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./:=,+@%".contains(c));
            if safe {
                p.clone()
            } else {
                format!("'{}'", p.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_give_a_bare_serve_line() {
        let c = Controls::default();
        assert_eq!(
            c.serve_command(),
            "vllm serve meta-llama/Llama-3.1-8B-Instruct"
        );
        c.validate().unwrap();
    }

    #[test]
    fn flags_use_vllm_names() {
        let c = Controls {
            max_num_batched_tokens: 2048,
            max_num_active_seqs: 96,
            kv_cache_dtype: "fp8".into(),
            prefix_caching: false,
            enforce_eager: true,
            tp: 2,
            ..Controls::default()
        };
        assert_eq!(
            c.serve_command(),
            "vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 2 --kv-cache-dtype fp8 \
             --max-num-batched-tokens 2048 --max-num-active-seqs 96 --no-enable-prefix-caching --enforce-eager"
        );
    }

    #[test]
    fn bad_values_name_the_control() {
        let e = Controls::from_json(r#"{"rate": -1}"#).unwrap_err();
        assert_eq!(e.field, "rate");
        // In range one by one, too big together (the 9 GB run of issue 17).
        let e = Controls::from_json(r#"{"rate": 10000, "duration_s": 3600}"#).unwrap_err();
        assert_eq!(e.field, "rate");
        assert!(e.message.contains("36000000 requests"), "{}", e.message);
        let e = Controls::from_json(r#"{"rate": 50, "duration_s": 3600, "prompt_mean": 100000}"#)
            .unwrap_err();
        assert_eq!(e.field, "prompt_mean");
        let e = Controls::from_json(
            r#"{"traffic": "concurrency", "concurrency": 16384, "prompt_mean": 1000000}"#,
        )
        .unwrap_err();
        assert_eq!(e.field, "concurrency");
        Controls::from_json(r#"{"rate": 60, "duration_s": 3600}"#).unwrap();
        let e = Controls::from_json(r#"{"kv_cache_dtype": "int3"}"#).unwrap_err();
        assert_eq!(e.field, "kv_cache_dtype");
        let e = Controls::from_json(r#"{"bogus": 1}"#).unwrap_err();
        assert!(e.message.contains("bogus"), "{e}");
        let e = Controls::from_json(r#"{"tp": "two"}"#).unwrap_err();
        assert!(e.message.contains("invalid type"), "{e}");
        let e = Controls::from_json("not json").unwrap_err();
        assert_eq!(e.field, "controls");
    }
}
