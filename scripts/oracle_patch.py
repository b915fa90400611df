"""What the connector wrappers (oracle_pd.py, oracle_offload.py) share: the shared oracle
harness imported from ../shared/oracle (or $TWIN_ORACLE_DIR), and its functions recompiled with
a source patch, changing nothing in vLLM."""
import inspect
import os
import sys

ORACLE_DIR = os.environ.get(
    "TWIN_ORACLE_DIR",
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "oracle"),
)
sys.path.insert(0, ORACLE_DIR)
import vllm_sched_oracle as harness  # noqa: E402,F401


def patched(func, replacements, extra=None, who="oracle wrapper"):
    """`func` of the harness recompiled with each `(old, new)` of `replacements` applied to its
    source (each `old` must be there), in the harness's namespace plus `extra`."""
    src = inspect.getsource(func)
    for old, new in replacements:
        if old not in src:
            raise SystemExit(f"{who}: the harness's {func.__name__}() changed; update the patch")
        src = src.replace(old, new)
    ns = dict(harness.__dict__)
    ns.update(extra or {})
    exec(compile(src, harness.__file__, "exec"), ns)
    return ns[func.__name__]


# The harness asserts the connector queues stay empty; with a connector they need not.
ALLOW_KV_HOLDING = ('assert len(q) == 0, f"{name} unexpectedly non-empty"', "pass")
