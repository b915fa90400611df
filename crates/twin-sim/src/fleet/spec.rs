//! `--replica-spec FILE`: a heterogeneous fleet as a list of pools, each with its own vLLM
//! flags and replica count, in YAML (or JSON) or TOML (by the `.toml` extension):
//!
//! ```yaml
//! pools:
//!   - name: tp1
//!     replicas: 4
//!     args: --tensor-parallel-size 1
//!   - name: tp4
//!     replicas: 1
//!     args: [--tensor-parallel-size, "4", --gpu, a100-80gb]
//! ```
//!
//! A pool may take a `role` (`prefill` or `decode`) for P/D disaggregation: then every pool
//! has one, and the prefill pools' KV reaches the decode pools over `--kv-transfer-gbps`.
//!
//! A pool's `args` are appended to the command line (argparse: the last value wins), so the
//! model, GPU and flags given there are every pool's defaults. Traffic flags are fleet-wide:
//! a pool that changes the workload is refused.

use serde::Deserialize;

use crate::engine_args::parse_simulate_args;
use crate::SimError;

use super::{Pool, PoolRole, MAX_REPLICAS};

/// The flags that describe the fleet itself: never inside a pool's `args`.
pub const FLEET_FLAGS: &[&str] = &[
    "--replicas",
    "--router",
    "--replica-spec",
    "--autoscale",
    "--weight-load-gbps",
    "--preload",
    "--prefix-scorer-weight",
    "--queue-scorer-weight",
    "--kv-cache-scorer-weight",
    "--pd",
    "--kv-transfer-gbps",
    "--kv-transfer-latency",
];

/// The largest replica-spec file read, in bytes.
pub const MAX_SPEC_BYTES: usize = 1 << 20;
/// The most pools in one spec.
pub const MAX_POOLS: usize = 64;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecFile {
    pools: Vec<PoolEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PoolEntry {
    name: String,
    replicas: usize,
    #[serde(default)]
    args: Args,
    #[serde(default)]
    role: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Args {
    Line(String),
    List(Vec<String>),
}

impl Default for Args {
    fn default() -> Self {
        Args::List(Vec::new())
    }
}

/// One pool as the file gives it.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolSpec {
    pub name: String,
    pub replicas: usize,
    pub args: Vec<String>,
    pub role: PoolRole,
}

fn spec_err(path: &str, field: impl Into<String>, message: impl Into<String>) -> SimError {
    SimError::Config {
        field: format!("{path}: {}", field.into()),
        message: message.into(),
    }
}

/// Parse a replica spec. `path` names the file in errors and picks the format.
pub fn parse_replica_spec(path: &str, text: &str) -> Result<Vec<PoolSpec>, SimError> {
    if text.len() > MAX_SPEC_BYTES {
        return Err(spec_err(
            path,
            "size",
            format!(
                "{} bytes; a replica spec is at most {MAX_SPEC_BYTES}",
                text.len()
            ),
        ));
    }
    let file: SpecFile = if path.ends_with(".toml") {
        toml::from_str(text).map_err(|e| {
            let at = e
                .span()
                .map(|s| {
                    let line = text[..s.start.min(text.len())].matches('\n').count() + 1;
                    format!("line {line}")
                })
                .unwrap_or_else(|| "file".into());
            spec_err(path, at, e.message().to_string())
        })?
    } else {
        serde_norway::from_str(text).map_err(|e| {
            let at = e
                .location()
                .map(|l| format!("line {}", l.line()))
                .unwrap_or_else(|| "file".into());
            // serde_norway's message already says where; keep its first sentence's path.
            spec_err(path, at, e.to_string())
        })?
    };
    if file.pools.is_empty() {
        return Err(spec_err(path, "pools", "no pools; list at least one"));
    }
    if file.pools.len() > MAX_POOLS {
        return Err(spec_err(
            path,
            "pools",
            format!("{} pools; at most {MAX_POOLS}", file.pools.len()),
        ));
    }
    let mut out: Vec<PoolSpec> = Vec::with_capacity(file.pools.len());
    let mut total = 0usize;
    for (i, p) in file.pools.into_iter().enumerate() {
        let field = |f: &str| format!("pools[{i}].{f}");
        let valid_name = !p.name.is_empty()
            && p.name.len() <= 52
            && p.name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !p.name.starts_with('-')
            && !p.name.ends_with('-');
        if !valid_name {
            return Err(spec_err(
                path,
                field("name"),
                format!(
                    "{:?}: a pool name becomes pod names: 1-52 of a-z, 0-9 and '-', not starting or ending with '-'",
                    p.name
                ),
            ));
        }
        if out.iter().any(|o| o.name == p.name) {
            return Err(spec_err(
                path,
                field("name"),
                format!("{:?} is used by an earlier pool", p.name),
            ));
        }
        if p.replicas == 0 {
            return Err(spec_err(path, field("replicas"), "at least 1"));
        }
        total = total.saturating_add(p.replicas);
        if total > MAX_REPLICAS {
            return Err(spec_err(
                path,
                field("replicas"),
                format!("the pools add up to more than {MAX_REPLICAS} replicas"),
            ));
        }
        let args = match p.args {
            Args::Line(l) => l.split_whitespace().map(str::to_string).collect(),
            Args::List(v) => v,
        };
        if let Some(a) = args
            .iter()
            .find(|a| FLEET_FLAGS.contains(&a.split('=').next().unwrap_or(a)))
        {
            return Err(spec_err(
                path,
                field("args"),
                format!("{a} describes the fleet; give it on the command line, not in a pool"),
            ));
        }
        let role = match p.role.as_deref() {
            None => PoolRole::Both,
            Some("prefill") => PoolRole::Prefill,
            Some("decode") => PoolRole::Decode,
            Some(other) => {
                return Err(spec_err(
                    path,
                    field("role"),
                    format!("{other:?}: prefill or decode (or no role: both)"),
                ))
            }
        };
        out.push(PoolSpec {
            name: p.name,
            replicas: p.replicas,
            args,
            role,
        });
    }
    Ok(out)
}

/// Start every pool: the command line `base` (without its fleet flags) plus the pool's args,
/// parsed and started as `simulate` would one engine. A pool whose flags change the workload,
/// or that vLLM would refuse to start, is an error naming the pool.
pub fn build_pools(
    path: &str,
    specs: &[PoolSpec],
    base: &[String],
    read_file: &dyn Fn(&str) -> Result<String, String>,
) -> Result<Vec<Pool>, SimError> {
    let base_args = without_fleet_flags(base);
    let base_workload = parse_simulate_args(&base_args, read_file)?.config.workload;
    specs
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let field = format!("pools[{i}].args ({})", p.name);
            let mut argv = base_args.clone();
            argv.extend(p.args.iter().cloned());
            let parsed = parse_simulate_args(&argv, read_file)
                .map_err(|e| spec_err(path, &field, e.to_string()))?;
            if parsed.config.workload != base_workload {
                return Err(spec_err(
                    path,
                    &field,
                    "changes the workload; traffic is fleet-wide, give its flags on the command line",
                ));
            }
            let startup = crate::startup(&parsed.config).map_err(|e| {
                let message = match &e {
                    SimError::Cost(c) => c.vllm_message(),
                    other => other.to_string(),
                };
                spec_err(path, &field, message)
            })?;
            Ok(Pool {
                name: p.name.clone(),
                replicas: p.replicas,
                role: p.role,
                config: parsed.config,
                startup,
            })
        })
        .collect()
}

