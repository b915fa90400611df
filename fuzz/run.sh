#!/usr/bin/env bash
# Fuzz every target from seeds made of the project's real inputs.
#
#   fuzz/run.sh [RUNS_PER_TARGET] [TARGET...]     e.g. fuzz/run.sh 10000000
#
# Seeds: the oracle scenarios (tests/fixtures/oracle), the real traces, scrapes and golden
# expositions in ../shared (when present), and the config.json files in fuzz/seeds. cargo-fuzz
# needs nightly flags; stable rustc takes them with RUSTC_BOOTSTRAP=1 (no sanitizer: panics,
# aborts, timeouts and out-of-memory are what we look for). Each run prints libFuzzer's
# final "Done N runs in S second(s)" line. Crashes land in fuzz/artifacts/TARGET/.
set -euo pipefail
cd "$(dirname "$0")"
runs=${1:-100000}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(trace_reader scenario_reader metrics_parser hf_config_reader vllm_flags http_body)
shared=../../shared

seed() { # seed TARGET FILE [MAX_LINES]
  local dir=corpus/$1
  mkdir -p "$dir"
  [ -f "$2" ] || return 0
  if [ -n "${3:-}" ]; then head -n "$3" "$2" > "$dir/$(basename "$2")"; else cp "$2" "$dir/"; fi
}
for f in "$shared"/traces/*.csv "$shared"/traces/*.jsonl; do seed trace_reader "$f" 40; done
for f in ../tests/fixtures/oracle/scenarios/*.json ../tests/fixtures/oracle/pd/scenarios/*.json; do seed scenario_reader "$f"; done
for f in "$shared"/reference/scrapes/*.prom "$shared"/reference/golden/*.prom "$shared"/reference/golden/*.openmetrics; do
  seed metrics_parser "$f" 300
done
for f in seeds/hf_config_reader/*.json; do seed hf_config_reader "$f"; done
for f in seeds/vllm_flags/*.txt; do seed vllm_flags "$f"; done
for f in seeds/http_body/*.bin; do seed http_body "$f"; done

export RUSTC_BOOTSTRAP=1
for t in "${targets[@]}"; do
  mkdir -p corpus/"$t"
  echo "== $t: $runs runs"
  max_len=65536
  # Expositions are long; past a few KB a mutation explores nothing the parser has not seen.
  [ "$t" = metrics_parser ] && max_len=8192
  # The oracle's scenarios are under 6 KB; past 16 KB a mutant is a longer list of the same fields.
  [ "$t" = scenario_reader ] && max_len=16384
  build=()
  extra=()
  if [ "$t" = vllm_flags ]; then
    # clap's did-you-mean (Jaro over ~900 flag names) dominates an unknown flag's cost, and
    # compare tracing multiplies it sevenfold; flag names come from a dictionary instead.
    build=(--no-trace-compares --target-dir target-no-trace-compares)
    dict=$(mktemp)
    awk -F'\t' '!/^#/ { n = split($3 " " $4, o, " "); for (i = 1; i <= n; i++) if (o[i] != "") printf "\"%s\"\n", o[i] }' \
      ../crates/twin-sim/data/vllm_serve_flags.tsv > "$dict"
    extra=(-dict="$dict")
  fi
  if [ "$t" = scenario_reader ]; then
    # Half the time went to compare tracing inside the engine steps; the scenario's keys
    # (every quoted word of the reader) reach the fields instead.
    build=(--no-trace-compares --target-dir target-no-trace-compares)
    dict=$(mktemp)
    grep -o '"[a-z_]\+"' ../crates/twin-conformance/src/scenario.rs | sort -u > "$dict"
    extra=(-dict="$dict")
  fi
  log=$(mktemp)
  status=0
  cargo fuzz run --sanitizer none -O "${build[@]}" "$t" corpus/"$t" -- \
    -runs="$runs" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "${extra[@]}" >"$log" 2>&1 || status=$?
  grep -E "^(Done|stat::number_of_executed_units|stat::peak_rss_mb|==|INFO: Seed)|panicked|ERROR|SUMMARY|Test unit written|^error" "$log" || true
  if [ "$status" -ne 0 ]; then
    tail -40 "$log"
    echo "fuzz/run.sh: $t failed (exit $status); the input is in fuzz/artifacts/$t/" >&2
    exit "$status"
  fi
done
