#!/usr/bin/env bash
# Wall time and peak memory of a 64-replica fleet (chat preset, Llama-3.1-8B on H100 each) at
# 1,400 req/s, per router: issue #14's bar is 64 replicas x 1,000,000 requests under 30 s, with
# memory bounded by replicas and in-flight work. Figures in docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p vllm-twin
bin=${CARGO_TARGET_DIR:-target}/release/vllm-twin
for router in ${ROUTERS:-round-robin least-loaded prefix-aware}; do
  for n in ${SIZES:-100000 1000000}; do
    /usr/bin/time -f "$router n=$n: %e s wall, %M KB peak RSS" \
      "$bin" simulate --num-requests "$n" --replicas 64 --request-rate 1400 --router "$router" --quiet > /dev/null
  done
done
