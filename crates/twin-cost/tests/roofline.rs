//! Step-time model behaviour: monotonicity, regimes, parallelism, graphs, speculation, robustness.

use proptest::prelude::*;
use twin_cost::*;

fn cost(m: &str, g: &str, cfg: ServeConfig) -> CostModel {
    let m = model::lookup(m).unwrap();
    let g = gpu::lookup(g).unwrap();
    CostModel::new(&m, g, &cfg.resolve(&m, g).unwrap()).unwrap()
}

fn decode_batch(n: u32, ctx: u32) -> BatchShape {
    (0..n).map(|_| SeqChunk::decode(ctx)).collect()
}

#[test]
fn decode_time_grows_with_context_and_batch() {
    let c = cost("llama-3.1-8b", "h100", ServeConfig::default());
    let mut last = 0.0;
    for ctx in [0, 1000, 10_000, 100_000] {
        let t = c.step_time_s(&decode_batch(1, ctx)).step_time_s;
        assert!(t > last);
        last = t;
    }
    let mut last = 0.0;
    for n in [1, 8, 64, 256, 1024] {
        let t = c.step_time_s(&decode_batch(n, 1000)).step_time_s;
        assert!(t > last, "{n}");
        last = t;
    }
    // Small batches are weight-bound: 8 requests cost far less than 8x one request.
    let one = c.step_time_s(&decode_batch(1, 1000)).step_time_s;
    let eight = c.step_time_s(&decode_batch(8, 1000)).step_time_s;
    assert!(eight < 1.3 * one);
}

#[test]
fn prefill_is_compute_bound_and_decode_memory_bound() {
    let c = cost("llama-3.1-8b", "h100", ServeConfig::default());
    let mut p = BatchShape::new();
    p.push_prefill(8192, 0, true);
    let pre = c.step_time_s(&p);
    assert!(pre.breakdown.linear_compute_s > pre.breakdown.linear_memory_s);
    assert!(
        pre.utilisation.tensor_active > 0.5,
        "{}",
        pre.utilisation.tensor_active
    );
    assert_eq!(pre.num_sampled_rows, 1);
    assert_eq!(pre.graph_mode, GraphMode::CompiledEager);
    let dec = c.step_time_s(&decode_batch(16, 4000));
    assert!(dec.breakdown.linear_memory_s > dec.breakdown.linear_compute_s);
    assert!(
        dec.utilisation.dram_active > 0.6,
        "{}",
        dec.utilisation.dram_active
    );
    assert!(dec.utilisation.tensor_active < 0.1);
    assert_eq!(dec.graph_mode, GraphMode::FullCudaGraph);
    for u in [pre.utilisation, dec.utilisation] {
        for v in [u.tensor_active, u.dram_active, u.sm_active, u.gpu_util] {
            assert!((0.0..=1.0).contains(&v));
        }
        assert!(u.power_w > 0.0 && u.power_w <= 700.0);
    }
    // 8k-token prefill of an 8B model on H100: ~2*7.5e9*8192 FLOP at ~70% of 989 TF.
    assert!(
        pre.step_time_s > 0.12 && pre.step_time_s < 0.30,
        "{}",
        pre.step_time_s
    );
    // Mixed chunked-prefill batch uses piecewise graphs and costs about the sum of parts.
    let mut mixed = decode_batch(4, 2000);
    mixed.push_prefill(256, 0, false);
    assert_eq!(
        c.step_time_s(&mixed).graph_mode,
        GraphMode::PiecewiseCudaGraph
    );
}

#[test]
fn prefill_attention_is_quadratic() {
    let c = cost(
        "llama-3.1-8b",
        "h100",
        ServeConfig {
            max_num_batched_tokens: Some(32768),
            ..Default::default()
        },
    );
    let at = |ctx| {
        let mut b = BatchShape::new();
        b.push_prefill(2048, ctx, false);
        c.step_time_s(&b).breakdown.attention_s
    };
    // A chunk after a long prefix pays for the whole prefix.
    assert!(at(60_000) > 10.0 * at(0));
}

