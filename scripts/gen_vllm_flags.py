#!/usr/bin/env python3
"""Generate crates/twin-sim/data/vllm_serve_flags.tsv from a real vLLM 0.34.0 install.

The table is the twin's one source for every `vllm serve` flag: its destination, its option
strings (aliases and negations included), its argparse type, default, choices and nargs, the
range vLLM's config classes validate (pydantic `Field(ge=..., gt=..., le=..., lt=...)`) and the
first sentence of its help. Two more sections hold what vLLM puts in place of a None
default: the config classes' `DEFAULT_*` constants (`@class` rows) and
`EngineArgs.get_batch_defaults`, the usage-context `--max-num-batched-tokens` /
`--max-num-seqs` per device tier (`@batch` rows).

It introspects the real parser, not the source text: `make_arg_parser` (the `vllm serve`
parser, which includes `EngineArgs.add_cli_args`) is built and its actions are read.

Setup (about 5 minutes; see ../shared/oracle/README.md for why flashinfer is left out):

    pip download --no-deps --only-binary :all: vllm==0.34.0 -d WHEELS
    python3 -m venv /root/vllm034-venv
    unzip -p WHEELS/vllm-0.34.0-*.whl '*/METADATA' | grep '^Requires-Dist' \\
        | grep -v 'extra ==' | sed 's/^Requires-Dist: //' | grep -v '^flashinfer-python' > reqs.txt
    /root/vllm034-venv/bin/pip install --no-deps WHEELS/vllm-0.34.0-*.whl
    /root/vllm034-venv/bin/pip install -r reqs.txt

Run:

    /root/vllm034-venv/bin/python scripts/gen_vllm_flags.py > crates/twin-sim/data/vllm_serve_flags.tsv

The output is deterministic (rows sorted by dest). Columns (tab-separated; empty = none):

    dest      argparse destination (EngineArgs / frontend field name)
    action    value | store_true | store_false | bool_optional (BooleanOptionalAction)
    options   positive option strings, space-separated (e.g. `--tensor-parallel-size -tp`)
    negatives negative option strings of a bool_optional flag (`--no-enable-prefix-caching`)
    type      int | float | str | human_int (accepts 1k, 2M) | human_int_or_auto |
              json (a JSON object or dotted keys) | list:<elem> | other:<name>
    default   the argparse default as JSON (`null` = None: resolved later by vLLM)
    choices   allowed values, `|`-separated
    nargs     argparse nargs (`?`, `+`, `*`), empty = one value
    range     bounds vLLM's config classes validate, e.g. `gt=0 le=1`, `ge=1`
    help      first sentence of the help text
"""

import argparse
import inspect
import json
import os
import re
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")


def type_name(t):
    """Classify an argparse `type` callable, looking through vLLM's wrappers."""
    if t is None:
        return "str"
    if t in (int, float, str):
        return t.__name__
    if t is json.loads:
        return "json"
    name = getattr(t, "__name__", type(t).__name__)
    if name in ("human_readable_int",):
        return "human_int"
    if name in ("human_readable_int_or_auto",):
        return "human_int_or_auto"
    if name in ("union_dict_and_str", "parse_dataclass", "_parse_dataclass"):
        return "json"
    # parse_type(f) / optional_type(f) close over f.
    for cell in getattr(t, "__closure__", None) or ():
        inner = cell.cell_contents
        if callable(inner) and inner is not t:
            return type_name(inner)
    if inspect.isclass(t):
        return "other:" + t.__name__
    return "other:" + name


def action_kind(a):
    if isinstance(a, argparse.BooleanOptionalAction):
        return "bool_optional"
    if isinstance(a, argparse._StoreTrueAction):
        return "store_true"
    if isinstance(a, argparse._StoreFalseAction):
        return "store_false"
    return "value"


def jsonable(v):
    # Config objects and enums inside JSON flags' defaults are written as their str().
    return json.dumps(v, sort_keys=True, default=str)


def first_sentence(text):
    if not text:
        return ""
    text = re.sub(r"\s+", " ", text).strip()
    m = re.match(r"(.+?[.!?])(\s|$)", text)
    s = m.group(1) if m else text
    return s[:240].replace("\t", " ")


def field_ranges():
    """dest -> 'ge=1 ...' from pydantic Field constraints on vLLM's config classes."""
    import annotated_types as at
    import vllm.config as cfg

    found = {}
    for name in dir(cfg):
        cls = getattr(cfg, name)
        fields = getattr(cls, "__pydantic_fields__", None)
        if not inspect.isclass(cls) or not fields:
            continue
        for fname, info in fields.items():
            parts = []
            for m in info.metadata:
                for key, typ in (("ge", at.Ge), ("gt", at.Gt), ("le", at.Le), ("lt", at.Lt)):
                    if isinstance(m, typ):
                        parts.append(f"{key}={getattr(m, key)}")
            if parts:
                found.setdefault(fname, set()).add(" ".join(sorted(parts)))
    # A name constrained differently by two classes is ambiguous: leave it out.
    return {k: next(iter(v)) for k, v in found.items() if len(v) == 1}


