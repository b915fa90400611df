//! The official openai Python SDK against the twin: chat and completions, streaming and not,
//! usage in streams, and the SDK's error classes for 400 / 401 / 404.
//! Needs `TWIN_PYTHON` (a Python with `openai` installed); fails loudly without it.

mod common;

use std::process::Command;
use std::time::Duration;

use common::serve;

const SCRIPT: &str = r#"
import sys, openai
base, key = sys.argv[1], sys.argv[2]
c = openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=0)
models = c.models.list()
m = models.data[0].id
assert models.data[0].id == "meta-llama/Llama-3.1-8B-Instruct", models
r = c.chat.completions.create(model=m, messages=[{"role": "user", "content": "Hi"}],
                              max_tokens=7, extra_body={"ignore_eos": True})
assert r.id.startswith("chatcmpl-"), r
assert r.choices[0].message.role == "assistant"
assert r.choices[0].finish_reason == "length", r
assert r.usage.completion_tokens == 7, r.usage
chunks = list(c.chat.completions.create(model=m, messages=[{"role": "user", "content": "Hi"}],
        max_tokens=5, stream=True, stream_options={"include_usage": True},
        extra_body={"ignore_eos": True}))
assert chunks[0].choices[0].delta.role == "assistant", chunks[0]
text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
assert len(text) > 0
assert chunks[-1].usage.completion_tokens == 5, chunks[-1]
assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "length"
r = c.completions.create(model=m, prompt="Once upon a time", max_tokens=4,
                         extra_body={"ignore_eos": True})
assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 4, r
s = c.completions.create(model=m, prompt=[1, 2, 3], max_tokens=3, stream=True,
                         extra_body={"ignore_eos": True})
assert sum(1 for _ in s) == 3
try:
    c.completions.create(model=m, prompt="x", max_tokens=10**6)
    raise SystemExit("no error for max_tokens")
except openai.BadRequestError as e:
    assert e.status_code == 400 and "max_model_len" in str(e), e
try:
    c.completions.create(model="nope", prompt="x")
    raise SystemExit("no error for model")
except openai.NotFoundError as e:
    assert e.status_code == 404
bad = openai.OpenAI(base_url=base + "/v1", api_key="wrong", max_retries=0)
try:
    bad.models.list()
    raise SystemExit("no error for api key")
except openai.AuthenticationError as e:
    assert e.status_code == 401
print("SDK OK")
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_python_sdk_works_against_the_twin() {
    let python = std::env::var("TWIN_PYTHON").unwrap_or_else(|_| {
        panic!("TWIN_PYTHON is not set: point it at a Python with `openai` installed (python3 -m venv /work/pyenv && /work/pyenv/bin/pip install openai; TWIN_PYTHON=/work/pyenv/bin/python)")
    });
    let srv = serve("--api-key k123 --dcgm-port 0").await;
    let base = format!("http://{}", srv.addr);
    let out = tokio::task::spawn_blocking(move || {
        Command::new(&python)
            .args(["-c", SCRIPT, &base, "k123"])
            .output()
            .unwrap_or_else(|e| panic!("cannot run TWIN_PYTHON={python}: {e}"))
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("SDK OK"),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    srv.shutdown(Duration::from_secs(5)).await;
}

/// Sampling parameters vLLM refuses (`SamplingParams._verify_args`) reach the SDK as
/// `BadRequestError` with vLLM's message and `param`, on both endpoints.
const SAMPLING_SCRIPT: &str = r#"
import sys, openai
base = sys.argv[1]
c = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0)
m = "meta-llama/Llama-3.1-8B-Instruct"
cases = [
    (dict(temperature=-1), "temperature must be non-negative, got -1.0.", "temperature"),
    (dict(temperature=2.5), "temperature must be in [0, 2], got 2.5.", "temperature"),
    (dict(top_p=0), "top_p must be in (0, 1], got 0.0.", "top_p"),
    (dict(top_p=1.01), "top_p must be in (0, 1], got 1.01.", "top_p"),
    (dict(extra_body={"top_k": -3}), "top_k must be 0 (disable), or at least 1, got -3.", None),
    (dict(n=0), "n must be at least 1, got 0.", None),
    (dict(max_tokens=0), "max_tokens must be at least 1, got 0.", "max_tokens"),
    (dict(presence_penalty=-2.5), "presence_penalty must be in [-2, 2], got -2.5.", None),
    (dict(frequency_penalty=3), "frequency_penalty must be in [-2, 2], got 3.0.", None),
    (dict(extra_body={"repetition_penalty": 0}), "repetition_penalty must be greater than zero, got 0.0.", None),
    (dict(extra_body={"min_p": -0.1}), "min_p must be in [0, 1], got -0.1.", None),
    (dict(stop=["ok", ""]), "stop cannot contain an empty string.", None),
]
for kw, msg, param in cases:
    for chat in (False, True):
        try:
            if chat:
                c.chat.completions.create(model=m, messages=[{"role": "user", "content": "Hi"}], **kw)
            else:
                c.completions.create(model=m, prompt="Hi", **kw)
            raise SystemExit(f"no error for {kw} (chat={chat})")
        except openai.BadRequestError as e:
            err = e.response.json()["error"]
            assert e.status_code == 400, (kw, e)
            assert err == {"message": msg, "type": "BadRequestError", "param": param, "code": 400}, (kw, err)
# In range on every bound: served.
r = c.completions.create(model=m, prompt="Hi", max_tokens=2, temperature=0, top_p=1,
                         presence_penalty=-2, frequency_penalty=2,
                         extra_body={"top_k": -1, "min_p": 1, "repetition_penalty": 1e-3})
assert r.usage.completion_tokens >= 1, r
print("SAMPLING OK")
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_python_sdk_sees_vllms_sampling_errors() {
    let python = std::env::var("TWIN_PYTHON").unwrap_or_else(|_| {
        panic!("TWIN_PYTHON is not set: point it at a Python with `openai` installed")
    });
    let srv = serve("--dcgm-port 0").await;
    let base = format!("http://{}", srv.addr);
    let out = tokio::task::spawn_blocking(move || {
        Command::new(&python)
            .args(["-c", SAMPLING_SCRIPT, &base])
            .output()
            .unwrap_or_else(|e| panic!("cannot run TWIN_PYTHON={python}: {e}"))
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("SAMPLING OK"),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    srv.shutdown(Duration::from_secs(5)).await;
}
