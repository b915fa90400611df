"""tune_ray: a sweep fanned out as Ray tasks (Ray in local mode, from PyPI) gives exactly the
answer of the whole sweep on one machine. Run by scripts/test in the wheel's virtualenv."""

import vllm_twin

ARGS = [
    "meta-llama/Llama-3.1-8B-Instruct",
    "--gpu",
    "h100-sxm",
    "--num-requests",
    "300",
    "--slo-ttft-ms",
    "2000",
    "--slo-tpot-ms",
    "100",
    "--search",
    "max-num-seqs=16,32,64,128",
    "--search",
    "max-num-batched-tokens=2048,8192",
]

whole = vllm_twin.tune(ARGS)
fanned = vllm_twin.tune_ray(ARGS, 3)
assert fanned == whole, (fanned.get("best"), whole.get("best"))
assert whole["best"], whole
# Shards are slices, not copies: each holds part of the table.
parts = [vllm_twin.tune_shard(ARGS, i, 3) for i in range(3)]
assert vllm_twin.tune_merge(parts) == whole
print(f"ray ok: {len(parts)} shards merged to the whole sweep")
