//! Oracle scenario files (`shared/oracle/README.md` section 3), resolved exactly as
//! `vllm_sched_oracle.py resolve_requests` does, with errors that name the field.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use twin_engine::{KvTransfer, SchedulerConfig, SchedulingPolicy};

use crate::ScenarioError;

/// The oracle's engine defaults, in its key order (`ENGINE_DEFAULTS`).
fn engine_defaults() -> Map<String, Value> {
    let v = serde_json::json!({
        "block_size": 16,
        "num_gpu_blocks": 1024,
        "max_num_batched_tokens": 2048,
        "max_num_seqs": 128,
        "max_num_active_seqs": null,
        "long_prefill_token_threshold": 0,
        "long_prefill_token_threshold_adaptive": false,
        "enable_prefix_caching": true,
        "enable_chunked_prefill": true,
        "max_model_len": 4096,
        "policy": "fcfs",
        "watermark": 0.0,
        "scheduler_reserve_full_isl": true,
        "prefill_schedule_interval": 1,
        "cache_aware_admission_window": 0,
        "cache_aware_admission_threshold": 0.5,
        "num_speculative_tokens": 0,
        "async_scheduling": false,
        "allow_kv_smaller_than_max_model_len": false
    });
    match v {
        Value::Object(m) => m,
        _ => unreachable!(),
    }
}

/// One request after generator expansion and prompt synthesis.
#[derive(Clone, Debug)]
pub struct ResolvedRequest {
    pub index: usize,
    pub id: String,
    pub arrival_step: u64,
    pub prompt_token_ids: Vec<u32>,
    pub max_tokens: usize,
    pub priority: i64,
    pub stop_after_tokens: Option<u64>,
    pub stop_at_step: Option<u64>,
    pub abort_step: Option<u64>,
    pub prefix_group: Option<String>,
    pub cache_salt: Option<String>,
    pub spec_accept: Option<Vec<usize>>,
    /// P/D (scripts/oracle_pd.py): the request's `kv_transfer_params` role, and how many
    /// steps after its load starts (or it finishes) the worker reports the transfer done.
    pub kv_transfer: KvTransfer,
    pub kv_load_steps: u64,
    pub kv_send_steps: u64,
}

/// The most steps a scenario's transfer may take.
pub const MAX_KV_TRANSFER_STEPS: u64 = 1 << 20;

/// A scenario ready to run.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub name: String,
    /// The resolved engine object as the trace header shows it.
    pub engine_json: Map<String, Value>,
    pub config: SchedulerConfig,
    pub max_steps: u64,
    pub requests: Vec<ResolvedRequest>,
    /// The fake offloading worker's delays (`engine.kv_offload_load_steps` /
    /// `kv_offload_store_steps`, scripts/oracle_offload.py): a job planned at step k is
    /// reported done in the output of step k + delay.
    pub offload_load_steps: u64,
    pub offload_store_steps: u64,
    /// `engine.dp_prefill_interval` (scripts/oracle_dp.py): an MoE model's DP engine core
    /// throttles prefills on every step whose index is not a multiple of it (1: never).
    pub dp_prefill_interval: u64,
}

/// `synth_tokens(seed, n)`: sha256 counter mode, 8 little-endian words per digest.
pub fn synth_tokens(seed: &str, n: usize) -> Vec<u32> {
    let mut out = Vec::with_capacity(n + 8);
    let mut ctr = 0u64;
    while out.len() < n {
        let digest = Sha256::digest(format!("{seed}#{ctr}").as_bytes());
        for w in digest.chunks_exact(4) {
            let v = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
            out.push(100 + v % (32000 - 100));
        }
        ctr += 1;
    }
    out.truncate(n);
    out
}

fn field_err(field: impl Into<String>, message: impl Into<String>) -> ScenarioError {
    ScenarioError::Field {
        field: field.into(),
        message: message.into(),
    }
}

