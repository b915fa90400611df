//! Memory-plan behaviour against vLLM 0.34's startup sequence.

use twin_cost::units::GIB;
use twin_cost::*;

fn plan(m: &str, g: &str, cfg: ServeConfig) -> Result<MemoryPlan, CostError> {
    plan_memory(&model::lookup(m).unwrap(), gpu::lookup(g).unwrap(), &cfg)
}

fn tokens(n: u64) -> MaxModelLen {
    MaxModelLen::Tokens(n)
}

#[test]
fn fp8_kv_doubles_num_gpu_blocks() {
    let bf16 = plan("llama-3.1-8b", "h100", ServeConfig::default()).unwrap();
    let fp8 = plan(
        "llama-3.1-8b",
        "h100",
        ServeConfig {
            kv_cache_dtype: KvCacheDtype::Fp8E4m3,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(fp8.kv_bytes_per_token() * 2, bf16.kv_bytes_per_token());
    let ratio = fp8.num_gpu_blocks as f64 / bf16.num_gpu_blocks as f64;
    assert!((ratio - 2.0).abs() < 0.01, "{ratio}");
    let nv = plan(
        "llama-3.1-8b",
        "b200",
        ServeConfig {
            kv_cache_dtype: KvCacheDtype::Nvfp4,
            ..Default::default()
        },
    )
    .unwrap();
    // NVFP4: 1/4 of the bytes plus 1/16 of head_dim in scales per K and V: 144 of 512 B per head.
    assert_eq!(nv.kv_bytes_per_token(), 32 * 8 * 144);
}

/// vLLM docs (quantized_kvcache.md): L4, Qwen3-4B, max-model-len 32768, 11.47 GiB KV
/// reservation: 83,488 tokens BF16 vs 166,992 FP8.
#[test]
fn qwen3_4b_l4_docs_capacity() {
    let cfg_json = r#"{"architectures":["Qwen3ForCausalLM"],"model_type":"qwen3","hidden_size":2560,
      "intermediate_size":9728,"num_attention_heads":32,"num_hidden_layers":36,"num_key_value_heads":8,
      "head_dim":128,"vocab_size":151936,"max_position_embeddings":40960,"tie_word_embeddings":true,
      "torch_dtype":"bfloat16","sliding_window":null,"use_sliding_window":false}"#;
    let m = from_hf_config_json(cfg_json).unwrap();
    let g = gpu::lookup("l4").unwrap();
    let bytes = (11.47 * GIB as f64) as u64;
    for (dtype, published) in [
        (KvCacheDtype::Auto, 83_488.0),
        (KvCacheDtype::Fp8E4m3, 166_992.0),
    ] {
        let cfg = ServeConfig {
            max_model_len: tokens(32768),
            kv_cache_memory_bytes: Some(bytes),
            kv_cache_dtype: dtype,
            block_size: Some(16),
            ..Default::default()
        };
        let p = plan_memory(&m, g, &cfg).unwrap();
        let err = (p.kv_cache_tokens as f64 - published) / published;
        assert!(
            err.abs() < 0.002,
            "{dtype:?}: {} vs {published}",
            p.kv_cache_tokens
        );
    }
}

#[test]
fn tensor_parallel_splits_kv_per_gpu_for_llama_70b() {
    let cfg = |tp| ServeConfig {
        tensor_parallel_size: tp,
        max_model_len: tokens(32768),
        ..Default::default()
    };
    // B200 holds the whole 70B model on one GPU, so TP=1 and TP=2 can be compared directly.
    let tp1 = plan("llama-3.1-70b", "b200", cfg(1)).unwrap();
    let tp2 = plan("llama-3.1-70b", "b200", cfg(2)).unwrap();
    assert_eq!(tp1.kv_bytes_per_token(), 327_680);
    assert_eq!(
        tp2.kv_bytes_per_token(),
        163_840,
        "each rank keeps 4 of the 8 KV heads"
    );
    // Same pool holds twice the tokens per GPU; the pool itself also grows (half the weights),
    // so capacity is super-linear, as the distributed-inference blog's TP1->TP2 x13.9 blocks.
    assert!(tp2.kv_cache_tokens as f64 > 2.0 * tp1.kv_cache_tokens as f64);
    let tokens_per_gib = |p: &MemoryPlan| p.kv_cache_tokens as f64 / p.available_kv_bytes() as f64;
    let r = tokens_per_gib(&tp2) / tokens_per_gib(&tp1);
    assert!((r - 2.0).abs() < 0.02, "{r}");
    // On H100 the 70B model needs TP >= 2; TP=4 again more than doubles capacity.
    let h2 = plan("llama-3.1-70b", "h100", cfg(2)).unwrap();
    let h4 = plan("llama-3.1-70b", "h100", cfg(4)).unwrap();
    assert!(h4.kv_cache_tokens > 2 * h2.kv_cache_tokens);
    // At TP 1 the weights alone (131 GiB) are more than the GPU: loading fails, and the
    // message says so and from which TP their share fits.
    match plan("llama-3.1-70b", "h100", cfg(1)) {
        Err(CostError::Startup {
            kind: StartupErrorKind::WeightsDoNotFit,
            message,
            ..
        }) => {
            assert!(message.contains("weights take 131.41 GiB"), "{message}");
            assert!(
                message.contains("fits from --tensor-parallel-size 2"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn too_long_max_model_len_returns_vllms_message_and_estimate() {
    let cfg = |len| ServeConfig {
        tensor_parallel_size: 2,
        max_model_len: tokens(len),
        ..Default::default()
    };
    let err = plan("llama-3.1-70b", "h100", cfg(131_072)).unwrap_err();
    let CostError::Startup {
        kind,
        message,
        estimated_max_model_len,
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(*kind, StartupErrorKind::MaxModelLenTooLong);
    assert!(message.starts_with(
        "To serve at least one request with the model's max seq len (131072), (20.0 GiB KV cache is needed, \
         which is larger than the available KV cache memory ("
    ), "{message}");
    let est = estimated_max_model_len.unwrap();
    assert!(message.contains(&format!(
        "Based on the available memory, the estimated maximum model length is {est}. "
    )));
    assert!(message.ends_with(
        "Decreasing `max_model_len` also reduces what is needed. See \
         https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
    ));
    assert!(est > 0 && est < 131_072 && est % 64 == 0, "{est}");
    // Retrying with the estimate converges: vLLM checks once on the profiled estimate and again
    // on the memory measured after warmup (extensible KV cache), each error carrying its estimate.
    let mut len = est;
    let mut tries = 0;
    while let Err(e) = plan("llama-3.1-70b", "h100", cfg(len)) {
        let CostError::Startup {
            estimated_max_model_len: Some(next),
            message,
            ..
        } = e
        else {
            panic!("{e:?}")
        };
        assert!(message.contains("CUDA graphs and warmup"), "{message}");
        assert!(next < len && next > 0);
        len = next;
        tries += 1;
        assert!(tries < 3);
    }
    assert!(
        plan("llama-3.1-70b", "h100", cfg(len + 64)).is_err(),
        "the estimate is the boundary"
    );

    // Without the extensible KV cache the hint is the classic one.
    let classic = ServeConfig {
        enable_extensible_kv_cache: Some(false),
        ..cfg(131_072)
    };
    let msg = plan("llama-3.1-70b", "h100", classic)
        .unwrap_err()
        .vllm_message();
    assert!(msg.contains(
        "Try increasing `gpu_memory_utilization` when initializing the engine (this flag also controls CPU memory \
         reservation on the CPU backend, despite its name). Decreasing"
    ), "{msg}");
    let util = ServeConfig {
        gpu_memory_utilization: Some(0.9),
        ..cfg(131_072)
    };
    let msg = plan("llama-3.1-70b", "h100", util)
        .unwrap_err()
        .vllm_message();
    assert!(
        msg.contains("within `gpu_memory_utilization`=0.9; increase it"),
        "{msg}"
    );
}

#[test]
fn auto_fit_picks_the_longest_fitting_length() {
    let p = plan(
        "llama-3.1-8b",
        "l4",
        ServeConfig {
            max_model_len: MaxModelLen::Auto,
            ..Default::default()
        },
    )
    .unwrap();
    let len = p.max_model_len();
    assert!(
        len > 8192 && len < 131_072 && len.is_multiple_of(64),
        "{len}"
    );
    assert!(plan(
        "llama-3.1-8b",
        "l4",
        ServeConfig {
            max_model_len: tokens(len),
            ..Default::default()
        }
    )
    .is_ok());
    assert!(plan(
        "llama-3.1-8b",
        "l4",
        ServeConfig {
            max_model_len: tokens(len + 64),
            ..Default::default()
        }
    )
    .is_err());
}

#[test]
fn enforce_eager_removes_cudagraph_memory() {
    let graphs = plan("llama-3.1-8b", "h100", ServeConfig::default()).unwrap();
    let eager = plan(
        "llama-3.1-8b",
        "h100",
        ServeConfig {
            enforce_eager: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(graphs.cudagraph_bytes() > 100 * (1 << 20) && graphs.cudagraph_bytes() < 3 * GIB);
    assert_eq!(eager.cudagraph_bytes(), 0);
    assert!(eager.config.cudagraph_capture_sizes.is_empty());
    // The graph pool is freed, and so is its share of the extensible sizing margin.
    let gained = eager.available_kv_bytes() - graphs.available_kv_bytes();
    assert!(gained >= graphs.cudagraph_bytes() as i64, "{gained}");
    let classic = |eager| ServeConfig {
        enforce_eager: eager,
        enable_extensible_kv_cache: Some(false),
        ..Default::default()
    };
    let (g, e) = (
        plan("llama-3.1-8b", "h100", classic(false)).unwrap(),
        plan("llama-3.1-8b", "h100", classic(true)).unwrap(),
    );
    assert_eq!(
        e.available_kv_bytes() - g.available_kv_bytes(),
        g.cudagraph_bytes() as i64
    );
    assert!(eager.num_gpu_blocks > graphs.num_gpu_blocks);
}

#[test]
fn engine_arg_defaults_resolve_like_034() {
    let p = plan("llama-3.1-8b", "h100", ServeConfig::default()).unwrap();
    assert_eq!(
        (p.config.max_num_batched_tokens, p.config.max_num_seqs),
        (8192, 1024)
    );
    assert_eq!(p.block_size(), 64);
    assert_eq!(p.config.gpu_memory_utilization, 1.0);
    assert!(p.config.extensible_kv_cache);
    assert_eq!(p.max_model_len(), 131_072);
    let llm = plan(
        "llama-3.1-8b",
        "h100",
        ServeConfig {
            usage_context: UsageContext::LlmClass,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(llm.config.max_num_batched_tokens, 16384);
    let a100 = plan("llama-3.1-8b", "a100", ServeConfig::default()).unwrap();
    assert_eq!(
        (a100.config.max_num_batched_tokens, a100.config.max_num_seqs),
        (2048, 256)
    );
    let classic = plan(
        "llama-3.1-8b",
        "h100",
        ServeConfig {
            enable_extensible_kv_cache: Some(false),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(classic.config.gpu_memory_utilization, 0.92);
    assert!(classic.num_gpu_blocks < p.num_gpu_blocks);
    let thr = plan(
        "llama-3.1-8b",
        "h100",
        ServeConfig {
            performance_mode: PerformanceMode::Throughput,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(
        (thr.config.max_num_batched_tokens, thr.config.max_num_seqs),
        (16384, 2048)
    );
    // Short max_model_len clamps the defaults: min(max_num_seqs * max_model_len, default).
    let tiny = plan(
        "llama-3.1-8b",
        "h100",
        ServeConfig {
            max_model_len: tokens(4),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(tiny.config.max_num_batched_tokens, 4096);
    let rocm = plan("llama-3.1-8b", "mi300x", ServeConfig::default()).unwrap();
    assert_eq!(rocm.block_size(), 16);
    assert_eq!(rocm.config.max_num_batched_tokens, 16384);
}

#[test]
fn llama_8b_h100_plan_is_plausible() {
    let p = plan("llama-3.1-8b", "h100", ServeConfig::default()).unwrap();
    // vLLM logs "model weights take 14.99GiB" for Llama-3.1-8B BF16.
    let w = p.weights_bytes() as f64 / GIB as f64;
    assert!((w - 14.96).abs() < 0.1, "{w}");
    assert_eq!(p.kv_bytes_per_token(), 131_072);
    assert_eq!(p.page_size_bytes, 64 * 131_072 / 32);
    // ~61 GiB pool -> ~500k tokens, ~3.8x concurrency at 128k.
    assert!(
        p.kv_cache_tokens > 400_000 && p.kv_cache_tokens < 520_000,
        "{}",
        p.kv_cache_tokens
    );
    assert!((p.max_concurrency - p.num_gpu_blocks as f64 / 2048.0).abs() < 1e-9);
    let text = p.to_string();
    assert!(
        text.contains(
            "KV cache pool = min(GPU total x utilization, free after CUDA context) - weights"
        ),
        "{text}"
    );
    let classic = plan(
        "llama-3.1-8b",
        "h100",
        ServeConfig {
            enable_extensible_kv_cache: Some(false),
            ..Default::default()
        },
    )
    .unwrap();
    let text = classic.to_string();
    assert!(text.contains("KV cache pool = GPU total x utilization - weights - activation peak - CUDA graphs - non-torch overhead"));
    assert!(text.contains("x 0.92 - 14.96 GiB"), "{text}");
    // The printed terms add up (to display rounding).
    let r = p.limiting();
    let sum = p.init_free_memory_bytes as i64
        - (r.weights_bytes
            + r.activation_peak_bytes
            + r.cudagraph_bytes
            + r.non_torch_bytes
            + r.margin_bytes) as i64;
    assert_eq!(sum, r.available_kv_bytes);
    assert!(text.contains("Maximum concurrency for 131072 tokens per request"));
}

#[test]
fn hybrid_and_sliding_models_group_like_vllm() {
    let oss = plan("gpt-oss-20b", "h100", ServeConfig::default()).unwrap();
    assert_eq!((oss.num_full_groups, oss.num_sliding_groups), (1, 1));
    // A block holds 12 layers' pages; a 128k request needs 2048 full + cdiv(127 + 2*8192, 64) + 1 sliding.
    assert_eq!(oss.limiting().bytes_per_block, 12 * 64 * 8 * 128 * 2);
    assert_eq!(
        oss.blocks_per_request,
        2048 + (127 + 16384u64).div_ceil(64) + 1
    );
    assert_eq!(oss.single_group_num_blocks(), oss.num_gpu_blocks / 2);
    let llama = plan("llama-3.1-8b", "h100", ServeConfig::default()).unwrap();
    assert_eq!(llama.single_group_num_blocks(), llama.num_gpu_blocks);
    let skip = plan(
        "gpt-oss-20b",
        "h100",
        ServeConfig {
            kv_cache_dtype: KvCacheDtype::Fp8E4m3,
            kv_cache_skip_sliding_window: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(
        skip.sliding_block_size, 32,
        "BF16 SW pages match the FP8 page with half the tokens"
    );
    let mistral = plan("mistral-7b-v0.1", "h100", ServeConfig::default()).unwrap();
    assert_eq!(
        (mistral.num_full_groups, mistral.num_sliding_groups),
        (0, 1)
    );
    let ds = plan(
        "deepseek-v3",
        "h200",
        ServeConfig {
            tensor_parallel_size: 8,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(
        ds.kv_bytes_per_token(),
        61 * 576 * 2,
        "MLA latent is not split by TP"
    );
}

#[test]
fn pipeline_parallel_takes_min_blocks_over_stages() {
    let p = plan(
        "llama-3.1-70b",
        "h100",
        ServeConfig {
            tensor_parallel_size: 2,
            pipeline_parallel_size: 2,
            max_model_len: tokens(32768),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(p.ranks.len(), 2);
    assert_eq!(
        p.num_gpu_blocks,
        p.ranks.iter().map(|r| r.num_blocks).min().unwrap()
    );
    assert_eq!(p.ranks[0].num_layers + p.ranks[1].num_layers, 80);
}

#[test]
fn overrides_and_speculative_drafters() {
    let p = plan(
        "llama-3.1-8b",
        "h100",
        ServeConfig {
            num_gpu_blocks_override: Some(1000),
            max_model_len: tokens(8192),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(p.num_gpu_blocks, 1000);
    assert!(!p.config.extensible_kv_cache);
    let spec = SpecDecodeConfig::from_json(
        r#"{"method":"eagle3","model":"x/EAGLE3","num_speculative_tokens":3}"#,
    )
    .unwrap();
    let e = plan(
        "llama-3.1-8b",
        "h100",
        ServeConfig {
            speculative: Some(spec),
            ..Default::default()
        },
    )
    .unwrap();
    let base = plan("llama-3.1-8b", "h100", ServeConfig::default()).unwrap();
    assert!(e.weights_bytes() > base.weights_bytes());
    assert_eq!(
        e.kv_bytes_per_token(),
        base.kv_bytes_per_token() + 4096,
        "one draft attention layer"
    );
    assert_eq!(e.config.decode_query_len, 4);
}

#[test]
fn bad_inputs_are_errors_naming_the_field() {
    let cases = [
        (
            ServeConfig {
                gpu_memory_utilization: Some(0.0),
                ..Default::default()
            },
            "gpu_memory_utilization",
        ),
        (
            ServeConfig {
                gpu_memory_utilization: Some(1.5),
                ..Default::default()
            },
            "gpu_memory_utilization",
        ),
        (
            ServeConfig {
                tensor_parallel_size: 3,
                ..Default::default()
            },
            "tensor_parallel_size",
        ),
        (
            ServeConfig {
                tensor_parallel_size: 0,
                ..Default::default()
            },
            "tensor_parallel_size",
        ),
        (
            ServeConfig {
                pipeline_parallel_size: 33,
                ..Default::default()
            },
            "pipeline_parallel_size",
        ),
        (
            ServeConfig {
                max_model_len: tokens(200_000),
                ..Default::default()
            },
            "max_model_len",
        ),
        (
            ServeConfig {
                max_model_len: tokens(0),
                ..Default::default()
            },
            "max_model_len",
        ),
        (
            ServeConfig {
                max_num_batched_tokens: Some(16),
                max_num_seqs: Some(64),
                ..Default::default()
            },
            "max_num_batched_tokens",
        ),
        (
            ServeConfig {
                block_size: Some(0),
                ..Default::default()
            },
            "block_size",
        ),
        (
            ServeConfig {
                kv_cache_dtype: KvCacheDtype::Fp8DsMla,
                ..Default::default()
            },
            "kv_cache_dtype",
        ),
    ];
    for (cfg, field) in cases {
        let e = plan("llama-3.1-8b", "h100", cfg).unwrap_err().to_string();
        assert!(e.contains(field), "{field}: {e}");
    }
    let e = plan(
        "deepseek-v3",
        "h200",
        ServeConfig {
            tensor_parallel_size: 8,
            kv_cache_dtype: KvCacheDtype::Nvfp4,
            ..Default::default()
        },
    );
    assert!(e.unwrap_err().to_string().contains("kv_cache_dtype"));
    // Non-extensible startup check when free memory is below the utilization target.
    let e = plan(
        "llama-3.1-8b",
        "h100",
        ServeConfig {
            gpu_memory_utilization: Some(1.0),
            enable_extensible_kv_cache: Some(false),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            CostError::Startup {
                kind: StartupErrorKind::FreeMemoryBelowUtilization,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e
        .vllm_message()
        .starts_with("Free memory on device cuda:0 ("));
}

#[test]
fn every_catalog_model_plans_on_a_big_enough_node() {
    for m in model::catalog() {
        let g = gpu::lookup("b200").unwrap();
        let tp = [1u32, 2, 4, 8].into_iter().find(|tp| {
            plan_memory(
                &m,
                g,
                &ServeConfig {
                    tensor_parallel_size: *tp,
                    max_model_len: tokens(8192),
                    ..Default::default()
                },
            )
            .is_ok()
        });
        assert!(tp.is_some(), "{} does not fit on 8xB200", m.name);
    }
}

#[test]
fn data_parallel_engines_shard_an_moe_models_experts() {
    let dp = |n: u32, ep: bool| ServeConfig {
        data_parallel_size: n,
        enable_expert_parallel: ep,
        ..ServeConfig::default()
    };
    // DeepSeek-V3 (671B in FP8) fits no single H200; eight DP engines hold an eighth of the
    // routed experts each (vLLM's `--data-parallel-size 8 --enable-expert-parallel`).
    let one = plan("deepseek-v3", "h200", dp(1, false));
    assert!(one.is_err(), "one H200 cannot hold DeepSeek-V3");
    let eight = plan("deepseek-v3", "h200", dp(8, true)).expect("DP8 + EP starts");
    // ~656B routed-expert parameters / 8 + ~17B replicated: ~100 GB of FP8 per GPU.
    let gb = eight.weights_bytes() as f64 / 1e9;
    assert!((90.0..110.0).contains(&gb), "{gb} GB of weights per GPU");
    assert!(eight.num_gpu_blocks > 0);
    // Expert parallelism deals whole experts, tensor parallelism slices them: same bytes.
    let sliced = plan("deepseek-v3", "h200", dp(8, false)).unwrap();
    assert_eq!(sliced.weights_bytes(), eight.weights_bytes());
    // gpt-oss-120b: two engines each hold half the experts, so each keeps more KV.
    let g1 = plan("gpt-oss-120b", "h100", dp(1, false)).unwrap();
    let g2 = plan("gpt-oss-120b", "h100", dp(2, false)).unwrap();
    assert!(g2.weights_bytes() < g1.weights_bytes());
    assert!(g2.num_gpu_blocks > 2 * g1.num_gpu_blocks);
    // Each MoE layer of the profile run also holds the other engine's gathered tokens (with
    // few sequences the forward, not the sampler, sets the peak).
    let peak = |n: u32| {
        let cfg = ServeConfig {
            max_num_seqs: Some(64),
            ..dp(n, false)
        };
        plan("gpt-oss-120b", "h100", cfg).unwrap().ranks[0].activation_peak_bytes as f64
    };
    // 8192 tokens × (2 × 2880 hidden + 128 router logits) × 2 bytes.
    let gathered = peak(2) - peak(1);
    assert!(
        (gathered - 8192.0 * (2.0 * 2880.0 + 128.0) * 2.0).abs() < 1e3,
        "{gathered}"
    );
    // A dense model's DP engines are whole copies: DP changes nothing on one GPU.
    let l1 = plan("llama-3.1-8b", "h100", dp(1, false)).unwrap();
    let l2 = plan("llama-3.1-8b", "h100", dp(2, false)).unwrap();
    assert_eq!(l1.num_gpu_blocks, l2.num_gpu_blocks);
    assert!(plan("llama-3.1-8b", "h100", dp(0, false)).is_err());
}
