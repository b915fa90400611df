//! `vllm-twin kit --tune-job "ARGS" --tune-shards N`: the Kubernetes manifests pass
//! kubernetes-validate's strict schema check (PyPI, run from TWIN_PYTHON's environment), and the
//! commands they hold, run here pod by pod with JOB_COMPLETION_INDEX filled in and /results a
//! temporary directory, merge to exactly the answer of the whole sweep.

use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_vllm-twin");

fn validator() -> std::path::PathBuf {
    let py = std::env::var("TWIN_PYTHON").unwrap_or_else(|_| {
        panic!(
            "TWIN_PYTHON is not set: this test needs a Python with kubernetes-validate \
             (scripts/test makes target/test-venv and sets it)"
        )
    });
    Path::new(&py).with_file_name("kubernetes-validate")
}

/// `args:` of the first container in a manifest.
fn container_args(yaml: &str) -> Vec<String> {
    let v: serde_json::Value = serde_norway::from_str(yaml).expect("manifest YAML");
    v["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_tune_job_validates_and_its_shards_merge_to_the_whole_sweep() {
    let dir = std::env::temp_dir().join(format!("twin-kit-tune-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let sweep = "meta-llama/Llama-3.1-8B-Instruct --gpu h100-sxm --num-requests 300 \
                 --slo-ttft-ms 2000 --slo-tpot-ms 100 --search max-num-seqs=16,32,64 \
                 --search max-num-batched-tokens=2048,8192";
    let out = Command::new(BIN)
        .args(["kit", "--out"])
        .arg(&dir)
        .args([
            "--tune-job",
            sweep,
            "--tune-shards",
            "3",
            "--namespace",
            "bench",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tune = dir.join("k8s/tune");
    let files: Vec<_> = [
        "vllm-twin-tune-pvc.yaml",
        "vllm-twin-tune-job.yaml",
        "vllm-twin-tune-merge-job.yaml",
    ]
    .iter()
    .map(|f| tune.join(f))
    .collect();
    let check = Command::new(validator())
        .args(["--strict", "--kubernetes-version", "1.30.0"])
        .args(&files)
        .output()
        .expect("run kubernetes-validate");
    assert!(
        check.status.success(),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    let job = std::fs::read_to_string(&files[1]).unwrap();
    assert!(
        job.contains("completionMode: Indexed") && job.contains("completions: 3"),
        "{job}"
    );
    assert!(job.contains("namespace: bench"));

    // Run the pods' commands: index i, /results → a local directory.
    let results = dir.join("results");
    std::fs::create_dir_all(&results).unwrap();
    let local = |args: Vec<String>, i: Option<u32>| -> Vec<String> {
        args.into_iter()
            .map(|a| {
                let a = match i {
                    Some(i) => a.replace("$(JOB_COMPLETION_INDEX)", &i.to_string()),
                    None => a,
                };
                a.replace("/results", results.to_str().unwrap())
            })
            .collect()
    };
    for i in 0..3 {
        let args = local(container_args(&job), Some(i));
        let pod = Command::new(BIN).args(&args).output().unwrap();
        assert!(
            pod.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&pod.stderr)
        );
    }
    let merge_yaml = std::fs::read_to_string(&files[2]).unwrap();
    let mut merge_args = local(container_args(&merge_yaml), None);
    merge_args.push("--json".into());
    let merged = Command::new(BIN).args(&merge_args).output().unwrap();
    assert!(
        merged.status.success(),
        "{}",
        String::from_utf8_lossy(&merged.stderr)
    );

    let mut whole_args: Vec<String> = vec!["tune".into()];
    whole_args.extend(shlex::split(sweep).unwrap());
    whole_args.push("--json".into());
    let whole = Command::new(BIN).args(&whole_args).output().unwrap();
    assert!(
        whole.status.success(),
        "{}",
        String::from_utf8_lossy(&whole.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&merged.stdout),
        String::from_utf8_lossy(&whole.stdout)
    );

    // A sweep that sets what the Job sets is refused, naming the option.
    let bad = Command::new(BIN)
        .args(["kit", "--out"])
        .arg(&dir)
        .args(["--tune-job", "m --shard 0/2"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("tune.args"));
    let _ = std::fs::remove_dir_all(&dir);
}
