#!/usr/bin/env bash
# Side-by-side speed comparison with Vidur (vidur on PyPI) on the exact request lists Vidur
# generated (../shared/peers/vidur/workloads/*.csv: Llama-3-8B, A100, fixed 1024/256 tokens,
# Poisson 7 req/s). The twin replays the same CSV (its Vidur trace reader). Vidur runs only if
# VIDUR_PY points at a Python with `vidur` installed (pip install vidur==0.0.26, ~1.3 GB, and a
# ~46 min first-run predictor training); otherwise only the twin's side is measured.
set -euo pipefail
cd "$(dirname "$0")/.."
PEERS=${PEERS:-../shared/peers/vidur}
cargo build --release -q -p vllm-twin
for n in 1000 10000 100000; do
  csv="$PEERS/workloads/fixed1024_256_poisson7_seed42_n$n.csv"
  [ -f "$csv" ] || { echo "missing $csv"; exit 1; }
  /usr/bin/time -f "twin  n=$n: %e s wall, %M KB peak RSS" \
    target/release/vllm-twin simulate meta-llama/Llama-3.1-8B --gpu a100-80gb \
      --max-num-seqs 128 --max-num-batched-tokens 512 --workload "$csv" --quiet --json > "/tmp/twin_vidur_$n.json"
  python3 -c "import json;r=json.load(open('/tmp/twin_vidur_$n.json'));print(f\"      TTFT p50 {r['ttft_s']['p50']*1e3:.1f} ms, TPOT p50 {r['tpot_s']['p50']*1e3:.2f} ms, {r['num_finished']} finished\")"
  if [ -n "${VIDUR_PY:-}" ]; then
    out=$(mktemp -d)
    WANDB_MODE=disabled HF_HUB_OFFLINE=1 /usr/bin/time -f "vidur n=$n: %e s wall, %M KB peak RSS" \
      "$VIDUR_PY" -m vidur.main --replica_config_device a100 --replica_config_network_device a100_pairwise_nvlink \
      --replica_config_model_name meta-llama/Meta-Llama-3-8B --cluster_config_num_replicas 1 \
      --replica_config_tensor_parallel_size 1 --replica_config_num_pipeline_stages 1 \
      --execution_time_predictor_config_type random_forrest \
      --random_forrest_execution_time_predictor_config_compute_input_file "$PEERS/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv" \
      --random_forrest_execution_time_predictor_config_attention_input_file "$PEERS/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/attention.csv" \
      --random_forrest_execution_time_predictor_config_all_reduce_input_file "$PEERS/profiling/network/a100_pairwise_nvlink/all_reduce.csv" \
      --random_forrest_execution_time_predictor_config_send_recv_input_file "$PEERS/profiling/network/a100_pairwise_nvlink/send_recv.csv" \
      --metrics_config_cache_dir "${VIDUR_CACHE:-/tmp/vidur_cache}" --request_generator_config_type synthetic \
      --synthetic_request_generator_config_num_requests $n --synthetic_request_generator_config_seed 42 \
      --length_generator_config_type fixed --fixed_request_length_generator_config_prefill_tokens 1024 \
      --fixed_request_length_generator_config_decode_tokens 256 --interval_generator_config_type poisson \
      --poisson_request_interval_generator_config_qps 7 --replica_scheduler_config_type vllm \
      --vllm_scheduler_config_batch_size_cap 128 \
      --metrics_config_output_dir "$out" --no-metrics_config_store_plots --no-metrics_config_enable_chrome_trace > /dev/null
  fi
done
