//! The search space: axes of vLLM flag values, the default grid, `--search NAME=V1,V2` and the
//! candidates (the grid's points, in a fixed order) as `vllm serve` flags.

use serde::{Deserialize, Serialize};

use crate::TuneError;

/// The n-gram proposer `speculative=ngram` stands for: vLLM's documented prompt-lookup example.
pub const NGRAM_SPECULATIVE_CONFIG: &str =
    r#"{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4}"#;

/// One searched dimension: a name (`max-num-seqs`) and its values, in the order given.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Axis {
    pub name: String,
    pub values: Vec<String>,
}

/// Names `--search` accepts: vLLM flags (without `--`) and three of the twin's own.
pub const AXIS_NAMES: &[&str] = &[
    "max-num-batched-tokens",
    "max-num-seqs",
    "max-num-active-seqs",
    "long-prefill-token-threshold",
    "kv-cache-dtype",
    "gpu-memory-utilization",
    "block-size",
    "enable-prefix-caching",
    "kv-offloading-size",
    "speculative",
    "split",
];

/// The vLLM flags an axis sets (so a base command line that gives one fixes that axis).
fn axis_flags(name: &str) -> &'static [&'static str] {
    match name {
        "max-num-batched-tokens" => &["--max-num-batched-tokens"],
        "max-num-seqs" => &["--max-num-seqs"],
        "max-num-active-seqs" => &["--max-num-active-seqs"],
        "long-prefill-token-threshold" => &["--long-prefill-token-threshold"],
        "kv-cache-dtype" => &["--kv-cache-dtype"],
        "gpu-memory-utilization" => &["--gpu-memory-utilization"],
        "block-size" => &["--block-size"],
        "enable-prefix-caching" => &["--enable-prefix-caching", "--no-enable-prefix-caching"],
        "kv-offloading-size" => &["--kv-offloading-size"],
        "speculative" => &["--speculative-config"],
        "split" => &[
            "--tensor-parallel-size",
            "--data-parallel-size",
            "--replicas",
        ],
        _ => &[],
    }
}

/// The ways to use exactly `gpus` GPUs, TP ascending: one `vllm serve` of `TP x DP`, then
/// `TPx1xR`, R > 1 replicas of a TP engine behind a router (the AMD blog's "minimum TP plus
/// several instances"; DP inside each replica as well would only multiply the grid).
pub fn splits(gpus: usize) -> Vec<String> {
    let tps = || (1..=gpus).filter(|tp| gpus.is_multiple_of(*tp));
    tps()
        .map(|tp| format!("{tp}x{}", gpus / tp))
        .chain(
            tps()
                .filter(|tp| *tp < gpus)
                .map(|tp| format!("{tp}x1x{}", gpus / tp)),
        )
        .collect()
}

/// The default grid: the knobs that move the sustainable rate most, at values around vLLM's
/// defaults (4 × 4 × 2 × 2 × 2 = 128 configs per TP × DP split). The other axes stay at vLLM's
/// defaults unless `--search` names them.
pub fn default_axes(gpus: usize) -> Vec<Axis> {
    let axis = |name: &str, values: &[&str]| Axis {
        name: name.into(),
        values: values.iter().map(|v| v.to_string()).collect(),
    };
    let mut axes = vec![
        axis("max-num-batched-tokens", &["2048", "4096", "8192", "16384"]),
        axis("max-num-seqs", &["64", "128", "256", "512"]),
        axis("kv-cache-dtype", &["auto", "fp8"]),
        axis("enable-prefix-caching", &["true", "false"]),
        axis("speculative", &["off", "ngram"]),
    ];
    let s = splits(gpus);
    if s.len() > 1 {
        axes.push(Axis {
            name: "split".into(),
            values: s,
        });
    }
    axes
}

fn bad(field: &str, message: impl Into<String>) -> TuneError {
    TuneError::Spec {
        field: field.into(),
        message: message.into(),
    }
}

