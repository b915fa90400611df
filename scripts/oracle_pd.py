#!/usr/bin/env python3
"""P/D scenarios through vLLM 0.34's own scheduler with its NIXL connector.

The shared oracle harness (../shared/oracle/vllm_sched_oracle.py) runs vLLM's Scheduler with no
KV connector. This wraps it for P/D disaggregation, changing nothing in vLLM:

* the scheduler (``engine.kv_connector: "nixl"`` in the scenario, which the twin reads too) is
  built with ``kv_transfer_config = NixlConnector, kv_role=kv_both`` (both
  sides of P/D in one engine; NIXL's scheduler half runs on CPU without the nixl library);
* a request with ``"kv_transfer": "load_from_remote"`` carries the ``kv_transfer_params`` a
  P/D proxy sends a decode instance (``do_remote_prefill`` and the prefiller's block ids); one
  with ``"kv_transfer": "send_to_remote"`` those it sends a prefill instance
  (``do_remote_decode``);
* the fake worker reports ``finished_recving`` for a load ``kv_load_steps`` (default 1) steps
  after the step whose schedule started it, and ``finished_sending`` for a finished sender
  ``kv_send_steps`` (default 1) steps after it finished, in the ``KVConnectorOutput`` of the
  batch it executes then (an empty batch still carries it, as vLLM's no-forward path does);
* a trace may hold requests in ``kv_holding_waiting`` (the harness asserts it empty otherwise);
  the ``waiting`` list of a step is ``kv_holding_waiting`` then ``waiting``.

Usage (the venv the oracle README describes):
    $HOME/vllm034-venv/bin/python scripts/oracle_pd.py SCENARIO.json... --out-dir DIR
"""
from oracle_patch import ALLOW_KV_HOLDING, harness as o, patched

PD_KEYS = ("kv_transfer", "kv_load_steps", "kv_send_steps")
ROLES = ("load_from_remote", "send_to_remote")

_make_configs = o.make_configs


def make_configs(eng, *args, **kwargs):
    from vllm.config import KVTransferConfig

    if eng.get("kv_connector") != "nixl":
        raise ValueError('oracle_pd: a P/D scenario says engine.kv_connector = "nixl"')
    vc = _make_configs(eng, *args, **kwargs)
    vc.kv_transfer_config = KVTransferConfig(kv_connector="NixlConnector", kv_role="kv_both")
    return vc


_resolve_requests = o.resolve_requests


def resolve_requests(scn):
    out = _resolve_requests(scn)
    raw = o.expand_generators(scn)
    for r, src in zip(out, raw):
        role = src.get("kv_transfer")
        if role is not None and role not in ROLES:
            raise ValueError(f"{r['id']}: kv_transfer must be one of {ROLES}")
        r["kv_transfer"] = role
        r["kv_load_steps"] = int(src.get("kv_load_steps", 1))
        r["kv_send_steps"] = int(src.get("kv_send_steps", 1))
        if r["kv_load_steps"] < 0 or r["kv_send_steps"] < 0:
            raise ValueError(f"{r['id']}: kv_load_steps / kv_send_steps must be >= 0")
    return out


_make_request = o.make_request


def make_request(r, block_hasher):
    req = _make_request(r, block_hasher)
    role = r.get("kv_transfer")
    if role == "load_from_remote":
        n_blocks = -(-len(r["prompt_token_ids"]) // 16)
        req.kv_transfer_params = {
            "do_remote_prefill": True,
            "do_remote_decode": False,
            "remote_block_ids": [list(range(1, n_blocks + 1))],
            "remote_engine_id": "prefill-0",
            "remote_request_id": f"prefill-{r['id']}",
            "remote_host": "127.0.0.1",
            "remote_port": 5600,
            "tp_size": 1,
        }
    elif role == "send_to_remote":
        req.kv_transfer_params = {"do_remote_decode": True, "do_remote_prefill": False}
    return req


class PdWorker(o.FakeWorker):
    """The oracle's fake worker plus the NIXL worker's transfer completions."""

    def __init__(self, plan, num_spec, use_async):
        super().__init__(plan, num_spec, use_async)
        self.load_started = {}
        self.send_from = {}
        self.reported = set()

    def execute(self, sched, so, step):
        from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, KVConnectorOutput, ModelRunnerOutput
        from vllm.v1.request import RequestStatus

        out = super().execute(sched, so, step)
        recving, sending = [], []
        for rid, p in self.plan.items():
            req = sched.requests.get(rid)
            if req is None or rid in self.reported:
                continue
            if p.get("kv_transfer") == "load_from_remote":
                waiting = req.status == RequestStatus.WAITING_FOR_REMOTE_KVS or (
                    req.is_finished() and rid in self.load_started
                )
                if waiting:
                    start = self.load_started.setdefault(rid, step)
                    if step >= start + p["kv_load_steps"]:
                        recving.append(rid)
                        self.reported.add(rid)
            elif p.get("kv_transfer") == "send_to_remote" and req.is_finished():
                start = self.send_from.setdefault(rid, step)
                if step >= start + p["kv_send_steps"]:
                    sending.append(rid)
                    self.reported.add(rid)
        if not recving and not sending:
            return out
        if out is EMPTY_MODEL_RUNNER_OUTPUT:
            out = ModelRunnerOutput(req_ids=[], sampled_token_ids=[])
        # vLLM iterates these sets; a real worker's order is arbitrary (and a str set's
        # changes with PYTHONHASHSEED). Insertion-ordered key views (set-like) make it the
        # scenario's order, which the twin follows.
        out.kv_connector_output = KVConnectorOutput(
            finished_sending=dict.fromkeys(sending).keys() or None,
            finished_recving=dict.fromkeys(recving).keys() or None,
        )
        return out


def patched_run():
    """The harness's run loop, with kv_holding_waiting allowed in the trace."""
    return patched(
        o.run,
        [ALLOW_KV_HOLDING,
         ("worker = FakeWorker(plan, num_spec, use_async)",
          "worker = PdWorker(plan, num_spec, use_async)")],
        {"PdWorker": PdWorker},
        who="oracle_pd",
    )


def main():
    o.make_configs = make_configs
    o.resolve_requests = resolve_requests
    o.make_request = make_request
    o.run = patched_run()
    # The run loop looks its helpers up in the module it was compiled in.
    o.main()


if __name__ == "__main__":
    main()
