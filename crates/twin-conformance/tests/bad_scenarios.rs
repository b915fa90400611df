//! Bad scenario files are errors that name the field, never panics.

use proptest::prelude::*;
use twin_conformance::parse_scenario;

fn err_of(text: &str) -> String {
    match parse_scenario(text) {
        Ok(_) => panic!("accepted a bad scenario: {text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn each_bad_field_is_named() {
    let cases = [
        (
            r#"{"name":"x","requests":[{"id":"a","prompt_len":5}]}"#,
            "max_tokens",
        ),
        (
            r#"{"name":"x","engine":{"policy":"lifo"},"requests":[]}"#,
            "engine.policy",
        ),
        (
            r#"{"name":"x","engine":{"block_size":"16"},"requests":[]}"#,
            "engine.block_size",
        ),
        (
            r#"{"name":"x","engine":{"max_num_seqs":3000},"requests":[]}"#,
            "engine.max_num_batched_tokens",
        ),
        (
            r#"{"name":"x","engine":{"max_num_active_seqs":999},"requests":[]}"#,
            "engine.max_num_active_seqs",
        ),
        (
            r#"{"name":"x","engine":{"watermark":1.5},"requests":[]}"#,
            "engine.watermark",
        ),
        (
            r#"{"name":"x","engine":{"num_gpu_blocks":3},"requests":[]}"#,
            "engine.num_gpu_blocks",
        ),
        (
            r#"{"name":"x","engine":{"enable_chunked_prefill":false,"max_num_batched_tokens":512},"requests":[]}"#,
            "engine.max_num_batched_tokens",
        ),
        (
            r#"{"name":"x","requests":[{"id":"a","prompt_len":5000,"max_tokens":1}]}"#,
            "request a: prompt",
        ),
        (
            r#"{"name":"x","requests":[{"id":"a","prompt_len":5,"max_tokens":0}]}"#,
            "request a: max_tokens",
        ),
        (
            r#"{"name":"x","requests":[{"id":"a","prompt_len":5,"max_tokens":1},{"id":"a","prompt_len":5,"max_tokens":1}]}"#,
            "request a: id",
        ),
        (
            r#"{"name":"x","requests":[{"id":"a","prompt_len":5,"max_tokens":1,"spec_accept":[1]}]}"#,
            "spec_accept",
        ),
        (
            r#"{"name":"x","requests":[{"id":"a","prompt_len":5,"prefix_group":"g","prefix_len":9,"max_tokens":1}]}"#,
            "prefix_len",
        ),
        (
            r#"{"name":"x","generate":[{"count":2,"max_tokens":3}]}"#,
            "generate[0].prompt_len",
        ),
        (r#"{"requests":[]}"#, "name"),
        (r#"[1,2]"#, "<root>"),
        // The name becomes `<out-dir>/<name>.jsonl`: it must not leave the directory.
        (r#"{"name":"../../etc/x","requests":[]}"#, "name"),
        (r#"{"name":"a/b","requests":[]}"#, "name"),
        (r#"{"name":".hidden","requests":[]}"#, "name"),
        (r#"{"name":"","requests":[]}"#, "name"),
        // A budget of 2^64 - 1 once tripped the scheduler's signed budget assertion.
        (
            r#"{"name":"x","engine":{"max_num_batched_tokens":18446744073709551615},"requests":[]}"#,
            "engine.max_num_batched_tokens",
        ),
        (
            r#"{"name":"x","engine":{"max_model_len":18446744073709551615},"requests":[]}"#,
            "engine.max_model_len",
        ),
        // Found by fuzz/scenario_reader: prompt + max_tokens overflowed in the running pass.
        (
            r#"{"name":"x","requests":[{"id":"a","prompt_len":5,"max_tokens":604444444444444444}]}"#,
            "max_tokens",
        ),
        // Found by fuzz/scenario_reader: vLLM 0.34 itself fails an assertion here (a padded
        // spec-decode admission clipped by the threshold); the twin overflowed later.
        (
            r#"{"name":"x","engine":{"num_speculative_tokens":43,"long_prefill_token_threshold":23},"requests":[]}"#,
            "engine.long_prefill_token_threshold",
        ),
        // Found by fuzz/scenario_reader: 1 + num_speculative_tokens overflowed in the
        // spec-decode padding check itself.
        (
            r#"{"name":"x","engine":{"num_speculative_tokens":18446744073709551615},"requests":[]}"#,
            "engine.num_speculative_tokens",
        ),
        // The running sum itself must not overflow.
        (
            r#"{"name":"x","requests":[{"id":"a","prompt_len":18446744073709551615,"max_tokens":1}]}"#,
            "prompt_len",
        ),
        // Found by fuzz/scenario_reader (a timeout): 111 M prompt tokens to synthesise.
        (
            r#"{"name":"x","generate":[{"count":92830,"prompt_len":1201,"max_tokens":6}]}"#,
            "prompt_len",
        ),
        // Found by fuzz/scenario_reader: start + i * every overflowed.
        (
            r#"{"name":"x","generate":[{"count":3,"arrival_every":18446744073709551615,"prompt_len":5,"max_tokens":3}]}"#,
            "arrival_every",
        ),
        // Checked before a prompt's tokens or a group's requests are made.
        (
            r#"{"name":"x","requests":[{"id":"a","prompt_len":1000000000000,"max_tokens":1}]}"#,
            "prompt_len",
        ),
        (
            r#"{"name":"x","generate":[{"count":1000000000,"prompt_len":5,"max_tokens":3}]}"#,
            "count",
        ),
    ];
    for (text, field) in cases {
        let e = err_of(text);
        assert!(
            e.contains(field),
            "error for {text} should name {field}: {e}"
        );
    }
}

#[test]
fn malformed_json_reports_line_and_column() {
    let e = err_of("{\n  \"name\": \"x\",\n  oops\n}");
    assert!(e.contains("line 3"), "{e}");
}

proptest! {
    /// Arbitrary edits of a valid scenario never panic the parser or the runner.
    #[test]
    fn mutated_scenarios_never_panic(cut in 0usize..400, insert in "[0-9a-z\\[\\]{}\",:-]{0,6}") {
        let base = r#"{"name":"m","engine":{"block_size":16,"num_gpu_blocks":64,"max_num_batched_tokens":64,"max_num_seqs":4,"max_model_len":256,"num_speculative_tokens":2,"async_scheduling":true},"requests":[{"id":"a","prompt_len":40,"max_tokens":5,"spec_accept":[1,2]},{"id":"b","prompt_len":20,"prefix_group":"p","max_tokens":7,"abort_step":3}],"prefix_groups":{"p":{"len":16}},"generate":[{"count":3,"prompt_len":[10,30],"max_tokens":4,"arrival_every":2}]}"#;
        let cut = cut.min(base.len());
        let text = format!("{}{}{}", &base[..cut], insert, &base[cut..]);
        // Run what parses, within a size that keeps the test quick.
        if let Ok(scn) = parse_scenario(&text).map_err(|e| e.to_string()).and_then(|s| {
            if s.requests.len() <= 200 && s.config.num_gpu_blocks <= 1 << 16 { Ok(s) } else { Err(String::new()) }
        }) {
            let mut sink = Vec::new();
            twin_conformance::run_scenario(&scn, &mut sink).expect("in-memory write");
        }
    }
}