fn as_u64(v: &Value, field: &str) -> Result<u64, ScenarioError> {
    match v {
        Value::Number(n) => n
            .as_u64()
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                    .map(|f| f as u64)
            })
            .ok_or_else(|| field_err(field, format!("expected a non-negative integer, got {v}"))),
        _ => Err(field_err(
            field,
            format!("expected a non-negative integer, got {v}"),
        )),
    }
}

fn as_i64(v: &Value, field: &str) -> Result<i64, ScenarioError> {
    v.as_i64()
        .ok_or_else(|| field_err(field, format!("expected an integer, got {v}")))
}

fn as_bool(v: &Value, field: &str) -> Result<bool, ScenarioError> {
    v.as_bool()
        .ok_or_else(|| field_err(field, format!("expected true or false, got {v}")))
}

fn as_f64(v: &Value, field: &str) -> Result<f64, ScenarioError> {
    v.as_f64()
        .ok_or_else(|| field_err(field, format!("expected a number, got {v}")))
}

/// `kv_load_steps` / `kv_send_steps`: default 1, bounded.
fn transfer_steps(v: Option<&Value>, field: &str) -> Result<u64, ScenarioError> {
    let n = opt_u64(v, field)?.unwrap_or(1);
    if n > MAX_KV_TRANSFER_STEPS {
        return Err(field_err(
            field,
            format!("{n}: at most {MAX_KV_TRANSFER_STEPS} steps"),
        ));
    }
    Ok(n)
}

fn opt_u64(v: Option<&Value>, field: &str) -> Result<Option<u64>, ScenarioError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(x) => as_u64(x, field).map(Some),
    }
}

/// A generator value: a scalar, or a list cycled by index.
fn cycled(v: &Value, i: usize) -> &Value {
    match v {
        Value::Array(a) if !a.is_empty() => &a[i % a.len()],
        _ => v,
    }
}

const REQUEST_KEYS: [&str; 7] = [
    "priority",
    "stop_after_tokens",
    "stop_at_step",
    "abort_step",
    "cache_salt",
    "spec_accept",
    "prefix_len",
];

/// vLLM harness: `expand_generators`.
fn expand_generators(scn: &Map<String, Value>) -> Result<Vec<Map<String, Value>>, ScenarioError> {
    let mut reqs = Vec::new();
    if let Some(v) = scn.get("requests") {
        let arr = v
            .as_array()
            .ok_or_else(|| field_err("requests", "expected a list"))?;
        for (i, r) in arr.iter().enumerate() {
            let m = r
                .as_object()
                .ok_or_else(|| field_err(format!("requests[{i}]"), "expected an object"))?;
            reqs.push(m.clone());
        }
    }
    if let Some(v) = scn.get("generate") {
        let gens = v
            .as_array()
            .ok_or_else(|| field_err("generate", "expected a list"))?;
        for (gi, g) in gens.iter().enumerate() {
            let at = |k: &str| format!("generate[{gi}].{k}");
            let g = g
                .as_object()
                .ok_or_else(|| field_err(format!("generate[{gi}]"), "expected an object"))?;
            let count = as_u64(
                g.get("count")
                    .ok_or_else(|| field_err(at("count"), "missing"))?,
                &at("count"),
            )?;
            if count > MAX_REQUESTS as u64 {
                return Err(field_err(
                    at("count"),
                    format!("{count} requests; a scenario holds at most {MAX_REQUESTS}"),
                ));
            }
            let prefix = match g.get("id_prefix") {
                None => "g".to_string(),
                Some(Value::String(s)) => s.clone(),
                Some(x) => x.to_string(),
            };
            let start = opt_u64(g.get("arrival_start"), &at("arrival_start"))?.unwrap_or(0);
            let every = opt_u64(g.get("arrival_every"), &at("arrival_every"))?.unwrap_or(0);
            let max_tokens = g
                .get("max_tokens")
                .ok_or_else(|| field_err(at("max_tokens"), "missing"))?;
            let prompt_len = g
                .get("prompt_len")
                .ok_or_else(|| field_err(at("prompt_len"), "missing"))?;
            for i in 0..count as usize {
                let mut r = Map::new();
                r.insert("id".into(), Value::String(format!("{prefix}{i}")));
                let arrival = (i as u64)
                    .checked_mul(every)
                    .and_then(|x| x.checked_add(start))
                    .ok_or_else(|| {
                        field_err(at("arrival_every"), "arrival steps overflow 64 bits")
                    })?;
                r.insert("arrival_step".into(), Value::from(arrival));
                r.insert("max_tokens".into(), cycled(max_tokens, i).clone());
                r.insert("prompt_len".into(), cycled(prompt_len, i).clone());
                if let Some(pg) = g.get("prefix_group") {
                    r.insert("prefix_group".into(), cycled(pg, i).clone());
                }
                for key in REQUEST_KEYS {
                    if let Some(v) = g.get(key) {
                        let val = if key == "spec_accept" {
                            // A list of ints is the pattern; a list of lists is cycled.
                            match v {
                                Value::Array(a) if a.first().is_some_and(Value::is_array) => {
                                    a[i % a.len()].clone()
                                }
                                _ => v.clone(),
                            }
                        } else {
                            cycled(v, i).clone()
                        };
                        r.insert(key.into(), val);
                    }
                }
                reqs.push(r);
            }
        }
    }
    Ok(reqs)
}

