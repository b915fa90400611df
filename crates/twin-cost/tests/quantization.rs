//! `--dtype` and `--quantization` against the checkpoint, as vLLM's `ModelConfig` checks them:
//! a 16-bit checkpoint takes `--dtype` and online fp8 but not a pre-quantized method; a
//! quantized checkpoint refuses another method.

use twin_cost::*;

fn resolve(model: &str, cfg: ServeConfig) -> Result<ResolvedServeConfig, CostError> {
    let m = model::lookup(model).expect("catalog model");
    let g = gpu::lookup("h100").expect("catalog gpu");
    cfg.resolve(&m, g)
}

#[test]
fn dtype_casts_an_unquantized_checkpoint() {
    let fp16 = resolve(
        "llama-3.1-8b",
        ServeConfig {
            dtype: Some(WeightFormat::Fp16),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(fp16.weight_format, WeightFormat::Fp16);
    let auto = resolve("llama-3.1-8b", ServeConfig::default()).unwrap();
    assert_eq!(auto.weight_format, WeightFormat::Bf16);
    // gpt-oss: the attention weights take the dtype, the MXFP4 experts keep theirs.
    let oss = resolve(
        "openai/gpt-oss-20b",
        ServeConfig {
            dtype: Some(WeightFormat::Fp16),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(
        (oss.weight_format, oss.expert_weight_format),
        (WeightFormat::Fp16, WeightFormat::Mxfp4)
    );
}

#[test]
fn quantization_must_match_the_checkpoint() {
    let q = |model: &str, f| {
        resolve(
            model,
            ServeConfig {
                quantization: Some(f),
                ..Default::default()
            },
        )
    };
    // Online fp8 on a bf16 checkpoint is what vLLM does on load.
    assert_eq!(
        q("llama-3.1-8b", WeightFormat::Fp8).unwrap().weight_format,
        WeightFormat::Fp8
    );
    for f in [WeightFormat::Awq, WeightFormat::Gptq, WeightFormat::Nvfp4] {
        let e = q("llama-3.1-8b", f).unwrap_err().to_string();
        assert!(e.contains("Cannot find the config file"), "{e}");
    }
    let e = q("openai/gpt-oss-20b", WeightFormat::Fp8)
        .unwrap_err()
        .to_string();
    assert!(e.contains("(mxfp4) does not match"), "{e}");
    let same = q("openai/gpt-oss-20b", WeightFormat::Mxfp4).unwrap();
    assert_eq!(same.expert_weight_format, WeightFormat::Mxfp4);
}