#[test]
fn moe_touches_more_experts_with_more_tokens() {
    let c = cost("qwen3-30b-a3b", "h100", ServeConfig::default());
    let one = c.step_time_s(&decode_batch(1, 100));
    assert!((one.breakdown.moe_experts_touched - 8.0).abs() < 1e-6);
    let many = c.step_time_s(&decode_batch(256, 100));
    assert!(
        many.breakdown.moe_experts_touched > 127.0 && many.breakdown.moe_experts_touched <= 128.0
    );
    assert!(many.breakdown.moe_s > 5.0 * one.breakdown.moe_s);
}

#[test]
fn expert_parallel_waits_for_the_busiest_rank_at_small_batch() {
    let with = |ep: bool| {
        cost(
            "qwen3-30b-a3b",
            "h100",
            ServeConfig {
                tensor_parallel_size: 4,
                enable_expert_parallel: ep,
                ..Default::default()
            },
        )
    };
    let (tp, ep) = (with(false), with(true));
    // The routed experts' time less the fixed per-layer overhead both share.
    let overhead_s = 48.0 * twin_cost::roofline::MOE_LAYER_OVERHEAD_S;
    let experts_s =
        |c: &CostModel, n: u32| c.step_time_s(&decode_batch(n, 500)).breakdown.moe_s - overhead_s;
    // A handful of tokens: 8-32 experts touched over 4 ranks of 32 whole experts; the busiest
    // rank reads well above the quarter TP slicing gives every rank.
    assert!(experts_s(&ep, 1) > 1.5 * experts_s(&tp, 1));
    assert!(experts_s(&ep, 4) > 1.3 * experts_s(&tp, 4));
    // Hundreds of tokens touch nearly every expert on every rank: the imbalance fades.
    assert!(experts_s(&ep, 512) < 1.1 * experts_s(&tp, 512));
    assert!(experts_s(&ep, 512) >= experts_s(&tp, 512));
    // Same experts touched, same mean bytes: only the time differs.
    let b = decode_batch(4, 500);
    let (a, e) = (tp.step_time_s(&b), ep.step_time_s(&b));
    assert_eq!(
        a.breakdown.moe_experts_touched,
        e.breakdown.moe_experts_touched
    );
    assert_eq!(a.bytes_read, e.bytes_read);
}

#[test]
fn busiest_of_n_ranks_grows_with_n() {
    use twin_cost::roofline::expected_max_of_standard_normals as z;
    assert_eq!(z(1), 0.0);
    assert!((z(2) - 1.0 / std::f64::consts::PI.sqrt()).abs() < 1e-4);
    let mut last = 0.0;
    for n in 2..2000 {
        assert!(z(n) > last, "z({n}) = {} <= {last}", z(n));
        last = z(n);
    }
    assert!((z(16) - 1.766).abs() < 1e-3 && z(2000) < 3.6);
}

#[test]
fn tensor_parallel_trades_weights_for_all_reduce() {
    let tp1 = cost(
        "llama-3.1-70b",
        "b200",
        ServeConfig {
            max_model_len: MaxModelLen::Tokens(8192),
            ..Default::default()
        },
    );
    let tp4 = cost(
        "llama-3.1-70b",
        "b200",
        ServeConfig {
            tensor_parallel_size: 4,
            max_model_len: MaxModelLen::Tokens(8192),
            ..Default::default()
        },
    );
    let b = decode_batch(8, 2000);
    let (a, d) = (tp1.step_time_s(&b), tp4.step_time_s(&b));
    assert_eq!(a.breakdown.tp_allreduce_s, 0.0);
    // 2 all-reduces per layer, each at least the ~5 µs the fastest published kernels take.
    assert!(d.breakdown.tp_allreduce_s >= 160.0 * 5e-6);
    assert!((a.breakdown.linear_memory_s / d.breakdown.linear_memory_s - 4.0).abs() < 0.3);
    assert!(d.step_time_s < a.step_time_s);
    // MI300X TP=2 is link-limited (one 64 GB/s xGMI link): all-reduce is slower than on H100.
    let big = decode_batch(512, 100);
    let mi = cost(
        "llama-3.1-8b",
        "mi300x",
        ServeConfig {
            tensor_parallel_size: 2,
            ..Default::default()
        },
    )
    .step_time_s(&big);
    let h = cost(
        "llama-3.1-8b",
        "h100",
        ServeConfig {
            tensor_parallel_size: 2,
            ..Default::default()
        },
    )
    .step_time_s(&big);
    assert!(mi.breakdown.tp_allreduce_s > 2.0 * h.breakdown.tp_allreduce_s);
}

