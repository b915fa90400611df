//! What a report was made from, so report.json says what was run and can run it again
//! (`simulate --from report.json`): the command line, the twin's version, and what start-up
//! made of it (model, GPUs, the memory plan, the scheduler's limits, the workload in words).

use serde::{Deserialize, Serialize};

use crate::engine_args::SimulateArgs;
use crate::Startup;

/// `report.json`'s `run.schema`: bump when `command` stops meaning what it meant.
pub const RUN_SCHEMA: &str = "vllm-twin-run/1";

/// `report.json`'s `run` object.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RunInfo {
    pub schema: String,
    pub twin_version: String,
    /// The arguments after `vllm-twin simulate`, as given (`--from` replays them).
    pub command: Vec<String>,
    pub model: String,
    pub gpu: String,
    /// "2 × h100-sxm (TP 2)".
    pub gpus: String,
    pub tensor_parallel_size: u32,
    pub pipeline_parallel_size: u32,
    pub data_parallel_size: usize,
    pub seed: u64,
    /// The offered load in words (`twin_sim::overload::describe_offered_load`).
    pub workload: String,
    pub num_requests: usize,
    pub num_gpu_blocks: u64,
    pub block_size: usize,
    pub kv_cache_tokens: u64,
    pub max_model_len: usize,
    pub max_num_batched_tokens: usize,
    pub max_num_seqs: usize,
    pub enable_prefix_caching: bool,
    pub async_scheduling: bool,
    pub kv_cache_dtype: String,
    pub weights: String,
}

impl RunInfo {
    pub fn new(
        command: &[String],
        twin_version: &str,
        sim: &SimulateArgs,
        startup: &Startup,
    ) -> RunInfo {
        let c = &startup.plan.config;
        let s = &startup.scheduler;
        RunInfo {
            schema: RUN_SCHEMA.to_string(),
            twin_version: twin_version.to_string(),
            command: command.to_vec(),
            model: sim.model_name.clone(),
            gpu: startup.plan.gpu_key.to_string(),
            gpus: startup.gpus_phrase(sim.config.data_parallel_size),
            tensor_parallel_size: c.tensor_parallel_size,
            pipeline_parallel_size: c.pipeline_parallel_size,
            data_parallel_size: sim.config.data_parallel_size,
            seed: sim.config.seed,
            workload: crate::overload::describe_offered_load(&sim.config.workload),
            num_requests: sim.config.workload.num_requests,
            num_gpu_blocks: startup.plan.num_gpu_blocks,
            block_size: s.block_size,
            kv_cache_tokens: startup.plan.kv_cache_tokens,
            max_model_len: s.max_model_len,
            max_num_batched_tokens: s.max_num_batched_tokens,
            max_num_seqs: s.max_num_seqs,
            enable_prefix_caching: s.enable_prefix_caching,
            async_scheduling: s.async_scheduling,
            kv_cache_dtype: format!("{:?}", c.kv_cache_dtype).to_lowercase(),
            weights: format!("{:?}", c.weight_format).to_lowercase(),
        }
    }

    /// One line for the text report: how to run this again.
    pub fn render_text(&self) -> String {
        format!(
            "run: vllm-twin {} simulate {} (seed {})\n",
            self.twin_version,
            shell_words(&self.command),
            self.seed
        )
    }
}

