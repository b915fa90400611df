#!/usr/bin/env python3
"""Golden /metrics expositions for CPU KV offloading, made by vLLM 0.34's own logger.

The shared golden generator (../shared/reference/golden/gen_golden.py) feeds vLLM's
`PrometheusStatLogger` known stats and writes what prometheus_client prints. This wraps it,
changing nothing in vLLM, for a `vllm serve --kv-offloading-size` engine:

* the `VllmConfig` gets the kv_transfer_config vLLM derives from `--kv-offloading-size`
  (`OffloadingConnector`, `kv_both`, `cpu_bytes_to_use`), so the logger registers the
  offloading connector's families (`OffloadPromMetrics`);
* a call's `scheduler_stats.kv_connector_stats` is the `OffloadingConnectorStats.data` payload
  the scheduler sends, written in JSON as `{"types": {name: type}, "data": {name: [[labels,
  value], ...]}, "info": [...] | null}` (JSON has no tuple keys) and turned back into vLLM's
  shape before the call.

Usage (the venv the oracle README describes):
    HF_HUB_OFFLINE=1 $HOME/vllm034-venv/bin/python scripts/gen_golden_offload.py \
        --out crates/twin-metrics/tests/fixtures/golden
    HF_HUB_OFFLINE=1 $HOME/vllm034-venv/bin/python scripts/gen_golden_offload.py \
        --out crates/twin-metrics/tests/fixtures/golden/frozen_created --frozen-created 1767225600.0
"""
import argparse
import copy
import os
import sys

GOLDEN_DIR = os.environ.get(
    "TWIN_GOLDEN_DIR",
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "reference",
                 "golden"),
)
sys.path.insert(0, GOLDEN_DIR)
import gen_golden as g  # noqa: E402

# 64 CPU blocks of 8 MiB (Llama-3.1-8B, block 64): what `--kv-offloading-size 0.5` buys.
CPU_BYTES = 64 * 8 * (1 << 20)

_build_vllm_config = g.build_vllm_config


def build_vllm_config(cfg, model_dir):
    vc = _build_vllm_config(cfg, model_dir)
    if cfg.get("kv_offloading_cpu_bytes"):
        from vllm.config import KVTransferConfig

        vc.kv_transfer_config = KVTransferConfig(
            kv_connector="OffloadingConnector",
            kv_role="kv_both",
            kv_connector_extra_config={"cpu_bytes_to_use": cfg["kv_offloading_cpu_bytes"]},
        )
    return vc


_to_scheduler_stats = g.to_scheduler_stats


def to_scheduler_stats(d):
    if d is None or d.get("kv_connector_stats") is None:
        return _to_scheduler_stats(d)
    js = d["kv_connector_stats"]
    payload = {
        "types": dict(js["types"]),
        "data": {name: {tuple(labels): value for labels, value in pairs}
                 for name, pairs in js["data"].items()},
        "info": None if js["info"] is None else [dict(s) for s in js["info"]],
    }
    d2 = dict(d)
    d2["kv_connector_stats"] = payload
    return _to_scheduler_stats(d2)


INFO = [{"cpu_num_chunks": 64, "cpu_blocks_per_chunk": 1,
         "cpu_kv_cache_size_bytes": CPU_BYTES, "cpu_kv_cache_size_tokens": 4096}]
H, C, G = "histogram", "counter", "gauge"


def stats(values, info=None):
    """`OffloadingConnectorStats.data` for unlabelled series: name -> (type, value)."""
    return {
        "types": {name: t for name, (t, _) in values.items()},
        "data": {name: [[[], v]] for name, (_, v) in values.items()},
        "info": info,
    }


