//! config.json values past the twin's bounds are errors naming the field, never an overflow
//! (the fuzz target fuzz/hf_config_reader found these).

use twin_cost::{from_hf_config_json, CostModel, ServeConfig};

const LLAMA: &str = r#"{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":4096,
  "intermediate_size":14336,"num_attention_heads":32,"num_hidden_layers":32,"num_key_value_heads":8,
  "vocab_size":128256,"max_position_embeddings":131072,"torch_dtype":"bfloat16"}"#;

fn with(field: &str, value: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(LLAMA).unwrap();
    let mut m = v.as_object().unwrap().clone();
    m.insert(field.into(), serde_json::from_str(value).unwrap());
    serde_json::Value::Object(m).to_string()
}

#[test]
fn huge_dimensions_name_their_field() {
    for (field, value) in [
        // The fuzzer's input: 1.4e46 as a float, once cast to u64 and multiplied out.
        (
            "intermediate_size",
            "14336777777777777777777777777777777777777777770",
        ),
        ("intermediate_size", "18446744073709551615"),
        ("hidden_size", "1000000000"),
        ("num_hidden_layers", "100000"),
        ("num_attention_heads", "65536"),
        ("vocab_size", "1e12"),
        ("max_position_embeddings", "1e15"),
    ] {
        let e = from_hf_config_json(&with(field, value)).expect_err(field);
        assert!(e.to_string().contains(field), "{field}: {e}");
    }
}

#[test]
fn configs_at_the_bounds_plan_and_cost_without_overflow() {
    let big = [
        ("hidden_size", "131072"),
        ("intermediate_size", "1048576"),
        ("num_hidden_layers", "1024"),
        ("num_attention_heads", "4096"),
        ("num_key_value_heads", "4096"),
        ("vocab_size", "4194304"),
        ("max_position_embeddings", "16777216"),
    ];
    let v: serde_json::Value = serde_json::from_str(LLAMA).unwrap();
    let mut m = v.as_object().unwrap().clone();
    for (f, value) in big {
        m.insert(f.into(), serde_json::from_str(value).unwrap());
    }
    let text = serde_json::Value::Object(m).to_string();
    let model = from_hf_config_json(&text).expect("at the bounds");
    // Far too big for one GPU: vLLM's refusal, as an error, not a panic.
    let gpu = twin_cost::gpu::lookup("h100-sxm").unwrap();
    if let Ok(plan) = twin_cost::plan_memory(&model, gpu, &ServeConfig::default()) {
        let cost = CostModel::from_plan(&model, gpu, &plan).unwrap();
        let mut b = twin_cost::BatchShape::new();
        b.push_decode(1000);
        assert!(cost.step_time_s(&b).step_time_s.is_finite());
    }
    assert!(model.params_total() > 0);
}