/// Requests one scenario may hold (after `generate` expands).
pub const MAX_REQUESTS: usize = 100_000;
/// Prompt tokens in one scenario, all requests together (scenarios are small, hand-checked
/// cases; 92,830 generated prompts of 1,201 tokens once took a minute to synthesise).
pub const MAX_PROMPT_TOKENS: usize = 1 << 20;

/// The longest scenario name (it becomes a file name: `<name>.jsonl`).
pub const MAX_NAME_BYTES: usize = 200;

/// A scenario's name is the stem of its trace file (`conformance run --out-dir DIR` writes
/// `DIR/<name>.jsonl`), so it must not leave DIR: no separators, no `..`, no hidden files.
fn check_name(name: &str) -> Result<String, ScenarioError> {
    let plain = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
    if name.is_empty() || name.len() > MAX_NAME_BYTES || !plain || name.starts_with('.') {
        return Err(field_err(
            "name",
            format!(
                "{name:?} is not a plain file name: use 1 to {MAX_NAME_BYTES} of A-Z a-z 0-9 _ - . (not starting with .)"
            ),
        ));
    }
    Ok(name.to_string())
}

/// Parse a scenario; `source` names the file in errors.
pub fn parse_scenario(text: &str) -> Result<Scenario, ScenarioError> {
    let root: Value = serde_json::from_str(text).map_err(|e| ScenarioError::Json {
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })?;
    let scn = root
        .as_object()
        .ok_or_else(|| field_err("<root>", "a scenario is a JSON object"))?;
    let name = match scn.get("name") {
        Some(Value::String(s)) => check_name(s)?,
        Some(x) => return Err(field_err("name", format!("expected a string, got {x}"))),
        None => return Err(field_err("name", "missing")),
    };
    let mut eng = engine_defaults();
    if let Some(e) = scn.get("engine") {
        let e = e
            .as_object()
            .ok_or_else(|| field_err("engine", "expected an object"))?;
        for (k, v) in e {
            eng.insert(k.clone(), v.clone());
        }
    }
    let config = engine_config(&eng)?;
    let max_steps = opt_u64(scn.get("max_steps"), "max_steps")?.unwrap_or(100_000);
    let requests = resolve_requests(scn)?;
    if requests.len() > MAX_REQUESTS {
        return Err(field_err(
            "requests",
            format!(
                "{} requests; a scenario holds at most {MAX_REQUESTS}",
                requests.len()
            ),
        ));
    }
    validate(&eng, &config, &requests)?;
    let offload_load_steps = transfer_steps(
        eng.get("kv_offload_load_steps"),
        "engine.kv_offload_load_steps",
    )?;
    let offload_store_steps = transfer_steps(
        eng.get("kv_offload_store_steps"),
        "engine.kv_offload_store_steps",
    )?;
    let dp_prefill_interval =
        opt_u64(eng.get("dp_prefill_interval"), "engine.dp_prefill_interval")?.unwrap_or(1);
    if dp_prefill_interval == 0 {
        return Err(field_err("engine.dp_prefill_interval", "must be >= 1"));
    }
    Ok(Scenario {
        offload_load_steps,
        offload_store_steps,
        dp_prefill_interval,
        name,
        engine_json: eng,
        config,
        max_steps,
        requests,
    })
}