def offload_steps():
    """Three steps of an offloading engine, as its scheduler reports them: the first carries
    the config facts and a lookup; then stores are planned (one refused for room); then a load
    and two stores complete and a deferred lookup resolves."""
    steps = g.busy_steps()
    usage = "vllm:kv_offload_cpu_cache_usage_perc"
    write = "vllm:kv_offload_cpu_cache_write_usage_perc"
    read = "vllm:kv_offload_cpu_cache_read_usage_perc"
    steps[0]["scheduler_stats"]["kv_connector_stats"] = stats({
        "vllm:kv_offload_lookup_sync_delay_seconds": (H, [1.2e-05]),
        usage: (G, 0.0), write: (G, 0.0), read: (G, 0.0),
    }, info=INFO)
    steps[0]["scheduler_stats"]["connector_prefix_cache_stats"] = g._prefix(
        requests=2, queries=1600, hits=0)
    steps[1]["scheduler_stats"]["kv_connector_stats"] = stats({
        "vllm:kv_offload_lookup_sync_delay_seconds": (H, [2.5e-05, 0.0003]),
        "vllm:kv_offload_allocation_failure": (C, 1),
        usage: (G, 0.328125), "vllm:kv_offload_cpu_allocation_size": (H, [3, 18]),
        write: (G, 0.328125), read: (G, 0.0),
    })
    steps[1]["scheduler_stats"]["connector_prefix_cache_stats"] = g._prefix(
        requests=1, queries=512, hits=448, hits_by_source={"host": 448})
    steps[1]["scheduler_stats"]["num_kv_fetch_reqs_by_stage"] = {"in_progress": 1}
    steps[2]["scheduler_stats"]["kv_connector_stats"] = stats({
        "vllm:kv_offload_load_bytes": (C, 58720256),
        "vllm:kv_offload_load_time": (C, 0.00118),
        "vllm:kv_offload_load_size": (H, [58720256]),
        "vllm:kv_offload_store_bytes": (C, 176160768),
        "vllm:kv_offload_store_time": (C, 0.00354),
        "vllm:kv_offload_store_size": (H, [25165824, 150994944]),
        "vllm:kv_offload_lookup_async_delay_seconds": (H, [0.0021]),
        usage: (G, 0.046875), write: (G, 0.0), read: (G, 0.046875),
    })
    return steps


def make_cases():
    base = copy.deepcopy(g.BASE_CONFIG)
    base["kv_offloading_cpu_bytes"] = CPU_BYTES
    init = [dict(method="log_engine_initialized")]
    cases = {"offload": dict(config=copy.deepcopy(base), calls=init + offload_steps())}
    # Two DP engines: engine 1 reports first, so its lazily made children come first.
    cfg = copy.deepcopy(base)
    cfg["engine_indexes"] = [0, 1]
    cfg["handshake"]["num_gpu_blocks"] = 2 * cfg["handshake"]["num_gpu_blocks"]
    steps = offload_steps()
    e1 = copy.deepcopy(steps[0])
    e1["engine_idx"] = 1
    cases["offload_dp2"] = dict(config=cfg, calls=init + [e1, steps[0], steps[1], steps[2]])
    return cases


DESCRIPTIONS = {
    "offload": "vllm serve --kv-offloading-size (native backend): the offloading connector's "
               "families (OffloadPromMetrics) after three steps: config facts, lookups, "
               "store allocations (one refused), a load and two stores, a deferred lookup.",
    "offload_dp2": "offload with two DP engines; engine 1 reports first.",
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--frozen-created", type=float, default=None)
    args = ap.parse_args()
    g.build_vllm_config = build_vllm_config
    g.to_scheduler_stats = to_scheduler_stats
    g.CASE_DESCRIPTIONS.update(DESCRIPTIONS)
    os.makedirs(args.out, exist_ok=True)
    # As gen_golden.main: only what vLLM registers (no process/platform/GC collectors).
    from prometheus_client import GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR, REGISTRY

    for c in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        try:
            REGISTRY.unregister(c)
        except KeyError:
            pass
    model_dir = g.write_model_dir(os.path.join(GOLDEN_DIR, ".tiny_llama"))
    for name, case in make_cases().items():
        paths, *_ = g.run_case(name, case, model_dir, args.out, args.frozen_created)
        print(name, "->", paths["prom"])


if __name__ == "__main__":
    main()