#[test]
fn nccl_all_reduces_cost_more_than_the_one_shot_kernels_and_grow_with_the_group() {
    let with = |tp: u32, g: &str, disable: bool| {
        cost(
            "llama-3.1-70b",
            g,
            ServeConfig {
                tensor_parallel_size: tp,
                disable_custom_all_reduce: disable,
                max_model_len: MaxModelLen::Tokens(8192),
                ..Default::default()
            },
        )
        .step_time_s(&decode_batch(8, 2000))
        .breakdown
        .tp_allreduce_s
    };
    // On A100 `--disable-custom-all-reduce` sends decode's small all-reduces through NCCL.
    for tp in [4, 8] {
        assert!(
            with(tp, "a100", true) > 1.2 * with(tp, "a100", false),
            "tp {tp}"
        );
    }
    // On H100 FlashInfer's all-reduce comes first and the flag does not reach it.
    for tp in [2, 4, 8] {
        assert_eq!(with(tp, "h100", true), with(tp, "h100", false), "tp {tp}");
    }
    // Per-call latency grows with the group: 2 -> 8 GPUs more than doubles a ring's.
    let per_layer = |tp, g, disable| with(tp, g, disable) / 160.0;
    assert!(per_layer(8, "a100", true) > 2.0 * per_layer(2, "a100", true));
    assert!(per_layer(8, "h100", false) > per_layer(2, "h100", false));
    // PCIe groups beyond two have no custom kernel: the flag changes nothing there.
    assert_eq!(with(4, "l40s", true), with(4, "l40s", false));
    assert_ne!(with(2, "l40s", true), with(2, "l40s", false));
}

#[test]
fn fused_allreduce_rmsnorm_drops_two_kernels_per_layer_within_its_token_range() {
    // B200 TP8: the fusion takes messages up to 1 MiB (182 tokens of gpt-oss' 2880 bf16).
    let tp8 = ServeConfig {
        tensor_parallel_size: 8,
        ..ServeConfig::default()
    };
    let c = cost("openai/gpt-oss-120b", "b200", tp8.clone());
    let last_fused = (1024 * 1024) / (2880 * 2);
    let fixed = |c: &CostModel, n: u32| c.step_time_s(&decode_batch(n, 1000)).breakdown.fixed_gpu_s;
    let two_floors = 2.0 * 36.0 * roofline::KERNEL_LATENCY_FLOOR_S;
    let jump = fixed(&c, last_fused + 1) - fixed(&c, last_fused);
    assert!((jump - two_floors).abs() < 1e-12, "{jump}");
    assert_eq!(fixed(&c, 1), fixed(&c, last_fused));
    // Eager runs no compile passes, TP1 has no all-reduce: the norm kernels at every size.
    let eager = cost(
        "openai/gpt-oss-120b",
        "b200",
        ServeConfig {
            enforce_eager: true,
            ..tp8
        },
    );
    let tp1 = cost("openai/gpt-oss-120b", "b200", ServeConfig::default());
    for c in [&eager, &tp1] {
        assert_eq!(fixed(c, 1), fixed(c, last_fused + 1));
    }
    assert!((fixed(&tp1, 1) - fixed(&c, 1) - two_floors).abs() < 1e-12);
    // Hopper TP8 fuses up to 0.5 MiB (91 tokens); Marlin's padded MoE output (2880 -> 3072,
    // sliced after its all-reduce) keeps only the attention's norm fused.
    let h100_tp8 = |moe_backend| {
        cost(
            "openai/gpt-oss-120b",
            "h100",
            ServeConfig {
                tensor_parallel_size: 8,
                moe_backend,
                ..ServeConfig::default()
            },
        )
    };
    let last_fused = (512 * 1024) / (2880 * 2);
    assert_eq!(last_fused, 91);
    for (backend, fused_per_layer) in [(MoeBackend::Auto, 2.0), (MoeBackend::Marlin, 1.0)] {
        let c = h100_tp8(backend);
        let jump = fixed(&c, last_fused + 1) - fixed(&c, last_fused);
        let want = fused_per_layer * 36.0 * roofline::KERNEL_LATENCY_FLOOR_S;
        assert!((jump - want).abs() < 1e-12, "{backend:?}: {jump}");
    }
}

