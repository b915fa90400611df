#!/usr/bin/env python3
"""Write crates/twin-calibrate/data/inferencemax_gpt_oss_120b.csv from InferenceMAX result files.

Input: the `agg_bmk.json` artifacts of InferenceMAX's official runs (a list of result rows
written by InferenceMAX's utils/process_result.py: latencies in seconds, throughput per GPU).
Copies of runs 20662362255 and 20667906037 (vLLM v0.13.0, 2026-01-02) are stored in the
public repo gminneci/mantile at commit 72ff84ebfd56ee0b15bd17d7d49a70fbb4e50256 under
reconcile/sources/inferencemax/raw/run_<id>/agg_bmk.json.

Usage: extract_inferencemax.py RUN_ID=PATH [RUN_ID=PATH ...] > the.csv
Keeps the vLLM rows only; milliseconds, 4 decimals.
"""
import json
import sys

print("# InferenceMAX (SemiAnalysis) official runs, vLLM v0.13.0, openai/gpt-oss-120b (MXFP4).")
print("# Source: github.com/InferenceMAX/InferenceMAX/actions/runs/<run_id> artifact results_bmk/agg_bmk.json,")
print("# as copied into github.com/gminneci/mantile @ 72ff84ebfd56ee0b15bd17d7d49a70fbb4e50256,")
print("# reconcile/sources/inferencemax/raw/run_<run_id>/agg_bmk.json; written by scripts/extract_inferencemax.py.")
print("# Latencies are the benchmark's medians, its mean and its p99 TTFT (ms); output_tok_s_per_gpu as InferenceMAX reports it.")
print("run_id,gpu,tp,isl,osl,concurrency,median_ttft_ms,median_tpot_ms,median_itl_ms,median_e2e_ms,output_tok_s_per_gpu,mean_ttft_ms,p99_ttft_ms")
for arg in sys.argv[1:]:
    run_id, path = arg.split("=", 1)
    rows = [r for r in json.load(open(path)) if r["framework"] == "vllm"]
    rows.sort(key=lambda r: (r["hw"], r["tp"], r["isl"], r["osl"], r["conc"]))
    for r in rows:
        assert r["image"] == "vllm/vllm-openai:v0.13.0" and r["model"] == "openai/gpt-oss-120b", r
        assert r["ep"] == 1 and str(r["dp_attention"]).lower() == "false" and not r["disagg"], r
        ms = lambda k: f"{r[k] * 1e3:.4f}"
        print(
            f"{run_id},{r['hw']},{r['tp']},{r['isl']},{r['osl']},{r['conc']},"
            f"{ms('median_ttft')},{ms('median_tpot')},{ms('median_itl')},{ms('median_e2el')},"
            f"{r['output_tput_per_gpu']:.2f},{ms('mean_ttft')},{ms('p99_ttft')}"
        )
