#!/usr/bin/env bash
# Coasting decodes are a shortcut: check that `simulate` reports the same with and without
# them (--no-coast-decodes) on configurations that exercise sync/async, MoE, sliding
# windows, RAG, long context, spec decode, sessions, preemption, small budgets, long-prefill
# thresholds, DP and max_model_len caps. Floats must agree to 1e-12 relative (the ITL mean
# adds the same intervals in another order); everything else exactly.
# Usage: bench/coasting_check.sh [path/to/vllm-twin]   (default: target/release/vllm-twin)
set -euo pipefail
BIN=${1:-target/release/vllm-twin}
[ -x "$BIN" ] || cargo build --release -p vllm-twin
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
configs=(
  "--num-requests 2000"
  "--num-requests 2000 --no-async-scheduling"
  "--num-requests 1500 --workload rag"
  "--num-requests 600 --workload long-context"
  "--num-requests 1500 --workload code --max-num-seqs 64"
  "Qwen/Qwen3-30B-A3B --num-requests 1500"
  "openai/gpt-oss-20b --num-requests 1000"
  '--num-requests 1000 --speculative-config {"method":"ngram","num_speculative_tokens":3}'
  "--num-requests 1500 --multi-turn 4 --think-time 2s"
  "--num-requests 1500 --max-model-len 8192 --gpu-memory-utilization 0.3 --max-concurrency 256 --output-len 2000"
  "--num-requests 1500 --max-model-len 8192 --gpu-memory-utilization 0.3 --max-concurrency 256 --output-len 1500 --no-async-scheduling"
  "--num-requests 1500 --max-num-batched-tokens 512 --request-rate 40"
  "--num-requests 1500 --long-prefill-token-threshold 256 --request-rate 30"
  "--num-requests 1500 --data-parallel-size 2 --request-rate 40"
  "--num-requests 1500 --shared-prefix groups=4,len=512,share=0.5 --no-enable-prefix-caching"
  "--num-requests 1000 --max-model-len 2048 --input-len 1000 --output-len 2000"
)
fail=0
for i in "${!configs[@]}"; do
  # shellcheck disable=SC2086
  "$BIN" simulate ${configs[$i]} --json --quiet > "$TMP/coast.json"
  # shellcheck disable=SC2086
  "$BIN" simulate ${configs[$i]} --no-coast-decodes --json --quiet > "$TMP/eager.json"
  if python3 - "$TMP/coast.json" "$TMP/eager.json" <<'PY'
import json, sys
def walk(a, b, path):
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{path}: keys differ"]
        return [d for k in a for d in walk(a[k], b[k], f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: lengths differ"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in walk(x, y, f"{path}[{i}]")]
    if isinstance(a, float) and isinstance(b, float) and a != b:
        return [] if abs(a - b) <= 1e-12 * max(abs(a), abs(b)) else [f"{path}: {a} != {b}"]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]
d = walk(json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), "")
print("\n".join(d[:10]))
sys.exit(1 if d else 0)
PY
  then echo "same   : ${configs[$i]}"; else echo "DIFFER : ${configs[$i]}"; fail=1; fi
done
exit $fail