def batch_defaults():
    """EngineArgs.get_batch_defaults per device tier, with the platform faked."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.platforms import current_platform
    from vllm.usage.usage_lib import UsageContext

    gib = 1 << 30
    tiers = [
        ("ge160gib", 192 * gib, "nvidia b200"),
        ("ge70gib", 80 * gib, "nvidia h100 80gb hbm3"),
        ("a100", 80 * gib, "nvidia a100-sxm4-80gb"),
        ("small", 24 * gib, "nvidia l4"),
    ]
    saved = {}
    rows = []
    cls = type(current_platform)
    for attr in ("get_device_total_memory", "get_device_name", "is_device_capability", "is_tpu"):
        saved[attr] = getattr(cls, attr, None)
    try:
        for tier, mem, dev in tiers:
            cls.get_device_total_memory = classmethod(lambda c, device_id=0, m=mem: m)
            cls.get_device_name = classmethod(lambda c, device_id=0, d=dev: d)
            cls.is_device_capability = classmethod(lambda c, *a, **k: False)
            cls.is_tpu = classmethod(lambda c: False)
            mnbt, mns = EngineArgs.get_batch_defaults(world_size=1)
            for ctx in (UsageContext.OPENAI_API_SERVER, UsageContext.LLM_CLASS):
                rows.append((tier, ctx.name, mnbt[ctx], mns[ctx]))
    finally:
        for attr, v in saved.items():
            if v is not None:
                setattr(cls, attr, v)
    return rows


def use_cuda_platform():
    """`vllm serve` runs on a GPU; this machine has none (and no libcuda, so vLLM's own
    CudaPlatform cannot be imported). Pin a CUDA-typed platform built on vLLM's base class so
    the few defaults that consult the platform (the multimodal processor device, the
    compilation config's CUDA checks) are the ones a GPU host sees."""
    import vllm.platforms as platforms
    from vllm.platforms.interface import Platform, PlatformEnum

    class HostlessCuda(Platform):
        _enum = PlatformEnum.CUDA
        device_name = "cuda"
        device_type = "cuda"
        dispatch_key = "CUDA"
        ray_device_key = "GPU"

    platforms._current_platform = HostlessCuda()


def main():
    import vllm

    use_cuda_platform()
    from vllm.config import CacheConfig, SchedulerConfig
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    if vllm.__version__ != "0.34.0":
        sys.exit(f"need vllm 0.34.0, found {vllm.__version__}")
    import vllm.engine.arg_utils as arg_utils

    # vLLM reads the config classes' attribute docstrings (the flags' help) only when `--help`
    # is on its command line; ask for them.
    arg_utils.NEEDS_HELP = True
    parser = make_arg_parser(FlexibleArgumentParser(description="vllm serve"))
    ranges = field_ranges()
    rows = {}
    for a in parser._actions:
        if isinstance(a, argparse._HelpAction) or not a.option_strings:
            continue
        kind = action_kind(a)
        # vLLM's EnableDisableAction keeps hidden spellings (`--no-enable-x`) registered but
        # out of `option_strings`; the parser's map has them all.
        registered = [o for o, act in parser._option_string_actions.items() if act is a]
        ordered = list(a.option_strings) + sorted(set(registered) - set(a.option_strings))
        negative = set(getattr(a, "negative_option_strings", ()))
        if kind == "bool_optional" and not negative:
            negative = {o for o in ordered if o.startswith("--no-")}
        pos = [o for o in ordered if o not in negative]
        neg = [o for o in ordered if o in negative]
        if kind in ("store_true", "store_false", "bool_optional"):
            typ = "bool"
        else:
            typ = type_name(a.type)
            if typ not in ("json",) and isinstance(a.default, list):
                typ = "list:" + typ
        choices = "|".join(str(c) for c in a.choices) if a.choices else ""
        nargs = "" if a.nargs is None or kind != "value" else str(a.nargs)
        rows[a.dest] = [
            a.dest,
            kind,
            " ".join(pos),
            " ".join(neg),
            typ,
            jsonable(a.default),
            choices,
            nargs,
            ranges.get(a.dest, ""),
            first_sentence(a.help if a.help != argparse.SUPPRESS else ""),
        ]
    out = sys.stdout
    out.write(
        "# vLLM 0.34.0 `vllm serve` options, introspected from make_arg_parser by "
        "scripts/gen_vllm_flags.py. Do not edit.\n"
    )
    out.write("# dest\taction\toptions\tnegatives\ttype\tdefault\tchoices\tnargs\trange\thelp\n")
    for dest in sorted(rows):
        out.write("\t".join(rows[dest]) + "\n")
    out.write(
        "# class defaults: what vLLM's config classes use for a flag left at None "
        "(before platform / usage-context adjustments)\n"
    )
    out.write("# @class\tname\tvalue\n")
    for cls, name in (
        (CacheConfig, "DEFAULT_BLOCK_SIZE"),
        (CacheConfig, "DEFAULT_GPU_MEMORY_UTILIZATION"),
        (SchedulerConfig, "DEFAULT_MAX_NUM_BATCHED_TOKENS"),
        (SchedulerConfig, "DEFAULT_MAX_NUM_SEQS"),
    ):
        out.write(f"@class\t{cls.__name__}.{name}\t{json.dumps(getattr(cls, name))}\n")
    out.write(
        "# batch defaults: EngineArgs.get_batch_defaults(world_size=1) per device tier, "
        "the --max-num-batched-tokens / --max-num-seqs a usage context gets when not given\n"
    )
    out.write("# @batch\ttier\tusage_context\tmax_num_batched_tokens\tmax_num_seqs\n")
    for tier, ctx, mnbt, mns in batch_defaults():
        out.write(f"@batch\t{tier}\t{ctx}\t{mnbt}\t{mns}\n")


if __name__ == "__main__":
    main()
