//! Which vLLM the metrics came from, and which flags that version has. The version comes
//! from `/version` or `--vllm-version`; without either it is bounded from the metric
//! families present (vllm-internals §3.5: renames and removals), which gives a floor but
//! never proves a recent flag exists, so such flags are then offered with a caveat.

use serde::Serialize;
use twin_metrics::parser::Scrape;

/// `major.minor.patch`, compared numerically.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Version(pub u32, pub u32, pub u32);

impl Version {
    /// `0.6.3`, `v0.34.0`, `0.5.2.dev1210+g6f078ea3c`, `0.11.0rc1`.
    pub fn parse(s: &str) -> Option<Version> {
        let s = s.trim().trim_start_matches('v');
        let mut nums = s.split(['.', '+', '-']).map(|p| {
            let digits: String = p.chars().take_while(|c| c.is_ascii_digit()).collect();
            digits.parse::<u32>().ok()
        });
        let major = nums.next()??;
        let minor = nums.next()??;
        let patch = nums.next().flatten().unwrap_or(0);
        Some(Version(major, minor, patch))
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// What is known about the version.
#[derive(Clone, Debug, Serialize)]
pub struct VersionInfo {
    /// The exact version, when `/version` or `--vllm-version` said.
    pub exact: Option<Version>,
    /// Bounds from the families present.
    pub at_least: Option<Version>,
    pub below: Option<Version>,
    pub evidence: String,
}

impl VersionInfo {
    /// Whether a flag introduced in `since` exists: `Some(true/false)` when known,
    /// `None` when the bounds do not decide.
    pub fn has(&self, since: Version) -> Option<bool> {
        // Every server that exports the metrics the doctor reads (0.4+) has the flags
        // that predate 0.5.
        if since <= Version(0, 5, 0) && self.exact.is_none_or(|v| v >= since) {
            return Some(true);
        }
        if let Some(v) = self.exact {
            return Some(v >= since);
        }
        if self.at_least.is_some_and(|v| v >= since) {
            return Some(true);
        }
        if self.below.is_some_and(|v| v <= since) {
            return Some(false);
        }
        None
    }

    pub fn describe(&self) -> String {
        match (self.exact, self.at_least, self.below) {
            (Some(v), _, _) => format!("{v} ({})", self.evidence),
            (None, Some(a), Some(b)) => format!(">= {a}, < {b} ({})", self.evidence),
            (None, Some(a), None) => format!(">= {a} ({})", self.evidence),
            (None, None, Some(b)) => format!("< {b} ({})", self.evidence),
            (None, None, None) => format!("unknown ({})", self.evidence),
        }
    }
}

/// Bound the version from the families a scrape carries.
pub fn detect(exact: Option<&str>, s: &Scrape) -> VersionInfo {
    // Exact family match (any suffix), without the parser's legacy-alias fallback: the
    // point here is which spelling the server used.
    let has = |n: &str| {
        // `n` is canonical (`vllm:…`); a sample may spell it `vllm_…`.
        let tail = n.strip_prefix("vllm:");
        s.samples.iter().any(|x| {
            let rest = match (x.name.strip_prefix("vllm_"), tail) {
                (Some(r), Some(t)) => r.strip_prefix(t),
                (Some(_), None) => None,
                (None, _) => x.name.strip_prefix(n),
            };
            rest.is_some_and(|rest| {
                rest.is_empty()
                    || ["_total", "_count", "_sum", "_bucket", "_created"].contains(&rest)
            })
        })
    };
    let exact_v = exact.and_then(Version::parse);
    let mut at_least = None;
    let mut below = None;
    let mut why = Vec::new();
    // V0-only families went away in 0.9 (PR #18837).
    if has("vllm:num_requests_swapped") || has("vllm:cpu_cache_usage_perc") {
        below = Some(Version(0, 9, 0));
        why.push("V0 families (num_requests_swapped / cpu_cache_usage_perc)");
    } else if has("vllm:gpu_cache_usage_perc") && !has("vllm:kv_cache_usage_perc") {
        below = Some(Version(0, 12, 0));
        why.push("only the pre-0.12 name gpu_cache_usage_perc");
    }
    if has("vllm:kv_cache_usage_perc") {
        at_least = Some(Version(0, 9, 2));
        why.push("kv_cache_usage_perc (0.9.2+)");
    }
    if has("vllm:num_requests_waiting_by_reason") || has("vllm:engine_sleep_state") {
        at_least = Some(Version(0, 12, 0));
        why.push("families newer than 0.11 (waiting_by_reason / engine_sleep_state)");
    }
    if has("vllm:time_per_output_token_seconds") && has("vllm:kv_cache_usage_perc") {
        below = Some(Version(0, 13, 0));
        why.push("time_per_output_token_seconds still exported (< 0.13)");
    }
    let evidence = if exact_v.is_some() {
        "reported by the server or --vllm-version".to_string()
    } else if why.is_empty() {
        "no telling families".to_string()
    } else {
        format!("from metric families: {}", why.join("; "))
    };
    VersionInfo {
        exact: exact_v,
        at_least,
        below,
        evidence,
    }
}

/// Flags the doctor may recommend, with the first version that has them. Conservative
/// where history is fuzzy: a flag is never offered for a version that may lack it.
pub const FLAG_SINCE: &[(&str, Version)] = &[
    ("--max-num-seqs", Version(0, 1, 0)),
    ("--max-num-batched-tokens", Version(0, 1, 0)),
    ("--gpu-memory-utilization", Version(0, 1, 0)),
    ("--max-model-len", Version(0, 1, 0)),
    ("--kv-cache-dtype", Version(0, 3, 0)),
    ("--quantization", Version(0, 5, 0)),
    ("--enable-prefix-caching", Version(0, 4, 0)),
    ("--enable-chunked-prefill", Version(0, 4, 0)),
    // Added with the V0 partial-prefill work; 0.8 is the first release we are sure of.
    ("--long-prefill-token-threshold", Version(0, 8, 0)),
    ("--long-prefill-token-threshold-adaptive", Version(0, 30, 0)),
    // PR #56758; absent in 0.11 (vllm-internals §1.9).
    ("--max-num-active-seqs", Version(0, 31, 0)),
    // The JSON flag replaced --speculative-model in the 0.8 series; 0.9 to be safe.
    ("--speculative-config", Version(0, 9, 0)),
    // The renderer's thread pool: a single worker from PR #34789 (2026-02), the flag is in
    // v0.25.1's `ModelConfig`; 0.25 is the first release we are sure of.
    ("--renderer-num-workers", Version(0, 25, 0)),
    // Several API-server processes in front of one engine: in the 0.9 series; 0.10 to be safe.
    ("--api-server-count", Version(0, 10, 0)),
];

pub fn flag_since(flag: &str) -> Version {
    FLAG_SINCE
        .iter()
        .find(|(f, _)| *f == flag)
        .map(|(_, v)| *v)
        .unwrap_or(Version(0, 1, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_versions() {
        assert_eq!(
            Version::parse("0.5.2.dev1210+g6f078ea3c"),
            Some(Version(0, 5, 2))
        );
        assert_eq!(Version::parse("v0.34.0"), Some(Version(0, 34, 0)));
        assert_eq!(Version::parse("0.11.0rc1"), Some(Version(0, 11, 0)));
        assert_eq!(Version::parse("0.7"), Some(Version(0, 7, 0)));
        assert_eq!(Version::parse("x"), None);
    }

    #[test]
    fn bounds_from_families() {
        let s = twin_metrics::parser::parse(
            "vllm:num_requests_swapped 0\nvllm:gpu_cache_usage_perc 0\n",
        )
        .unwrap();
        let v = detect(None, &s);
        assert_eq!(v.has(flag_since("--max-num-active-seqs")), Some(false));
        assert_eq!(v.has(flag_since("--max-num-seqs")), Some(true));
        assert_eq!(v.has(flag_since("--long-prefill-token-threshold")), None);
        let v = detect(Some("0.34.0"), &s);
        assert_eq!(v.has(flag_since("--max-num-active-seqs")), Some(true));
    }
}
