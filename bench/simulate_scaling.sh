#!/usr/bin/env bash
# Wall time and peak memory of `vllm-twin simulate` (chat preset, Llama-3.1-8B, H100) from 10k to
# 1M requests: cost per request should stay roughly constant and memory bounded by in-flight work.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p vllm-twin
for n in ${SIZES:-10000 100000 1000000}; do
  /usr/bin/time -f "n=$n: %e s wall, %M KB peak RSS" target/release/vllm-twin simulate --num-requests "$n" --quiet > /dev/null
done