/// `NAME=V1,V2,...` (one `--search`). `default` as a value leaves the flag unset (vLLM's
/// default); `split` values are `TPxDP` (one `vllm serve`) or `TPxDPxR` (R replicas of it
/// behind the base line's `--router`); `speculative` values are `off` or `ngram`.
pub fn parse_search(arg: &str) -> Result<Axis, TuneError> {
    let (name, values) = arg
        .split_once('=')
        .ok_or_else(|| bad("--search", format!("{arg:?}: expected NAME=V1,V2,...")))?;
    let name = name.trim().trim_start_matches("--").replace('_', "-");
    if !AXIS_NAMES.contains(&name.as_str()) {
        return Err(bad(
            "--search",
            format!("unknown axis {name:?}; known: {}", AXIS_NAMES.join(", ")),
        ));
    }
    let values: Vec<String> = values.split(',').map(|v| v.trim().to_string()).collect();
    if values.iter().any(String::is_empty) {
        return Err(bad(
            "--search",
            format!("{arg:?}: an empty value (write `default` for vLLM's default)"),
        ));
    }
    for v in &values {
        let ok = match name.as_str() {
            "speculative" => v == "off" || v == "ngram",
            "enable-prefix-caching" => v == "true" || v == "false" || v == "default",
            "split" => parse_split(v).is_some(),
            _ => true,
        };
        if !ok {
            return Err(bad(
                "--search",
                format!(
                    "{name}: {v:?} is not a value of this axis ({})",
                    match name.as_str() {
                        "speculative" => "off or ngram",
                        "enable-prefix-caching" => "true, false or default",
                        _ => "TPxDP or TPxDPxR, e.g. 2x4 or 1x1x4",
                    }
                ),
            ));
        }
    }
    Ok(Axis { name, values })
}

/// `TPxDP` or `TPxDPxR` as (tp, dp, replicas).
fn parse_split(v: &str) -> Option<(usize, usize, usize)> {
    let parts: Vec<usize> = v
        .split('x')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let (tp, dp, r) = match parts[..] {
        [tp, dp] => (tp, dp, 1),
        [tp, dp, r] => (tp, dp, r),
        _ => return None,
    };
    let ok = |n: usize| (1..=1024).contains(&n);
    (ok(tp) && ok(dp) && ok(r)).then_some((tp, dp, r))
}

/// The axes a sweep searches: the default grid with each `--search` replacing (or adding) its
/// axis, minus default axes whose flag the base command line already sets. An explicit
/// `--search` for a flag the base line sets is an error (which value should win?).
pub fn resolve_axes(
    gpus: usize,
    searched: &[Axis],
    base_args: &[String],
) -> Result<Vec<Axis>, TuneError> {
    let given = |a: &Axis| {
        base_args.iter().any(|arg| {
            let key = arg.split('=').next().unwrap_or(arg).replace('_', "-");
            axis_flags(&a.name).contains(&key.as_str())
        })
    };
    let mut axes: Vec<Axis> = default_axes(gpus)
        .into_iter()
        .filter(|a| !given(a))
        .collect();
    for s in searched {
        if given(s) {
            return Err(bad(
                "--search",
                format!(
                    "{} is searched and also set on the command line; drop one",
                    s.name
                ),
            ));
        }
        match axes.iter_mut().find(|a| a.name == s.name) {
            Some(a) => a.values = s.values.clone(),
            None => axes.push(s.clone()),
        }
    }
    // Axis order is part of the candidates' order (and so of ties and shards): keep the table's.
    axes.sort_by_key(|a| AXIS_NAMES.iter().position(|n| *n == a.name));
    Ok(axes)
}

/// Number of grid points (saturating: a space too big to enumerate is refused by the caller).
pub fn grid_size(axes: &[Axis]) -> usize {
    axes.iter()
        .fold(1usize, |n, a| n.saturating_mul(a.values.len()))
}

/// The flags for one axis value (empty for `default` / `off`).
pub fn value_flags(axis: &str, value: &str) -> Vec<String> {
    match (axis, value) {
        (_, "default") | ("speculative", "off") => vec![],
        ("speculative", _) => vec![
            "--speculative-config".into(),
            NGRAM_SPECULATIVE_CONFIG.into(),
        ],
        ("enable-prefix-caching", "true") => vec!["--enable-prefix-caching".into()],
        ("enable-prefix-caching", _) => vec!["--no-enable-prefix-caching".into()],
        ("split", v) => {
            let (tp, dp, replicas) = parse_split(v).unwrap_or((1, 1, 1));
            let mut flags = vec![
                "--tensor-parallel-size".into(),
                tp.to_string(),
                "--data-parallel-size".into(),
                dp.to_string(),
            ];
            if replicas > 1 {
                flags.extend(["--replicas".into(), replicas.to_string()]);
            }
            flags
        }
        (name, v) => vec![format!("--{name}"), v.to_string()],
    }
}