/// `argv` without the fleet's own flags (and their values).
pub fn without_fleet_flags(argv: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(argv.len());
    let mut skip_value = false;
    for a in argv {
        if skip_value {
            skip_value = false;
            continue;
        }
        let key = a.split('=').next().unwrap_or(a);
        if FLEET_FLAGS.contains(&key) {
            // `--preload` is a switch; the others take a value.
            skip_value = !a.contains('=') && key != "--preload";
            continue;
        }
        out.push(a.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_and_toml_give_the_same_pools() {
        let yaml = "pools:\n  - name: tp1\n    replicas: 4\n    args: --tensor-parallel-size 1\n  - name: tp4\n    replicas: 1\n    args: [--tensor-parallel-size, \"4\"]\n";
        let toml = "[[pools]]\nname = \"tp1\"\nreplicas = 4\nargs = \"--tensor-parallel-size 1\"\n[[pools]]\nname = \"tp4\"\nreplicas = 1\nargs = [\"--tensor-parallel-size\", \"4\"]\n";
        let a = parse_replica_spec("f.yaml", yaml).unwrap();
        let b = parse_replica_spec("f.toml", toml).unwrap();
        assert_eq!(a, b);
        assert_eq!(a[1].args, ["--tensor-parallel-size", "4"]);
    }

    #[test]
    fn errors_name_the_file_and_the_field() {
        let e = parse_replica_spec("f.yaml", "pools:\n  - name: a\n    replicas: 0\n").unwrap_err();
        assert!(e.to_string().contains("f.yaml: pools[0].replicas"), "{e}");
        let e = parse_replica_spec("f.yaml", "pools:\n  - name: a\n    replica: 2\n").unwrap_err();
        assert!(e.to_string().starts_with("f.yaml: line 3"), "{e}");
        let e =
            parse_replica_spec("f.yaml", "pools:\n  - name: A_b\n    replicas: 1\n").unwrap_err();
        assert!(e.to_string().contains("pools[0].name"), "{e}");
        let e =
            parse_replica_spec("f.toml", "[[pools]]\nname = \"a\"\nreplicas = -1\n").unwrap_err();
        assert!(e.to_string().starts_with("f.toml: line 3"), "{e}");
        let e = parse_replica_spec(
            "f.yaml",
            "pools:\n  - name: a\n    replicas: 1\n    args: --replicas 3\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("describes the fleet"), "{e}");
    }

    #[test]
    fn fleet_flags_are_dropped_with_their_values() {
        let argv: Vec<String> = ["--replicas", "4", "--router=random", "--max-num-seqs", "8"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(without_fleet_flags(&argv), ["--max-num-seqs", "8"]);
    }
}
