"""The installed wheel, from a fresh virtualenv: the binary sits in the environment's bin/ and
the vllm_twin module drives it. Run by scripts/test after `maturin build`; exits non-zero on the
first failure."""

import os
import subprocess
import sys
import sysconfig

import vllm_twin

# The binary is the wheel's, in this environment, not one from PATH or a build tree.
exe = vllm_twin.binary()
assert os.path.dirname(exe) == sysconfig.get_path("scripts"), exe
assert os.access(exe, os.X_OK), exe
out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True).stdout
assert out.startswith("vllm-twin "), out
assert vllm_twin.version() == out.split()[-1]

# A simulation's report, as the CLI's --json.
r = vllm_twin.simulate(["--num-requests", "200", "--request-rate", "5", "--seed", "3"])
assert r["num_finished"] == 200, r["num_finished"]
assert r["run"]["seed"] == 3
assert 0 < r["ttft_s"]["p50"] < r["e2e_s"]["p50"], r["ttft_s"]
# Deterministic: the same inputs, the same report.
assert r == vllm_twin.simulate(["--num-requests", "200", "--request-rate", "5", "--seed", "3"])
# A pasted `vllm serve` line's flags move the engine as they do on the CLI.
small = vllm_twin.simulate(["--num-requests", "400", "--request-rate", "20", "--max-num-seqs", "4"])
assert small["num_running_peak"] <= 4, small["num_running_peak"]

# The sustainable rate.
s = vllm_twin.find_max_rate(["--num-requests", "600", "--request-rate", "10"])
assert s["max_requests_per_s"] < s["first_unsustained_requests_per_s"], s

# Bad input: the binary's message, as an exception.
try:
    vllm_twin.simulate(["--max-num-seqs", "many"])
except vllm_twin.TwinError as e:
    assert "--max-num-seqs" in str(e), e
    assert e.returncode == 2
else:
    raise AssertionError("a bad flag did not raise")

print(f"wheel ok: {exe} ({sys.version.split()[0]})")