fn engine_config(eng: &Map<String, Value>) -> Result<SchedulerConfig, ScenarioError> {
    let g = |k: &str| eng.get(k).expect("defaults hold every key");
    let f = |k: &str| format!("engine.{k}");
    let usize_of = |k: &str| -> Result<usize, ScenarioError> { Ok(as_u64(g(k), &f(k))? as usize) };
    let policy = match g("policy").as_str() {
        Some("fcfs") => SchedulingPolicy::Fcfs,
        Some("priority") => SchedulingPolicy::Priority,
        _ => {
            return Err(field_err(
                "engine.policy",
                format!(
                    "unknown policy {}; expected \"fcfs\" or \"priority\"",
                    g("policy")
                ),
            ))
        }
    };
    let mnbt = usize_of("max_num_batched_tokens")?;
    let connector = match eng.get("kv_connector") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s == "nixl" || s == "offload" => Some(s.as_str()),
        Some(v) => {
            return Err(field_err(
                "engine.kv_connector",
                format!("{v}: the twin models \"nixl\" and \"offload\" (or none)"),
            ))
        }
    };
    let config = SchedulerConfig {
        block_size: usize_of("block_size")?,
        num_gpu_blocks: usize_of("num_gpu_blocks")?,
        max_num_batched_tokens: mnbt,
        max_num_scheduled_tokens: mnbt,
        max_num_seqs: usize_of("max_num_seqs")?,
        max_num_active_seqs: opt_u64(eng.get("max_num_active_seqs"), "engine.max_num_active_seqs")?
            .map(|x| x as usize),
        long_prefill_token_threshold: usize_of("long_prefill_token_threshold")?,
        long_prefill_token_threshold_adaptive: as_bool(
            g("long_prefill_token_threshold_adaptive"),
            &f("long_prefill_token_threshold_adaptive"),
        )?,
        enable_prefix_caching: as_bool(g("enable_prefix_caching"), &f("enable_prefix_caching"))?,
        enable_chunked_prefill: as_bool(g("enable_chunked_prefill"), &f("enable_chunked_prefill"))?,
        max_model_len: usize_of("max_model_len")?,
        policy,
        watermark: as_f64(g("watermark"), &f("watermark"))?,
        scheduler_reserve_full_isl: as_bool(
            g("scheduler_reserve_full_isl"),
            &f("scheduler_reserve_full_isl"),
        )?,
        prefill_schedule_interval: usize_of("prefill_schedule_interval")?,
        cache_aware_admission_window: usize_of("cache_aware_admission_window")?,
        cache_aware_admission_threshold: as_f64(
            g("cache_aware_admission_threshold"),
            &f("cache_aware_admission_threshold"),
        )?,
        num_speculative_tokens: usize_of("num_speculative_tokens")?,
        num_lookahead_tokens: 0,
        draft_slots: 0,
        // scripts/oracle_pd.py: vLLM's NIXL connector; scripts/oracle_offload.py: its
        // OffloadingConnector. Both run as `kv_role: kv_both`.
        kv_consumer: connector.is_some(),
        kv_offload_cpu_blocks: match connector {
            Some("offload") => Some(
                opt_u64(
                    eng.get("kv_offload_cpu_blocks"),
                    "engine.kv_offload_cpu_blocks",
                )?
                .ok_or_else(|| {
                    field_err(
                        "engine.kv_offload_cpu_blocks",
                        "required with kv_connector \"offload\"",
                    )
                })? as usize,
            ),
            _ => None,
        },
        async_scheduling: as_bool(g("async_scheduling"), &f("async_scheduling"))?,
        pipeline_parallel_size: 1,
        kv_cache_metrics_sample: None,
        kv_cache_metrics_seed: 0,
    };
    config
        .validate()
        .map_err(|e| field_err(format!("engine.{}", e.field), e.message))?;
    Ok(config)
}