/// The arguments quoted for a POSIX shell where they need it.
pub fn shell_words(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_=.,:/@+%".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Flags that say where results go, not what runs: a replay drops the recorded ones.
pub const OUTPUT_FLAGS: &[&str] = &[
    "out",
    "json",
    "quiet",
    "metrics-out",
    "scrapes-out",
    "scrape-interval",
];

#[derive(Debug, thiserror::Error)]
pub enum FromError {
    #[error("{path}: {message}")]
    Report { path: String, message: String },
}

/// `--from report.json [flags]`: the recorded command with `extra` flags replacing the same
/// flags in it (`takes_value(name)` says whether `--name` consumes the next argument).
pub fn replay_command(
    path: &str,
    report_json: &str,
    extra: &[String],
    takes_value: &dyn Fn(&str) -> bool,
) -> Result<Vec<String>, FromError> {
    let err = |message: String| FromError::Report {
        path: path.to_string(),
        message,
    };
    let v: serde_json::Value =
        serde_json::from_str(report_json).map_err(|e| err(format!("not JSON: {e}")))?;
    let run = v
        .get("run")
        .ok_or_else(|| err("no `run` object: not a report.json written by simulate --out (vllm-twin 0.x reports before it had one cannot be replayed)".into()))?;
    let schema = run.get("schema").and_then(|s| s.as_str()).unwrap_or("");
    if schema != RUN_SCHEMA {
        return Err(err(format!(
            "run.schema is {schema:?}; this vllm-twin reads {RUN_SCHEMA:?}"
        )));
    }
    let command: Vec<String> = serde_json::from_value(
        run.get("command")
            .cloned()
            .ok_or_else(|| err("run.command is missing".into()))?,
    )
    .map_err(|e| err(format!("run.command: {e}")))?;
    let key = |a: &str| -> Option<String> {
        let name = a.strip_prefix("--")?;
        let name = name.split_once('=').map_or(name, |p| p.0);
        let name = name.replace('_', "-");
        Some(name.strip_prefix("no-").map(str::to_string).unwrap_or(name))
    };
    // A replay writes nothing the first run wrote unless asked again: output flags stay behind.
    let mut overridden: Vec<String> = OUTPUT_FLAGS.iter().map(|f| f.to_string()).collect();
    overridden.extend(extra.iter().filter_map(|a| key(a)));
    let mut out = Vec::with_capacity(command.len() + extra.len());
    let mut i = 0;
    while i < command.len() {
        let a = &command[i];
        match key(a) {
            Some(k) if overridden.contains(&k) => {
                // Drop the flag and, when it is `--flag value`, its value.
                let joined = a.contains('=');
                i += if !joined && takes_value(&k) { 2 } else { 1 };
            }
            _ => {
                out.push(a.clone());
                i += 1;
            }
        }
    }
    let mut expects_value = false;
    for a in extra {
        match key(a) {
            Some(k) => expects_value = !a.contains('=') && takes_value(&k),
            None if expects_value => expects_value = false,
            None => {
                return Err(err(format!(
                    "{a:?}: with --from, give flags only (the model comes from the report)"
                )))
            }
        }
    }
    out.extend(extra.iter().cloned());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    fn report(cmd: &[&str]) -> String {
        serde_json::json!({"run": {"schema": RUN_SCHEMA, "command": cmd}}).to_string()
    }

    #[test]
    fn extra_flags_replace_the_recorded_ones() {
        let takes = |k: &str| k != "json" && k != "enable-prefix-caching";
        let rec = report(&[
            "meta-llama/Llama-3.1-8B-Instruct",
            "--out",
            "run1",
            "--json",
            "--max-num-seqs",
            "64",
            "--request-rate=5",
            "--enable-prefix-caching",
            "--seed",
            "3",
        ]);
        let got = replay_command(
            "r.json",
            &rec,
            &s(&[
                "--max_num_seqs",
                "128",
                "--request-rate",
                "9",
                "--no-enable-prefix-caching",
            ]),
            &takes,
        )
        .unwrap();
        assert_eq!(
            got,
            s(&[
                "meta-llama/Llama-3.1-8B-Instruct",
                "--seed",
                "3",
                "--max_num_seqs",
                "128",
                "--request-rate",
                "9",
                "--no-enable-prefix-caching"
            ])
        );
    }

    #[test]
    fn a_file_that_is_not_a_report_says_why() {
        let takes = |_: &str| true;
        let e = replay_command("x.json", "{}", &[], &takes).unwrap_err();
        assert!(e.to_string().starts_with("x.json: no `run` object"), "{e}");
        let e = replay_command("x.json", "nope", &[], &takes).unwrap_err();
        assert!(e.to_string().contains("not JSON"), "{e}");
        let bad = serde_json::json!({"run": {"schema": "vllm-twin-run/99", "command": []}});
        let e = replay_command("x.json", &bad.to_string(), &[], &takes).unwrap_err();
        assert!(e.to_string().contains("vllm-twin-run/99"), "{e}");
        let e =
            replay_command("x.json", &report(&["m"]), &s(&["other-model"]), &takes).unwrap_err();
        assert!(e.to_string().contains("flags only"), "{e}");
    }
}
