#!/usr/bin/env python3
"""CPU KV offloading scenarios through vLLM 0.34's own scheduler with its OffloadingConnector.

The shared oracle harness (../shared/oracle/vllm_sched_oracle.py) runs vLLM's Scheduler with no
KV connector. This wraps it for `--kv-offloading-size` (the native backend), changing nothing in
vLLM:

* the scheduler (``engine.kv_connector: "offload"`` in the scenario, which the twin reads too) is
  built with the kv_transfer_config vLLM derives from ``--kv-offloading-size``
  (``OffloadingConnector``, ``kv_both``, ``cpu_bytes_to_use``) and a KV cache of 4096 bytes per
  block, so ``engine.kv_offload_cpu_blocks`` CPU blocks fit exactly (``CPUOffloadingSpec``);
* blocks are hashed even with prefix caching off, as `EngineCore.__init__` does when a KV
  connector is configured (the harness hashes only for the prefix cache);
* the fake worker reads each step's ``OffloadingConnectorMetadata`` and reports a load job
  ``kv_offload_load_steps`` (default 1) steps after the step that planned it (with its request in
  ``finished_recving``), a store job ``kv_offload_store_steps`` (default 1) steps after, and a job
  the scheduler asks to flush in the step that asks (the worker waits for it before the forward),
  in the ``KVConnectorOutput`` of the batch it executes then (an empty batch carries it too);
* a trace may hold requests in ``kv_holding_waiting`` (the harness asserts it empty otherwise);
  the ``waiting`` list of a step is ``kv_holding_waiting`` then ``waiting``.

Usage (the venv the oracle README describes):
    $HOME/vllm034-venv/bin/python scripts/oracle_offload.py SCENARIO.json... --out-dir DIR
"""
from oracle_patch import ALLOW_KV_HOLDING, harness as o, patched

BYTES_PER_BLOCK = 4096

_make_configs = o.make_configs


def make_configs(eng, *args, **kwargs):
    from vllm.config import KVTransferConfig

    if eng.get("kv_connector") != "offload":
        raise ValueError('oracle_offload: an offloading scenario says engine.kv_connector = "offload"')
    cpu_blocks = int(eng["kv_offload_cpu_blocks"])
    vc = _make_configs(eng, *args, **kwargs)
    # What VllmConfig._post_init_kv_transfer_config makes of --kv-offloading-size.
    vc.kv_transfer_config = KVTransferConfig(
        kv_connector="OffloadingConnector",
        kv_role="kv_both",
        kv_connector_extra_config={"cpu_bytes_to_use": cpu_blocks * BYTES_PER_BLOCK},
    )
    return vc


def patched_build_scheduler():
    """The harness's build_scheduler with a KV cache tensor (the offloading spec sizes its CPU
    blocks from the bytes per GPU block), hashing blocks as EngineCore does for a connector."""
    tensor = ("kv_cache_tensors=[KVCacheTensor(size=num_blocks * %d, "
              "layers=['model.layers.0.self_attn.attn'], layer_stride=num_blocks * %d, "
              "block_stride=%d)]" % (BYTES_PER_BLOCK, BYTES_PER_BLOCK, BYTES_PER_BLOCK))
    return patched(
        o.build_scheduler,
        [("kv_cache_tensors=[]", tensor),
         ("from vllm.v1.kv_cache_interface import (",
          "from vllm.v1.kv_cache_interface import (KVCacheTensor, "),
         # EngineCore hashes blocks for a KV connector even with prefix caching off.
         ("if vllm_config.cache_config.enable_prefix_caching:",
          "if True:  # a KV connector is configured")],
        who="oracle_offload",
    )


class OffloadWorker(o.FakeWorker):
    """The oracle's fake worker plus the offloading worker's job completions."""

    def __init__(self, plan, num_spec, use_async, load_steps, store_steps):
        super().__init__(plan, num_spec, use_async)
        self.load_steps = load_steps
        self.store_steps = store_steps
        # job id -> (due step, request id or None for a store), in planning order.
        self.pending = {}

    def execute(self, sched, so, step):
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import (
            OffloadingWorkerMetadata,
        )
        from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, KVConnectorOutput, ModelRunnerOutput

        out = super().execute(sched, so, step)
        meta = so.kv_connector_metadata
        flush = set(meta.jobs_to_flush or ()) if meta is not None else set()
        for jid in flush:
            if jid in self.pending:
                self.pending[jid] = (step, self.pending[jid][1])
        if meta is not None:
            for jid, job in meta.load_jobs.items():
                self.pending[jid] = (step + self.load_steps, job.req_id)
            for jid in meta.store_jobs:
                due = step if jid in flush else step + self.store_steps
                self.pending[jid] = (due, None)
        done = [jid for jid, (due, _) in self.pending.items() if due <= step]
        if not done:
            return out
        wmeta = OffloadingWorkerMetadata()
        recving = []
        for jid in done:
            _, rid = self.pending.pop(jid)
            wmeta.mark_completed(jid)
            if rid is not None:
                recving.append(rid)
        if out is EMPTY_MODEL_RUNNER_OUTPUT:
            out = ModelRunnerOutput(req_ids=[], sampled_token_ids=[])
        # Insertion-ordered key views keep the scenario's (planning) order.
        out.kv_connector_output = KVConnectorOutput(
            finished_recving=dict.fromkeys(recving).keys() or None,
            kv_connector_worker_meta=wmeta,
        )
        return out


def patched_run():
    """The harness's run loop, with kv_holding_waiting allowed in the trace and the offloading
    worker."""
    return patched(
        o.run,
        [ALLOW_KV_HOLDING,
         ("worker = FakeWorker(plan, num_spec, use_async)",
          "worker = OffloadWorker(plan, num_spec, use_async, "
          "int(eng.get('kv_offload_load_steps', 1)), int(eng.get('kv_offload_store_steps', 1)))")],
        {"OffloadWorker": OffloadWorker},
        who="oracle_offload",
    )


def main():
    o.make_configs = make_configs
    o.build_scheduler = patched_build_scheduler()
    o.run = patched_run()
    # The run loop looks its helpers up in the module it was compiled in.
    o.main()


if __name__ == "__main__":
    main()
