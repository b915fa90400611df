#!/usr/bin/env python3
"""An MoE model's DP engine's prefill cadence through vLLM 0.34's own scheduler.

A DP engine core (``DPEngineCoreProc``) passes ``throttle_prefills`` to ``Scheduler.schedule``
on every step whose wave-wide counter is not a multiple of ``--prefill-schedule-interval``
(``_should_throttle_prefills``); the scheduler then defers prefills while something decodes,
unless its last release could not drain the queue (``prefill_capacity_bound``), and keeps no
cadence of its own (``local_prefill_interval`` is 1 for a DP rank). The shared oracle harness
(../shared/oracle/vllm_sched_oracle.py) calls ``schedule()`` with no arguments; this wraps it so
that step ``k`` of a scenario with ``engine.dp_prefill_interval: n`` is scheduled with
``throttle_prefills = k % n != 0`` (the counter the twin's conformance runner uses too),
changing nothing in vLLM.

Usage (the venv the oracle README describes):
    $HOME/vllm034-venv/bin/python scripts/oracle_dp.py SCENARIO.json... --out-dir DIR
"""
from oracle_patch import harness as o, patched


def dp_throttle(eng, step):
    """`DPEngineCoreProc._should_throttle_prefills` with the scenario's step as the counter."""
    n = int(eng.get("dp_prefill_interval") or 1)
    return n > 1 and step % n != 0


def patched_run():
    return patched(
        o.run,
        [("so = sched.schedule()", "so = sched.schedule(dp_throttle(eng, step))")],
        {"dp_throttle": dp_throttle},
        who="oracle_dp",
    )


def main():
    o.run = patched_run()
    o.main()


if __name__ == "__main__":
    main()
