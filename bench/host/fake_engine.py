"""An `Executor` for vLLM 0.34.0's real `EngineCore` that runs no model: each step takes
`FAKE_STEP_MS` of wall time (the GPU's share, slept on one worker thread so the engine
core's async-scheduling overlap works as on a GPU) and samples one fixed token for every
request whose prompt is done. Used by `frontend_cpu.py` to time the API server's own path
(`vllm serve` minus the GPU); `--distributed-executor-backend fake_engine.FakeExecutor`.
"""

import os
import time
from concurrent.futures import Future, ThreadPoolExecutor

import torch
from vllm.v1.executor.abstract import Executor
from vllm.v1.kv_cache_interface import FullAttentionSpec
from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, ModelRunnerOutput

STEP_S = float(os.environ.get("FAKE_STEP_MS", "5")) / 1e3
# A token that decodes to ordinary text in the o200k vocabulary (" the" is 290).
TOKEN_ID = 290


class _Worker:
    """Tracks each request's computed tokens from the scheduler's output alone."""

    def __init__(self):
        self.prompt_len: dict[str, int] = {}
        self.computed: dict[str, int] = {}

    def run(self, so) -> ModelRunnerOutput:
        if so.total_num_scheduled_tokens == 0:
            return EMPTY_MODEL_RUNNER_OUTPUT
        for nr in so.scheduled_new_reqs:
            self.prompt_len[nr.req_id] = len(nr.prompt_token_ids or nr.prefill_token_ids)
            self.computed[nr.req_id] = nr.num_computed_tokens
        for rid in so.finished_req_ids:
            self.prompt_len.pop(rid, None)
            self.computed.pop(rid, None)
        req_ids = list(so.num_scheduled_tokens)
        sampled = []
        for rid in req_ids:
            self.computed[rid] += so.num_scheduled_tokens[rid]
            done = self.computed[rid] >= self.prompt_len[rid]
            sampled.append([TOKEN_ID] if done else [])
        return ModelRunnerOutput(req_ids=req_ids, sampled_token_ids=sampled)


class FakeExecutor(Executor):
    uses_ray = False

    def _init_executor(self):
        self.worker = _Worker()
        # One "GPU": steps run in launch order, each STEP_S long.
        self.gpu = ThreadPoolExecutor(max_workers=1)
        self.pending: ModelRunnerOutput | None = None
        self.block_size = self.vllm_config.cache_config.block_size

    def collective_rpc(self, method, timeout=None, args=(), kwargs=None, non_block=False):
        if method == "get_kv_cache_spec":
            res = [{"model.layers.0.self_attn.attn": FullAttentionSpec(
                block_size=self.block_size, num_kv_heads=1, head_size=1,
                dtype=torch.float32)}]
        elif method == "determine_available_memory":
            res = [1 << 30]
        elif method == "get_supported_kv_cache_layouts":
            res = [["NHD"]]
        elif method == "compile_or_warm_up_model":
            res = []
        elif method == "get_supported_tasks":
            res = [("generate",)]
        else:
            res = [None]
        if non_block:
            f = Future()
            f.set_result(res)
            return f
        return res

    def execute_model(self, so, non_block=False):
        out = self.worker.run(so)
        if so.total_num_scheduled_tokens == 0:
            result = out
        else:
            self.pending = out
            result = None

        def gpu():
            time.sleep(STEP_S)
            return result

        f = self.gpu.submit(gpu)
        return f if non_block else f.result()

    def sample_tokens(self, grammar_output, non_block=False):
        out, self.pending = self.pending, None
        f = self.gpu.submit(lambda: out)
        return f if non_block else f.result()

    def take_draft_token_ids(self):
        return None

    def check_health(self):
        return None

    def shutdown(self):
        self.gpu.shutdown(wait=False)

    @classmethod
    def supports_async_scheduling(cls):
        return True

    @property
    def max_concurrent_batches(self):
        return 2 if self.vllm_config.scheduler_config.async_scheduling else 1
