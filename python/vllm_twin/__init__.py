"""Drive vllm-twin from Python.

The wheel installs the ``vllm-twin`` binary beside this module (in the environment's ``bin/``);
these functions run it and return its JSON. Every argument list is a ``vllm serve``-style command
line, as the CLI takes it.

    >>> import vllm_twin
    >>> report = vllm_twin.simulate(["--max-num-seqs", "64", "--num-requests", "500"])
    >>> report["ttft_s"]["p95"]
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from typing import Any, Sequence

__all__ = [
    "TwinError",
    "binary",
    "run",
    "simulate",
    "find_max_rate",
    "tune",
    "tune_shard",
    "tune_merge",
    "tune_ray",
    "version",
]


class TwinError(RuntimeError):
    """The binary refused the command line or failed; ``str()`` is its error message."""

    def __init__(self, message: str, returncode: int):
        super().__init__(message)
        self.returncode = returncode


def binary() -> str:
    """Path of the ``vllm-twin`` binary: the one this package installed, else one on PATH.

    ``VLLM_TWIN_BINARY`` overrides both (a development build, say).
    """
    override = os.environ.get("VLLM_TWIN_BINARY")
    if override:
        return override
    exe = "vllm-twin.exe" if sys.platform == "win32" else "vllm-twin"
    scripts = sysconfig.get_path("scripts")
    candidate = os.path.join(scripts, exe) if scripts else None
    if candidate and os.path.exists(candidate):
        return candidate
    found = shutil.which("vllm-twin")
    if found:
        return found
    raise TwinError("the vllm-twin binary is not installed (pip install vllm-twin)", 127)


def run(args: Sequence[str], *, timeout: float | None = None) -> str:
    """Run ``vllm-twin ARGS...`` and return its standard output."""
    proc = subprocess.run(
        [binary(), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        message = proc.stderr.strip() or proc.stdout.strip()
        raise TwinError(message.removeprefix("error: "), proc.returncode)
    return proc.stdout


def _json(args: Sequence[str], timeout: float | None) -> Any:
    return json.loads(run(args, timeout=timeout))


def simulate(args: Sequence[str] = (), *, timeout: float | None = None) -> dict:
    """``vllm-twin simulate ARGS... --json --quiet``: the report (docs/simulate.md's schema)."""
    return _json(["simulate", *args, "--json", "--quiet"], timeout)


def find_max_rate(args: Sequence[str] = (), *, timeout: float | None = None) -> dict:
    """``vllm-twin simulate ARGS... --find-max-rate --json``: the sustainable rate search."""
    return _json(["simulate", *args, "--find-max-rate", "--json", "--quiet"], timeout)


def tune(args: Sequence[str], *, timeout: float | None = None) -> dict:
    """``vllm-twin tune ARGS... --json``: the whole sweep on this machine (docs/tune.md)."""
    return _json_tune(["tune", *args, "--json"], timeout)


def tune_shard(
    args: Sequence[str], index: int, count: int, *, timeout: float | None = None
) -> dict:
    """``vllm-twin tune ARGS... --shard INDEX/COUNT``: one deterministic slice of the sweep."""
    return _json(["tune", *args, "--shard", f"{index}/{count}"], timeout)


def tune_merge(shards: Sequence[dict], *, timeout: float | None = None) -> dict:
    """``vllm-twin tune merge``: the shards' results combined into the whole sweep's answer."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="vllm-twin-tune-") as tmp:
        files = []
        for i, shard in enumerate(shards):
            path = os.path.join(tmp, f"shard-{i}.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(shard, f)
            files.append(path)
        return _json_tune(["tune", "merge", *files, "--json"], timeout)


def tune_ray(
    args: Sequence[str],
    num_shards: int,
    *,
    address: str | None = None,
    num_cpus_per_shard: float = 1,
    timeout: float | None = None,
) -> dict:
    """The sweep of ``tune(args)`` fanned out as ``num_shards`` Ray tasks, then merged: the same
    answer as ``tune(args)``. ``address`` is a Ray cluster's (``None``: start or join a local
    one). Every node needs ``vllm-twin`` installed (``pip install vllm-twin``)."""
    import ray  # the `ray` extra: pip install 'vllm-twin[ray]'

    if num_shards < 1:
        raise ValueError("num_shards must be >= 1")
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    try:
        shard = ray.remote(num_cpus=num_cpus_per_shard)(tune_shard)
        refs = [shard.remote(list(args), i, num_shards, timeout=timeout) for i in range(num_shards)]
        return tune_merge(ray.get(refs), timeout=timeout)
    finally:
        if started:
            ray.shutdown()


def _json_tune(args: Sequence[str], timeout: float | None) -> Any:
    """tune exits 1 when no configuration meets the SLOs; its JSON still says which came closest."""
    proc = subprocess.run(
        [binary(), *map(str, args)], capture_output=True, text=True, timeout=timeout, check=False
    )
    if proc.returncode not in (0, 1) or not proc.stdout.strip():
        message = proc.stderr.strip() or proc.stdout.strip()
        raise TwinError(message.removeprefix("error: "), proc.returncode)
    return json.loads(proc.stdout)


def version() -> str:
    """The binary's version (``vllm-twin --version``)."""
    return run(["--version"]).strip().split()[-1]