/// vLLM harness: `resolve_requests`.
fn resolve_requests(scn: &Map<String, Value>) -> Result<Vec<ResolvedRequest>, ScenarioError> {
    let groups = match scn.get("prefix_groups") {
        None => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => return Err(field_err("prefix_groups", "expected an object")),
    };
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut total_prompt_tokens = 0usize;
    for (idx, r) in expand_generators(scn)?.into_iter().enumerate() {
        let id = match r.get("id") {
            Some(Value::String(s)) => s.clone(),
            Some(x) => x.to_string(),
            None => return Err(field_err(format!("requests[{idx}].id"), "missing")),
        };
        let at = |k: &str| format!("request {id}: {k}");
        if !seen.insert(id.clone()) {
            return Err(field_err(at("id"), format!("duplicate request id {id}")));
        }
        let prompt_token_ids = if let Some(toks) = r.get("prompt_token_ids") {
            let arr = toks
                .as_array()
                .ok_or_else(|| field_err(at("prompt_token_ids"), "expected a list of token ids"))?;
            arr.iter()
                .map(|t| as_u64(t, &at("prompt_token_ids")).map(|x| x as u32))
                .collect::<Result<Vec<_>, _>>()?
        } else {
            let plen = as_u64(
                r.get("prompt_len").ok_or_else(|| {
                    field_err(at("prompt_len"), "missing (or give prompt_token_ids)")
                })?,
                &at("prompt_len"),
            )? as usize;
            // Checked before the prompt's tokens are made.
            total_prompt_tokens = total_prompt_tokens.saturating_add(plen);
            if total_prompt_tokens > MAX_PROMPT_TOKENS {
                return Err(field_err(
                    at("prompt_len"),
                    format!(
                        "{plen} tokens ({total_prompt_tokens} in the scenario so far); a scenario's prompts hold at most {MAX_PROMPT_TOKENS}"
                    ),
                ));
            }
            let mut toks = Vec::new();
            if let Some(g) = r.get("prefix_group").filter(|v| !v.is_null()) {
                let g = g
                    .as_str()
                    .ok_or_else(|| field_err(at("prefix_group"), "expected a string"))?;
                let glen = match r.get("prefix_len") {
                    Some(v) => as_u64(v, &at("prefix_len"))? as usize,
                    None => match groups.get(g).and_then(|x| x.get("len")) {
                        Some(v) => as_u64(v, &format!("prefix_groups.{g}.len"))? as usize,
                        None => 0,
                    },
                };
                if glen > plen {
                    return Err(field_err(
                        at("prefix_len"),
                        format!("prefix_len {glen} > prompt_len {plen}"),
                    ));
                }
                toks = synth_tokens(&format!("prefix:{g}"), glen);
            }
            let rest = plen - toks.len();
            toks.extend(synth_tokens(&format!("req:{id}"), rest));
            toks
        };
        let spec_accept = match r.get("spec_accept") {
            None | Some(Value::Null) => None,
            Some(Value::Array(a)) => {
                let v = a
                    .iter()
                    .map(|x| as_u64(x, &at("spec_accept")).map(|x| x as usize))
                    .collect::<Result<Vec<_>, _>>()?;
                if v.is_empty() {
                    return Err(field_err(at("spec_accept"), "must be non-negative ints"));
                }
                Some(v)
            }
            Some(x) => Some(vec![as_u64(x, &at("spec_accept"))? as usize]),
        };
        let max_tokens = as_u64(
            r.get("max_tokens")
                .ok_or_else(|| field_err(at("max_tokens"), "missing"))?,
            &at("max_tokens"),
        )? as usize;
        // The scheduler adds max_tokens to the prompt length: 6e17 once overflowed it.
        if max_tokens > twin_engine::config::MAX_TOKENS {
            return Err(field_err(
                at("max_tokens"),
                format!(
                    "{max_tokens} is beyond the twin's limit of {}",
                    twin_engine::config::MAX_TOKENS
                ),
            ));
        }
        out.push(ResolvedRequest {
            index: idx,
            arrival_step: opt_u64(r.get("arrival_step"), &at("arrival_step"))?.unwrap_or(0),
            prompt_token_ids,
            max_tokens,
            priority: match r.get("priority") {
                None | Some(Value::Null) => 0,
                Some(v) => as_i64(v, &at("priority"))?,
            },
            stop_after_tokens: opt_u64(r.get("stop_after_tokens"), &at("stop_after_tokens"))?,
            stop_at_step: opt_u64(r.get("stop_at_step"), &at("stop_at_step"))?,
            abort_step: opt_u64(r.get("abort_step"), &at("abort_step"))?,
            prefix_group: r
                .get("prefix_group")
                .and_then(|v| v.as_str())
                .map(str::to_string),
            cache_salt: match r.get("cache_salt") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(x) => Some(x.to_string()),
            },
            spec_accept,
            kv_transfer: match r.get("kv_transfer") {
                None | Some(Value::Null) => KvTransfer::None,
                Some(Value::String(s)) if s == "load_from_remote" => KvTransfer::LoadFromRemote,
                Some(Value::String(s)) if s == "send_to_remote" => KvTransfer::SendToRemote,
                Some(v) => {
                    return Err(field_err(
                        at("kv_transfer"),
                        format!("{v}: expected \"load_from_remote\" or \"send_to_remote\""),
                    ))
                }
            },
            kv_load_steps: transfer_steps(r.get("kv_load_steps"), &at("kv_load_steps"))?,
            kv_send_steps: transfer_steps(r.get("kv_send_steps"), &at("kv_send_steps"))?,
            id,
        });
    }
    Ok(out)
}

/// vLLM harness: `validate_scenario` (EngineCore start-up and per-request checks).
fn validate(
    eng: &Map<String, Value>,
    config: &SchedulerConfig,
    reqs: &[ResolvedRequest],
) -> Result<(), ScenarioError> {
    let allow_small = eng
        .get("allow_kv_smaller_than_max_model_len")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if !allow_small {
        config
            .check_pool_holds_max_model_len()
            .map_err(|e| field_err("engine.num_gpu_blocks", e.message))?;
    }
    for r in reqs {
        let plen = r.prompt_token_ids.len();
        if plen == 0 || plen >= config.max_model_len {
            return Err(field_err(
                format!("request {}: prompt", r.id),
                format!(
                    "prompt length {plen} must be in [1, max_model_len={})",
                    config.max_model_len
                ),
            ));
        }
        if r.max_tokens < 1 {
            return Err(field_err(
                format!("request {}: max_tokens", r.id),
                "must be >= 1",
            ));
        }
        if r.spec_accept.is_some() && config.num_speculative_tokens == 0 {
            return Err(field_err(
                format!("request {}: spec_accept", r.id),
                "needs engine.num_speculative_tokens > 0",
            ));
        }
    }
    Ok(())
}
