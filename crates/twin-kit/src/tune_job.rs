//! `k8s/tune/`: a `vllm-twin tune` sweep sharded over a Kubernetes Indexed Job — pod i runs
//! `tune … --shard i/N` (its index from `JOB_COMPLETION_INDEX`) and writes its slice to a shared
//! volume; a merge Job then runs `tune merge` over the slices, which gives exactly the answer
//! of the whole sweep (docs/tune.md).

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::rules::to_yaml;
use crate::{KitError, KitOptions};

/// Shards at most: one pod each (Kubernetes caps an Indexed Job's completions at 100,000).
pub const MAX_TUNE_SHARDS: u32 = 10_000;

/// Where results land inside the pods.
const RESULTS_DIR: &str = "/results";

/// The sweep to shard (`KitOptions::tune`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TuneJob {
    /// `vllm-twin tune`'s arguments (model, GPU, workload, SLOs, `--search` …), without
    /// `--shard` / `--out`, which the Job adds.
    pub args: Vec<String>,
    /// Slices of the sweep: the Job's completions.
    pub shards: u32,
    /// Pods at once (None: all shards at once).
    pub parallelism: Option<u32>,
    /// An image with `vllm-twin` on its PATH (`pip install vllm-twin` on a Python image).
    pub image: String,
    /// The ReadWriteMany PersistentVolumeClaim both Jobs mount.
    pub results_claim: String,
    /// Its size request.
    pub results_storage: String,
    /// CPU each shard asks for (one simulation per core).
    pub cpus_per_shard: u32,
}

impl Default for TuneJob {
    fn default() -> Self {
        TuneJob {
            args: Vec::new(),
            shards: 8,
            parallelism: None,
            image: "vllm-twin:latest".into(),
            results_claim: "vllm-twin-tune-results".into(),
            results_storage: "1Gi".into(),
            cpus_per_shard: 2,
        }
    }
}

impl TuneJob {
    pub(crate) fn validate(&self) -> Result<(), KitError> {
        let bad =
            |field: &'static str, reason: String| Err(KitError::InvalidOption { field, reason });
        if self.args.is_empty() {
            return bad(
                "tune.args",
                "the sweep's `vllm-twin tune` arguments are missing".into(),
            );
        }
        if let Some(a) = self
            .args
            .iter()
            .find(|a| ["--shard", "--out"].contains(&a.split('=').next().unwrap_or("")))
        {
            return bad(
                "tune.args",
                format!("{a}: the Job sets --shard and --out itself"),
            );
        }
        if !(1..=MAX_TUNE_SHARDS).contains(&self.shards) {
            return bad(
                "tune.shards",
                format!("{} is not in 1..={MAX_TUNE_SHARDS}", self.shards),
            );
        }
        if self.parallelism.is_some_and(|p| p == 0 || p > self.shards) {
            return bad(
                "tune.parallelism",
                format!("must be in 1..={}", self.shards),
            );
        }
        if self.cpus_per_shard == 0 {
            return bad("tune.cpus_per_shard", "must be >= 1".into());
        }
        if self.image.trim().is_empty() || self.results_claim.trim().is_empty() {
            return bad(
                "tune.image",
                "the image and the results claim need names".into(),
            );
        }
        Ok(())
    }
}

fn labels(opts: &KitOptions, component: &str) -> serde_json::Value {
    json!({
        "app.kubernetes.io/name": "vllm-twin-tune",
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": opts.deployment,
    })
}

fn volume(t: &TuneJob) -> serde_json::Value {
    json!([{"name": "results", "persistentVolumeClaim": {"claimName": t.results_claim}}])
}

fn mount() -> serde_json::Value {
    json!([{"name": "results", "mountPath": RESULTS_DIR}])
}

