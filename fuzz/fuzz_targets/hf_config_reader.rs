//! A Hugging Face config.json (`--model-config`), then what the twin does with an accepted
//! one: vLLM's start-up memory plan on an H100 and the cost of a prefill and a decode step.
//! None of it may panic, whatever the numbers in the file.
#![no_main]
use libfuzzer_sys::fuzz_target;
use twin_cost::{BatchShape, CostModel, ServeConfig};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(model) = twin_cost::from_hf_config_json(&text) else {
        return;
    };
    let Ok(gpu) = twin_cost::gpu::lookup("h100-sxm") else {
        return;
    };
    let Ok(plan) = twin_cost::plan_memory(&model, gpu, &ServeConfig::default()) else {
        return;
    };
    let Ok(cost) = CostModel::from_plan(&model, gpu, &plan) else {
        return;
    };
    let mut batch = BatchShape::new();
    batch.push_prefill(512, 512, true);
    batch.push_decode(1024);
    let step = cost.step_time_s(&batch);
    assert!(step.step_time_s.is_finite() && step.step_time_s > 0.0, "{step:?}");
});