#[test]
fn marlin_experts_on_hopper_are_bound_by_the_sms_not_the_hbm() {
    // gpt-oss-120b at 64 decodes touches ~111 experts a layer: the step is the experts' read.
    let moe_s = |g: &str, moe_backend| {
        let c = cost(
            "openai/gpt-oss-120b",
            g,
            ServeConfig {
                tensor_parallel_size: 2,
                moe_backend,
                ..ServeConfig::default()
            },
        );
        c.step_time_s(&decode_batch(64, 1000)).breakdown.moe_s
    };
    // H200 has 43% more HBM bandwidth than H100 and the same 132 SMs: triton's bandwidth-bound
    // read gains most of it, Marlin's dequantizing read at most the few percent by which
    // H100's streaming rate falls under the SMs' rate.
    let triton_gain = moe_s("h100", MoeBackend::Triton) / moe_s("h200", MoeBackend::Triton);
    let marlin_gain = moe_s("h100", MoeBackend::Marlin) / moe_s("h200", MoeBackend::Marlin);
    assert!(triton_gain > 1.3, "{triton_gain}");
    assert!((1.0..1.1).contains(&marlin_gain), "{marlin_gain}");
    // Each kernel pays its own per-layer overhead: TRT-LLM with MXFP8 activations the least.
    let g = gpu::lookup("b200").unwrap();
    let overhead = |k: ExpertKernel| k.layer_overhead_s(g);
    assert!(overhead(ExpertKernel::Mxfp4TrtllmMxfp8) < overhead(ExpertKernel::Mxfp4Marlin));
    assert!(overhead(ExpertKernel::Mxfp4Marlin) < overhead(ExpertKernel::Mxfp4Triton));
    assert_eq!(
        overhead(ExpertKernel::Mxfp4TrtllmBf16),
        roofline::MOE_LAYER_OVERHEAD_S
    );
}

#[test]
fn pipeline_parallel_reports_stage_time_and_bubble() {
    let c = cost(
        "llama-3.1-70b",
        "h100",
        ServeConfig {
            tensor_parallel_size: 2,
            pipeline_parallel_size: 2,
            max_model_len: MaxModelLen::Tokens(8192),
            ..Default::default()
        },
    );
    let s = c.step_time_s(&decode_batch(32, 1000));
    assert!(s.breakdown.pp_p2p_s > 0.0);
    assert!(s.stage_time_s < s.step_time_s && s.stage_time_s > 0.4 * s.step_time_s);
    assert!((s.breakdown.pp_bubble_s - (s.step_time_s - s.stage_time_s)).abs() < 1e-12);
}

#[test]
fn eager_costs_most_at_small_batch() {
    let graphs = cost("llama-3.1-8b", "h100", ServeConfig::default());
    let eager = cost(
        "llama-3.1-8b",
        "h100",
        ServeConfig {
            enforce_eager: true,
            ..Default::default()
        },
    );
    let small = decode_batch(1, 500);
    let (g, e) = (graphs.step_time_s(&small), eager.step_time_s(&small));
    assert_eq!(e.graph_mode, GraphMode::Eager);
    let slow = e.step_time_s / g.step_time_s;
    assert!(slow > 1.15 && slow < 1.6, "{slow}");
    let big = decode_batch(512, 2000);
    let slow_big = eager.step_time_s(&big).step_time_s / graphs.step_time_s(&big).step_time_s;
    assert!(slow_big < slow, "{slow_big} vs {slow}");
}

#[test]
fn async_scheduling_hides_host_time() {
    let on = cost("llama-3.1-8b", "h100", ServeConfig::default());
    let off = cost(
        "llama-3.1-8b",
        "h100",
        ServeConfig {
            async_scheduling: false,
            ..Default::default()
        },
    );
    let b = decode_batch(64, 1000);
    let (a, s) = (on.step_time_s(&b), off.step_time_s(&b));
    // The async gap plus the host time no overlap hides.
    let exposed =
        twin_cost::roofline::ASYNC_SCHEDULING_GAP_S + twin_cost::roofline::HOST_EXPOSED_STEP_S;
    assert!((a.breakdown.host_exposed_s - exposed).abs() < 1e-9);
    assert!(s.breakdown.host_exposed_s > a.breakdown.host_exposed_s);
    assert!(s.step_time_s > a.step_time_s);
}