/// The i-th grid point (the last axis varies fastest) as `vllm serve` flags.
pub fn candidate_flags(axes: &[Axis], mut index: usize) -> Vec<String> {
    let mut picks = vec![0; axes.len()];
    for (k, a) in axes.iter().enumerate().rev() {
        let n = a.values.len().max(1);
        picks[k] = index % n;
        index /= n;
    }
    axes.iter()
        .zip(picks)
        .flat_map(|(a, i)| value_flags(&a.name, &a.values[i]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_tier_is_a_searchable_axis() {
        let axes = resolve_axes(
            1,
            &[parse_search("kv-offloading-size=default,16,64").unwrap()],
            &[],
        )
        .unwrap();
        assert_eq!(grid_size(&axes), 128 * 3);
        let a = axes
            .iter()
            .find(|a| a.name == "kv-offloading-size")
            .unwrap();
        assert!(value_flags(&a.name, &a.values[0]).is_empty());
        assert_eq!(
            value_flags(&a.name, &a.values[2]),
            ["--kv-offloading-size", "64"]
        );
    }

    #[test]
    fn default_grid_has_128_points_per_split_and_a_split_axis_for_several_gpus() {
        assert_eq!(grid_size(&default_axes(1)), 128);
        assert_eq!(splits(4), vec!["1x4", "2x2", "4x1", "1x1x4", "2x1x2"]);
        assert_eq!(grid_size(&default_axes(4)), 640);
        assert_eq!(
            value_flags("split", "2x1x2"),
            vec![
                "--tensor-parallel-size",
                "2",
                "--data-parallel-size",
                "1",
                "--replicas",
                "2"
            ]
        );
        assert_eq!(value_flags("split", "2x2").len(), 4);
    }

    #[test]
    fn search_replaces_an_axis_and_flags_on_the_base_line_fix_theirs() {
        let s = parse_search("max-num-seqs=64,default").unwrap();
        let base = vec!["--kv-cache-dtype".to_string(), "fp8".to_string()];
        let axes = resolve_axes(1, &[s], &base).unwrap();
        let seqs = axes.iter().find(|a| a.name == "max-num-seqs").unwrap();
        assert_eq!(seqs.values, vec!["64", "default"]);
        assert!(axes.iter().all(|a| a.name != "kv-cache-dtype"));
        let dup = parse_search("kv-cache-dtype=auto").unwrap();
        assert!(resolve_axes(1, &[dup], &base).is_err());
    }

    #[test]
    fn bad_searches_name_the_problem() {
        for (arg, says) in [
            ("max-num-seqs", "NAME=V1"),
            ("max-seqs=1", "unknown axis"),
            ("split=2by2", "TPxDP"),
            ("split=1x1x1x1", "TPxDPxR"),
            ("speculative=eagle", "off or ngram"),
            ("max-num-seqs=1,,2", "empty value"),
        ] {
            let e = parse_search(arg).unwrap_err().to_string();
            assert!(e.contains(says), "{arg}: {e}");
        }
    }

    #[test]
    fn candidates_enumerate_the_grid_last_axis_fastest() {
        let axes = vec![
            parse_search("max-num-seqs=64,128").unwrap(),
            parse_search("speculative=off,ngram").unwrap(),
        ];
        assert_eq!(candidate_flags(&axes, 0), vec!["--max-num-seqs", "64"]);
        assert_eq!(
            candidate_flags(&axes, 1),
            vec![
                "--max-num-seqs",
                "64",
                "--speculative-config",
                NGRAM_SPECULATIVE_CONFIG
            ]
        );
        assert_eq!(candidate_flags(&axes, 2), vec!["--max-num-seqs", "128"]);
    }
}