/// The three manifests: (relative path, YAML).
pub fn tune_job_files(opts: &KitOptions, t: &TuneJob) -> Result<Vec<(String, String)>, KitError> {
    t.validate()?;
    let ns = &opts.namespace;
    let pvc = json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": t.results_claim, "namespace": ns, "labels": labels(opts, "results")},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": t.results_storage}},
        },
    });
    // `$(JOB_COMPLETION_INDEX)` is expanded by the kubelet from the env var the manifest
    // defines from the Job's completion-index annotation.
    let mut shard_args: Vec<String> = vec!["tune".into()];
    shard_args.extend(t.args.iter().cloned());
    shard_args.extend([
        "--shard".into(),
        format!("$(JOB_COMPLETION_INDEX)/{}", t.shards),
        "--out".into(),
        RESULTS_DIR.into(),
    ]);
    let resources = json!({
        "requests": {"cpu": t.cpus_per_shard.to_string(), "memory": "2Gi"},
        "limits": {"cpu": t.cpus_per_shard.to_string(), "memory": "4Gi"},
    });
    let job = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "vllm-twin-tune", "namespace": ns, "labels": labels(opts, "shards")},
        "spec": {
            "completionMode": "Indexed",
            "completions": t.shards,
            "parallelism": t.parallelism.unwrap_or(t.shards),
            "backoffLimit": t.shards.saturating_mul(2),
            "template": {
                "metadata": {"labels": labels(opts, "shards")},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{
                        "name": "tune",
                        "image": t.image,
                        "command": ["vllm-twin"],
                        "args": shard_args,
                        "env": [{
                            "name": "JOB_COMPLETION_INDEX",
                            "valueFrom": {"fieldRef": {
                                "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
                            }},
                        }],
                        "resources": resources,
                        "volumeMounts": mount(),
                    }],
                    "volumes": volume(t),
                },
            },
        },
    });
    let shard_files: Vec<String> = (0..t.shards)
        .map(|i| format!("{RESULTS_DIR}/shard-{i}-of-{}.json", t.shards))
        .collect();
    let mut merge_args: Vec<String> = vec!["tune".into(), "merge".into()];
    merge_args.extend(shard_files);
    merge_args.extend(["--out".into(), format!("{RESULTS_DIR}/merged")]);
    let merge = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "vllm-twin-tune-merge", "namespace": ns, "labels": labels(opts, "merge")},
        "spec": {
            "completions": 1,
            "backoffLimit": 2,
            "template": {
                "metadata": {"labels": labels(opts, "merge")},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{
                        "name": "merge",
                        "image": t.image,
                        "command": ["vllm-twin"],
                        "args": merge_args,
                        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                        "volumeMounts": mount(),
                    }],
                    "volumes": volume(t),
                },
            },
        },
    });
    let head = crate::rules::generated_header;

    Ok(vec![
        (
            crate::paths::TUNE_PVC.into(),
            head(&["The volume the shards write to and the merge reads (ReadWriteMany: pods may land on any node)."])
                + &to_yaml("tune PersistentVolumeClaim", &pvc)?,
        ),
        (
            crate::paths::TUNE_JOB.into(),
            head(&[
                &format!("vllm-twin tune sharded {} ways: pod i runs `tune ... --shard i/{}` and writes shard-i-of-{}.json.", t.shards, t.shards, t.shards),
                "kubectl apply -f vllm-twin-tune-pvc.yaml -f vllm-twin-tune-job.yaml",
                "kubectl wait --for=condition=complete --timeout=24h job/vllm-twin-tune, then apply the merge Job.",
            ]) + &to_yaml("tune Job", &job)?,
        ),
        (
            crate::paths::TUNE_MERGE_JOB.into(),
            head(&[
                "Merges the shards into the whole sweep's answer (results in merged/ on the volume).",
                "Apply after job/vllm-twin-tune completes; `kubectl logs job/vllm-twin-tune-merge` prints the table.",
            ]) + &to_yaml("tune merge Job", &merge)?,
        ),
    ])
}