#[test]
fn speculative_decoding_widens_verify_and_adds_drafting() {
    let spec = SpecDecodeConfig::from_json(r#"{"method":"eagle3","model":"yuhuili/EAGLE3-LLaMA3.1-Instruct-8B","num_speculative_tokens":3}"#).unwrap();
    let c = cost(
        "llama-3.1-8b",
        "h100",
        ServeConfig {
            speculative: Some(spec.clone()),
            ..Default::default()
        },
    );
    let base = cost("llama-3.1-8b", "h100", ServeConfig::default());
    let verify: BatchShape = (0..4).map(|_| SeqChunk::verify(2000, 3)).collect();
    let v = c.step_time_s(&verify);
    let d = base.step_time_s(&decode_batch(4, 2000));
    assert_eq!(v.num_tokens, 16);
    assert_eq!(v.num_sampled_rows, 16);
    assert!(v.breakdown.spec_draft_s > 0.0);
    assert!(v.step_time_s > d.step_time_s && v.step_time_s < 2.0 * d.step_time_s);
    // Net effect at low load: tokens per second improve with EAGLE-3's default acceptance.
    let speedup = spec.mean_tokens_per_step() / v.step_time_s / (1.0 / d.step_time_s);
    assert!(speedup > 1.5, "{speedup}");
    assert_eq!(v.graph_mode, GraphMode::FullCudaGraph);

    let ngram = SpecDecodeConfig::from_json(
        r#"{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4}"#,
    )
    .unwrap();
    let n = cost(
        "llama-3.1-8b",
        "h100",
        ServeConfig {
            speculative: Some(ngram),
            async_scheduling: false,
            ..Default::default()
        },
    );
    let s = n.step_time_s(&(0..4).map(|_| SeqChunk::verify(2000, 4)).collect());
    assert_eq!(s.breakdown.spec_draft_s, 0.0);
    assert!(s.breakdown.host_cpu_s > 4.0 * 15e-6);

    let mtp =
        SpecDecodeConfig::from_json(r#"{"method":"deepseek_mtp","num_speculative_tokens":1}"#)
            .unwrap();
    let ds = cost(
        "deepseek-v3",
        "h200",
        ServeConfig {
            tensor_parallel_size: 8,
            speculative: Some(mtp),
            ..Default::default()
        },
    );
    let s = ds.step_time_s(&(0..8).map(|_| SeqChunk::verify(4000, 1)).collect());
    assert!(s.breakdown.spec_draft_s > 0.0 && s.breakdown.spec_draft_s < s.step_time_s * 0.5);

    let draft = model::lookup("llama-3.1-8b").unwrap();
    let dm = SpecDecodeConfig::from_json(
        r#"{"method":"draft_model","model":"meta-llama/Llama-3.1-8B","num_speculative_tokens":2}"#,
    )
    .unwrap();
    let big = cost(
        "llama-3.1-70b",
        "h100",
        ServeConfig {
            tensor_parallel_size: 4,
            max_model_len: MaxModelLen::Tokens(8192),
            speculative: Some(dm),
            draft_model: Some(draft),
            ..Default::default()
        },
    );
    let s = big.step_time_s(&(0..2).map(|_| SeqChunk::verify(1000, 2)).collect());
    assert!(s.breakdown.spec_draft_s > 0.0);
}

#[test]
fn degenerate_batches_do_not_panic() {
    let c = cost("gpt-oss-20b", "h100", ServeConfig::default());
    let empty = c.step_time_s(&BatchShape::new());
    assert_eq!(empty.step_time_s, 0.0);
    let zeros: BatchShape = (0..5)
        .map(|_| SeqChunk {
            new_tokens: 0,
            context_len: 7,
            draft_tokens: 3,
            emits_token: true,
        })
        .collect();
    assert_eq!(c.step_time_s(&zeros).num_tokens, 0);
    let huge: BatchShape = (0..3)
        .map(|_| SeqChunk {
            new_tokens: u32::MAX,
            context_len: u32::MAX,
            draft_tokens: u32::MAX,
            emits_token: true,
        })
        .collect();
    let s = c.step_time_s(&huge);
    assert!(s.step_time_s.is_finite() && s.step_time_s > 0.0);
}

#[test]
fn every_catalog_model_and_gpu_costs_a_step() {
    for m in model::catalog() {
        for g in gpu::catalog() {
            let Ok(rc) = ServeConfig {
                tensor_parallel_size: 8,
                ..Default::default()
            }
            .resolve(&m, g) else {
                continue;
            };
            let c = CostModel::new(&m, g, &rc).unwrap();
            let mut b = decode_batch(32, 3000);
            b.push_prefill(1024, 0, true);
            let s = c.step_time_s(&b);
            assert!(
                s.step_time_s.is_finite() && s.step_time_s > 0.0 && s.step_time_s < 10.0,
                "{} {}",
                m.name,
                g.key
            );
        }
    }
}

proptest! {
    #[test]
    fn random_batches_give_finite_bounded_costs(
        seqs in prop::collection::vec((1u32..4096, 0u32..200_000, 0u32..4, any::<bool>()), 1..64),
        model_idx in 0usize..12,
    ) {
        let m = &model::catalog()[model_idx];
        let g = gpu::lookup("b200").unwrap();
        let rc = ServeConfig { tensor_parallel_size: 8, ..Default::default() }.resolve(m, g).unwrap();
        let c = CostModel::new(m, g, &rc).unwrap();
        let batch: BatchShape = seqs.iter().map(|&(n, ctx, d, e)| SeqChunk { new_tokens: n, context_len: ctx, draft_tokens: d, emits_token: e }).collect();
        let s = c.step_time_s(&batch);
        prop_assert!(s.step_time_s.is_finite() && s.step_time_s > 0.0);
        prop_assert!(s.gpu_time_s <= s.step_time_s);
        for v in [s.utilisation.tensor_active, s.utilisation.dram_active, s.utilisation.sm_active] {
            prop_assert!((0.0..=1.0).contains(&v));
        }
        // Adding a request never makes the step faster.
        let mut more = batch.clone();
        more.push(SeqChunk::decode(1000));
        prop_assert!(c.step_time_s(&more).step_time_s >= s.step_time_s * 0.999_999);
    }
}

#[test]
fn data_parallel_moe_steps_share_the_moe_layers_and_pay_their_dispatch() {
    let dp2 = cost(
        "gpt-oss-20b",
        "h100",
        ServeConfig {
            data_parallel_size: 2,
            ..Default::default()
        },
    );
    assert_eq!(dp2.dp_lockstep_size(), 2);
    let own = decode_batch(8, 1000);
    let alone = dp2.step_time_s_across_dp(
        &own,
        DpTokens {
            local_run: 8,
            across_dp: 16,
            fewest_run: 8,
        },
    );
    let busy_peer = dp2.step_time_s_across_dp(
        &own,
        DpTokens {
            local_run: 8,
            across_dp: 1024,
            fewest_run: 8,
        },
    );
    // The MoE layers compute the other engine's tokens too, and gather them.
    assert!(busy_peer.breakdown.moe_s > alone.breakdown.moe_s);
    assert!(busy_peer.breakdown.dp_dispatch_s > alone.breakdown.dp_dispatch_s);
    assert!(alone.breakdown.dp_dispatch_s > 0.0);
    // Attention is this engine's own.
    assert_eq!(busy_peer.breakdown.attention_s, alone.breakdown.attention_s);
    // The collective takes as long for the busy engine as for the one beside it: the engine
    // with the fewest tokens gathers the most, and both wait for it.
    let mut prefill = BatchShape::new();
    prefill.push_prefill(1016, 0, true);
    let busy = dp2.step_time_s_across_dp(
        &prefill,
        DpTokens {
            local_run: 1016,
            across_dp: 1024,
            fewest_run: 8,
        },
    );
    assert_eq!(
        busy.breakdown.dp_dispatch_s,
        busy_peer.breakdown.dp_dispatch_s
    );
    assert!(busy.step_time_s > busy_peer.step_time_s);
    // A dummy batch (no requests of its own) still runs every layer on its padded tokens.
    let dummy = dp2.step_time_s_across_dp(
        &BatchShape::new(),
        DpTokens {
            local_run: 8,
            across_dp: 16,
            fewest_run: 8,
        },
    );
    assert!(dummy.step_time_s > 0.0 && dummy.breakdown.attention_s == 0.0);
    assert!(dummy.step_time_s < alone.step_time_s);
    assert_eq!(dummy.num_sampled_rows, 0);
    // Padding to a CUDA graph only while every engine's batch fits one.
    assert!(dp2.dp_pads_to(8) && !dp2.dp_pads_to(100_000));
    // A dense model's DP engines are independent.
    let dense = cost(
        "llama-3.1-8b",
        "h100",
        ServeConfig {
            data_parallel_size: 2,
            ..Default::default()
        },
    );
    assert_eq!(dense.dp_lockstep_size(), 1);
    // Half the experts per GPU: one engine's own batch streams fewer expert bytes.
    let dp1 = cost("gpt-oss-20b", "h100", ServeConfig::default());
    let b = decode_batch(64, 1000);
    assert!(
        dp2.step_time_s(&b).breakdown.moe_s < dp1.step_time_s(&b).breakdown.moe_s,
        "experts sharded over both engines' GPUs"
    );
}

/// gpt-oss-120b at TP4 on an H100, `n` decodes at 1000 tokens under a step overhead.
fn step_with_overhead(async_scheduling: bool, n: u32, overhead_s: f64) -> StepCost {
    let m = model::lookup("openai/gpt-oss-120b").unwrap();
    let g = gpu::lookup("h100").unwrap();
    let cfg = ServeConfig {
        tensor_parallel_size: 4,
        async_scheduling,
        ..ServeConfig::default()
    }
    .resolve(&m, g)
    .unwrap();
    let cal = CostCalibration {
        step_overhead_s: overhead_s,
        ..CostCalibration::default()
    };
    CostModel::with_calibration(&m, g, &cfg, &cal)
        .unwrap()
        .step_time_s(&decode_batch(n, 1000))
}

#[test]
fn a_negative_step_overhead_takes_host_time_then_kernel_floors() {
    let step = |overhead_s: f64| step_with_overhead(true, 4, overhead_s);
    let base = step(0.0);
    let exposed = base.breakdown.host_exposed_s;
    // Down to minus the host time every step exposes, only the host part moves.
    let no_host = step(-exposed);
    assert!(no_host.breakdown.host_exposed_s.abs() < 1e-12);
    assert_eq!(no_host.breakdown.fixed_gpu_s, base.breakdown.fixed_gpu_s);
    assert!((base.step_time_s - no_host.step_time_s - exposed).abs() < 1e-9);
    // A millisecond more comes off the kernel floors: the step is that much quicker.
    let quicker = step(-exposed - 1e-3);
    assert!((no_host.step_time_s - quicker.step_time_s - 1e-3).abs() < 1e-9);
    assert!((base.breakdown.fixed_gpu_s - quicker.breakdown.fixed_gpu_s - 1e-3).abs() < 1e-9);
    // Past the floors and the MoE layers' overhead nothing is left to take: the weights and
    // the all-reduces still cost what they cost.
    let floor = step(-1.0);
    assert_eq!(floor.step_time_s, step(-0.5).step_time_s);
    assert!(floor.step_time_s > base.breakdown.tp_allreduce_s + base.breakdown.linear_s);
    // Either scheduling mode, any batch: once past the host time every step exposes, each
    // further millisecond comes off once. The host keeps its per-request time.
    for async_scheduling in [true, false] {
        for n in [1, 64, 256] {
            let at = |overhead_s: f64| step_with_overhead(async_scheduling, n, overhead_s);
            let (a, b) = (at(-1.0e-3), at(-2.0e-3));
            assert!(
                (a.step_time_s - b.step_time_s - 1e-3).abs() < 1e-9,
                "async {async_scheduling}, {n} decodes: {} ms",
                (a.step_time_s - b.step_time_s) * 1e3
            );
            assert_eq!(a.breakdown.host_exposed_s, b.breakdown.host_exposed_s);
            if !async_scheduling && n > 1 {
                assert!(b.breakdown.host_exposed_s > 0.0);
            }
        }
    }
}
