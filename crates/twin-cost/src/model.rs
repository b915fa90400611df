//! Model catalog and Hugging Face `config.json` parsing: the architecture numbers the memory
//! plan and the roofline need (hardware-and-models.md §2.1; parameter counts reproduce its
//! derived table).

use serde_json::Value;

use crate::error::CostError;
use crate::precision::WeightFormat;

/// Attention flavour; decides KV bytes per token and attention FLOPs.
#[derive(Debug, Clone, PartialEq)]
pub enum Attention {
    /// MHA / GQA / MQA with `num_kv_heads` K and V heads of `head_dim`.
    Gqa,
    /// DeepSeek multi-head latent attention: one latent of `kv_lora_rank + qk_rope_head_dim`.
    Mla(MlaSpec),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MlaSpec {
    pub kv_lora_rank: u64,
    pub qk_rope_head_dim: u64,
    pub qk_nope_head_dim: u64,
    pub v_head_dim: u64,
    pub q_lora_rank: Option<u64>,
}

impl MlaSpec {
    /// `MLAAttentionSpec.head_size`: kv_lora_rank + qk_rope_head_dim (576 for DeepSeek-V3).
    pub fn latent_dim(&self) -> u64 {
        self.kv_lora_rank + self.qk_rope_head_dim
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeSpec {
    /// Routed experts per MoE layer.
    pub num_experts: u64,
    /// Routed experts each token activates (top-k).
    pub experts_per_token: u64,
    /// Intermediate size of one routed expert.
    pub expert_intermediate_size: u64,
    /// Always-on shared experts (DeepSeek: 1).
    pub num_shared_experts: u64,
    pub shared_expert_intermediate_size: u64,
    /// Leading layers that keep a dense MLP (`first_k_dense_replace`).
    pub first_dense_layers: u32,
    /// Experts and router carry biases (gpt-oss).
    pub expert_bias: bool,
}

/// Everything the cost model needs to know about one model.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSpec {
    /// Hugging Face id, e.g. `meta-llama/Llama-3.1-8B-Instruct` (or the `_name_or_path` of a parsed config).
    pub name: String,
    pub model_type: String,
    pub num_layers: u32,
    pub hidden_size: u64,
    pub num_attention_heads: u64,
    pub num_kv_heads: u64,
    pub head_dim: u64,
    /// Dense MLP intermediate size (for MoE models: that of the leading dense layers).
    pub intermediate_size: u64,
    pub vocab_size: u64,
    pub max_position_embeddings: u64,
    pub tie_word_embeddings: bool,
    /// q/k/v (and o) projections carry biases (gpt-oss, Qwen2).
    pub attention_bias: bool,
    pub attention: Attention,
    pub moe: Option<MoeSpec>,
    /// Window of the sliding-window layers.
    pub sliding_window: Option<u64>,
    /// Per layer: true when it uses sliding-window attention. Empty: every layer is full.
    pub sliding_layers: Vec<bool>,
    /// Storage format of attention / dense-MLP linears in the checkpoint.
    pub weight_format: WeightFormat,
    /// Storage format of routed experts in the checkpoint (gpt-oss: MXFP4).
    pub expert_weight_format: WeightFormat,
    /// Multi-token-prediction layers shipped in the checkpoint (DeepSeek-V3: 1).
    pub num_mtp_layers: u32,
}

impl ModelSpec {
    pub fn is_mla(&self) -> bool {
        matches!(self.attention, Attention::Mla(_))
    }

    pub fn mla(&self) -> Option<&MlaSpec> {
        match &self.attention {
            Attention::Mla(m) => Some(m),
            Attention::Gqa => None,
        }
    }

    pub fn is_sliding(&self, layer: u32) -> bool {
        self.sliding_layers
            .get(layer as usize)
            .copied()
            .unwrap_or(false)
    }

    pub fn num_sliding_layers(&self) -> u32 {
        self.sliding_layers.iter().filter(|s| **s).count() as u32
    }

    pub fn num_full_layers(&self) -> u32 {
        self.num_layers - self.num_sliding_layers()
    }

    /// True when `layer` has a routed-expert MLP.
    pub fn is_moe_layer(&self, layer: u32) -> bool {
        self.moe.is_some_and(|m| layer >= m.first_dense_layers)
    }

    pub fn num_moe_layers(&self) -> u32 {
        self.moe
            .map_or(0, |m| self.num_layers.saturating_sub(m.first_dense_layers))
    }

    /// Query projection width (heads x per-head q/k dim).
    pub fn q_dim(&self) -> u64 {
        match &self.attention {
            Attention::Gqa => self.num_attention_heads * self.head_dim,
            Attention::Mla(m) => {
                self.num_attention_heads * (m.qk_nope_head_dim + m.qk_rope_head_dim)
            }
        }
    }

    pub fn kv_dim(&self) -> u64 {
        self.num_kv_heads * self.head_dim
    }

    /// Attention projection parameters of one layer (biases included, norms excluded).
    pub fn attention_params_per_layer(&self) -> u64 {
        let h = self.hidden_size;
        match &self.attention {
            Attention::Gqa => {
                let q = self.q_dim();
                let kv = self.kv_dim();
                let bias = if self.attention_bias {
                    q + 2 * kv + h
                } else {
                    0
                };
                h * q + 2 * h * kv + q * h + bias
            }
            Attention::Mla(m) => {
                let heads = self.num_attention_heads;
                let q_head = m.qk_nope_head_dim + m.qk_rope_head_dim;
                let q = match m.q_lora_rank {
                    Some(r) => h * r + r * heads * q_head,
                    None => h * heads * q_head,
                };
                let kv_a = h * (m.kv_lora_rank + m.qk_rope_head_dim);
                let kv_b = m.kv_lora_rank * heads * (m.qk_nope_head_dim + m.v_head_dim);
                let o = heads * m.v_head_dim * h;
                q + kv_a + kv_b + o
            }
        }
    }

    /// Gate+up+down of a dense MLP layer.
    pub fn dense_mlp_params(&self) -> u64 {
        3 * self.hidden_size * self.intermediate_size
    }

    /// One routed expert (gate+up+down, biases for gpt-oss).
    pub fn expert_params(&self) -> u64 {
        self.moe.map_or(0, |m| {
            let bias = if m.expert_bias {
                2 * m.expert_intermediate_size + self.hidden_size
            } else {
                0
            };
            3 * self.hidden_size * m.expert_intermediate_size + bias
        })
    }

    /// Shared experts + router of one MoE layer (always read, dense).
    pub fn moe_dense_params_per_layer(&self) -> u64 {
        self.moe.map_or(0, |m| {
            let shared =
                m.num_shared_experts * 3 * self.hidden_size * m.shared_expert_intermediate_size;
            let router =
                self.hidden_size * m.num_experts + if m.expert_bias { m.num_experts } else { 0 };
            shared + router
        })
    }

    pub fn embedding_params(&self) -> u64 {
        self.vocab_size * self.hidden_size
    }

    /// LM head parameters (vLLM still runs the head GEMM when embeddings are tied).
    pub fn lm_head_params(&self) -> u64 {
        self.vocab_size * self.hidden_size
    }

    /// Parameters stored in the checkpoint (MTP layers excluded), embeddings included once if tied.
    pub fn params_total(&self) -> u64 {
        let mut total = self.embedding_params();
        if !self.tie_word_embeddings {
            total += self.lm_head_params();
        }
        for l in 0..self.num_layers {
            total += self.attention_params_per_layer();
            if self.is_moe_layer(l) {
                let m = self.moe.expect("moe layer implies moe spec");
                total += m.num_experts * self.expert_params() + self.moe_dense_params_per_layer();
            } else {
                total += self.dense_mlp_params();
            }
        }
        total
    }

    /// Parameters touched per token, input embedding included (the table's "with embed").
    pub fn params_active(&self) -> u64 {
        self.params_active_excluding_embedding() + self.embedding_params()
    }

    /// Parameters whose GEMMs run per token: every layer's active weights plus the LM head.
    pub fn params_active_excluding_embedding(&self) -> u64 {
        let mut total = self.lm_head_params();
        for l in 0..self.num_layers {
            total += self.attention_params_per_layer();
            if self.is_moe_layer(l) {
                let m = self.moe.expect("moe layer implies moe spec");
                total +=
                    m.experts_per_token * self.expert_params() + self.moe_dense_params_per_layer();
            } else {
                total += self.dense_mlp_params();
            }
        }
        total
    }
}

// ---------------------------------------------------------------------------------------------
// Catalog
// ---------------------------------------------------------------------------------------------

struct Entry {
    aliases: &'static [&'static str],
    build: fn() -> ModelSpec,
}

/// A catalog row: the config.json fields that differ between dense Llama-style models (the
/// rest are Llama's: GQA, head_dim 128, untied bf16 weights).
struct DenseRow<'a> {
    name: &'a str,
    model_type: &'a str,
    num_layers: u32,
    hidden_size: u64,
    num_attention_heads: u64,
    num_kv_heads: u64,
    intermediate_size: u64,
    vocab_size: u64,
    max_position_embeddings: u64,
}

impl DenseRow<'_> {
    fn spec(&self) -> ModelSpec {
        ModelSpec {
            name: self.name.to_string(),
            model_type: self.model_type.to_string(),
            num_layers: self.num_layers,
            hidden_size: self.hidden_size,
            num_attention_heads: self.num_attention_heads,
            num_kv_heads: self.num_kv_heads,
            head_dim: 128,
            intermediate_size: self.intermediate_size,
            vocab_size: self.vocab_size,
            max_position_embeddings: self.max_position_embeddings,
            tie_word_embeddings: false,
            attention_bias: false,
            attention: Attention::Gqa,
            moe: None,
            sliding_window: None,
            sliding_layers: Vec::new(),
            weight_format: WeightFormat::Bf16,
            expert_weight_format: WeightFormat::Bf16,
            num_mtp_layers: 0,
        }
    }
}

fn moe(experts: u64, top_k: u64, expert_inter: u64) -> Option<MoeSpec> {
    Some(MoeSpec {
        num_experts: experts,
        experts_per_token: top_k,
        expert_intermediate_size: expert_inter,
        num_shared_experts: 0,
        shared_expert_intermediate_size: 0,
        first_dense_layers: 0,
        expert_bias: false,
    })
}

fn gpt_oss(name: &str, layers: u32, experts: u64) -> ModelSpec {
    let mut m = DenseRow {
        name,
        model_type: "gpt_oss",
        num_layers: layers,
        hidden_size: 2880,
        num_attention_heads: 64,
        num_kv_heads: 8,
        intermediate_size: 2880,
        vocab_size: 201_088,
        max_position_embeddings: 131_072,
    }
    .spec();
    m.head_dim = 64;
    m.attention_bias = true;
    m.moe = Some(MoeSpec {
        expert_bias: true,
        ..moe(experts, 4, 2880).expect("some")
    });
    m.sliding_window = Some(128);
    // layer_types alternate sliding / full, starting with sliding.
    m.sliding_layers = (0..layers).map(|l| l % 2 == 0).collect();
    m.expert_weight_format = WeightFormat::Mxfp4;
    m
}

static CATALOG: &[Entry] = &[
    Entry {
        aliases: &[
            "meta-llama/Llama-3.1-8B-Instruct",
            "meta-llama/Llama-3.1-8B",
            "meta-llama/Meta-Llama-3.1-8B-Instruct",
            "meta-llama/Meta-Llama-3.1-8B",
            "llama-3.1-8b",
            "llama3.1-8b",
            "llama-8b",
        ],
        build: || {
            DenseRow {
                name: "meta-llama/Llama-3.1-8B-Instruct",
                model_type: "llama",
                num_layers: 32,
                hidden_size: 4096,
                num_attention_heads: 32,
                num_kv_heads: 8,
                intermediate_size: 14336,
                vocab_size: 128_256,
                max_position_embeddings: 131_072,
            }
            .spec()
        },
    },
    Entry {
        aliases: &[
            "meta-llama/Llama-3.1-70B-Instruct",
            "meta-llama/Llama-3.1-70B",
            "meta-llama/Meta-Llama-3.1-70B-Instruct",
            "meta-llama/Llama-3.3-70B-Instruct",
            "llama-3.1-70b",
            "llama3.1-70b",
            "llama-3.3-70b",
            "llama-70b",
        ],
        build: || {
            DenseRow {
                name: "meta-llama/Llama-3.1-70B-Instruct",
                model_type: "llama",
                num_layers: 80,
                hidden_size: 8192,
                num_attention_heads: 64,
                num_kv_heads: 8,
                intermediate_size: 28672,
                vocab_size: 128_256,
                max_position_embeddings: 131_072,
            }
            .spec()
        },
    },
    Entry {
        // The vLLM docs' FP8 KV-cache table (L4) measures this one; its embeddings are tied.
        aliases: &["Qwen/Qwen3-4B", "qwen3-4b"],
        build: || ModelSpec {
            tie_word_embeddings: true,
            ..DenseRow {
                name: "Qwen/Qwen3-4B",
                model_type: "qwen3",
                num_layers: 36,
                hidden_size: 2560,
                num_attention_heads: 32,
                num_kv_heads: 8,
                intermediate_size: 9728,
                vocab_size: 151_936,
                max_position_embeddings: 40_960,
            }
            .spec()
        },
    },
    Entry {
        aliases: &["Qwen/Qwen3-8B", "qwen3-8b"],
        build: || {
            DenseRow {
                name: "Qwen/Qwen3-8B",
                model_type: "qwen3",
                num_layers: 36,
                hidden_size: 4096,
                num_attention_heads: 32,
                num_kv_heads: 8,
                intermediate_size: 12288,
                vocab_size: 151_936,
                max_position_embeddings: 40_960,
            }
            .spec()
        },
    },
    Entry {
        aliases: &["Qwen/Qwen3-14B", "qwen3-14b"],
        build: || {
            DenseRow {
                name: "Qwen/Qwen3-14B",
                model_type: "qwen3",
                num_layers: 40,
                hidden_size: 5120,
                num_attention_heads: 40,
                num_kv_heads: 8,
                intermediate_size: 17408,
                vocab_size: 151_936,
                max_position_embeddings: 40_960,
            }
            .spec()
        },
    },
    Entry {
        aliases: &["Qwen/Qwen3-32B", "qwen3-32b"],
        build: || {
            DenseRow {
                name: "Qwen/Qwen3-32B",
                model_type: "qwen3",
                num_layers: 64,
                hidden_size: 5120,
                num_attention_heads: 64,
                num_kv_heads: 8,
                intermediate_size: 25600,
                vocab_size: 151_936,
                max_position_embeddings: 40_960,
            }
            .spec()
        },
    },
    Entry {
        aliases: &["Qwen/Qwen3-30B-A3B", "qwen3-30b-a3b", "qwen3-30b"],
        build: || {
            let mut m = DenseRow {
                name: "Qwen/Qwen3-30B-A3B",
                model_type: "qwen3_moe",
                num_layers: 48,
                hidden_size: 2048,
                num_attention_heads: 32,
                num_kv_heads: 4,
                intermediate_size: 6144,
                vocab_size: 151_936,
                max_position_embeddings: 40_960,
            }
            .spec();
            m.moe = moe(128, 8, 768);
            m
        },
    },
    Entry {
        aliases: &["Qwen/Qwen3-235B-A22B", "qwen3-235b-a22b", "qwen3-235b"],
        build: || {
            let mut m = DenseRow {
                name: "Qwen/Qwen3-235B-A22B",
                model_type: "qwen3_moe",
                num_layers: 94,
                hidden_size: 4096,
                num_attention_heads: 64,
                num_kv_heads: 4,
                intermediate_size: 12288,
                vocab_size: 151_936,
                max_position_embeddings: 40_960,
            }
            .spec();
            m.moe = moe(128, 8, 1536);
            m
        },
    },
    Entry {
        aliases: &[
            "mistralai/Mistral-7B-Instruct-v0.3",
            "mistralai/Mistral-7B-v0.3",
            "mistral-7b",
            "mistral-7b-v0.3",
        ],
        build: || {
            DenseRow {
                name: "mistralai/Mistral-7B-Instruct-v0.3",
                model_type: "mistral",
                num_layers: 32,
                hidden_size: 4096,
                num_attention_heads: 32,
                num_kv_heads: 8,
                intermediate_size: 14336,
                vocab_size: 32_768,
                max_position_embeddings: 32_768,
            }
            .spec()
        },
    },
    Entry {
        aliases: &[
            "mistralai/Mistral-7B-v0.1",
            "mistralai/Mistral-7B-Instruct-v0.1",
            "mistral-7b-v0.1",
        ],
        build: || {
            let mut m = DenseRow {
                name: "mistralai/Mistral-7B-v0.1",
                model_type: "mistral",
                num_layers: 32,
                hidden_size: 4096,
                num_attention_heads: 32,
                num_kv_heads: 8,
                intermediate_size: 14336,
                vocab_size: 32_000,
                max_position_embeddings: 32_768,
            }
            .spec();
            m.sliding_window = Some(4096);
            m.sliding_layers = vec![true; 32];
            m
        },
    },
    Entry {
        aliases: &[
            "mistralai/Mixtral-8x7B-Instruct-v0.1",
            "mistralai/Mixtral-8x7B-v0.1",
            "mixtral-8x7b",
            "mixtral",
        ],
        build: || {
            let mut m = DenseRow {
                name: "mistralai/Mixtral-8x7B-Instruct-v0.1",
                model_type: "mixtral",
                num_layers: 32,
                hidden_size: 4096,
                num_attention_heads: 32,
                num_kv_heads: 8,
                intermediate_size: 14336,
                vocab_size: 32_000,
                max_position_embeddings: 32_768,
            }
            .spec();
            m.moe = moe(8, 2, 14336);
            m
        },
    },
    Entry {
        aliases: &[
            "deepseek-ai/DeepSeek-V3",
            "deepseek-ai/DeepSeek-V3-0324",
            "deepseek-ai/DeepSeek-R1",
            "deepseek-v3",
            "deepseek-r1",
        ],
        build: || {
            let mut m = DenseRow {
                name: "deepseek-ai/DeepSeek-V3",
                model_type: "deepseek_v3",
                num_layers: 61,
                hidden_size: 7168,
                num_attention_heads: 128,
                num_kv_heads: 128,
                intermediate_size: 18432,
                vocab_size: 129_280,
                max_position_embeddings: 163_840,
            }
            .spec();
            m.head_dim = 192;
            m.attention = Attention::Mla(MlaSpec {
                kv_lora_rank: 512,
                qk_rope_head_dim: 64,
                qk_nope_head_dim: 128,
                v_head_dim: 128,
                q_lora_rank: Some(1536),
            });
            m.moe = Some(MoeSpec {
                num_shared_experts: 1,
                shared_expert_intermediate_size: 2048,
                first_dense_layers: 3,
                ..moe(256, 8, 2048).expect("some")
            });
            m.weight_format = WeightFormat::Fp8;
            m.expert_weight_format = WeightFormat::Fp8;
            m.num_mtp_layers = 1;
            m
        },
    },
    Entry {
        aliases: &["openai/gpt-oss-20b", "gpt-oss-20b", "gptoss-20b"],
        build: || gpt_oss("openai/gpt-oss-20b", 24, 32),
    },
    Entry {
        aliases: &["openai/gpt-oss-120b", "gpt-oss-120b", "gptoss-120b"],
        build: || gpt_oss("openai/gpt-oss-120b", 36, 128),
    },
];

fn normalise(name: &str) -> String {
    name.trim()
        .to_ascii_lowercase()
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect()
}

/// Primary HF ids of the catalog, in order.
pub fn catalog_names() -> Vec<&'static str> {
    CATALOG.iter().map(|e| e.aliases[0]).collect()
}

/// Every catalog model, built.
pub fn catalog() -> Vec<ModelSpec> {
    CATALOG.iter().map(|e| (e.build)()).collect()
}

/// Look a model up by HF id (`meta-llama/Llama-3.1-8B-Instruct`), id without org
/// (`Llama-3.1-8B`) or short name (`llama-3.1-8b`, `qwen3-30b-a3b`, `gpt-oss-20b`), case- and
/// punctuation-insensitive.
pub fn lookup(name: &str) -> Result<ModelSpec, CostError> {
    let full = normalise(name);
    let tail = normalise(name.rsplit('/').next().unwrap_or(name));
    for e in CATALOG {
        for a in e.aliases {
            let an = normalise(a);
            let at = normalise(a.rsplit('/').next().unwrap_or(a));
            if an == full || at == tail {
                return Ok((e.build)());
            }
        }
    }
    Err(CostError::UnknownModel {
        name: name.to_string(),
        valid: catalog_names(),
    })
}

// ---------------------------------------------------------------------------------------------
// Hugging Face config.json
// ---------------------------------------------------------------------------------------------

/// The largest value the twin reads for a config.json integer (docs/limits.md). Each is far
/// past any published model, and together they keep every parameter, byte and FLOP count the
/// cost model multiplies out (layers × experts × hidden × intermediate × bytes, max length ×
/// KV bytes per token) inside 64 bits.
fn config_field_limit(field: &str) -> u64 {
    match field {
        "num_hidden_layers" | "first_k_dense_replace" | "num_nextn_predict_layers" => 1 << 10,
        "num_local_experts" | "n_routed_experts" | "num_experts" | "n_shared_experts" => 1 << 10,
        "num_experts_per_tok" | "experts_per_token" | "num_experts_per_token" => 1 << 10,
        "num_attention_heads" | "num_key_value_heads" | "head_dim" => 1 << 12,
        "hidden_size" => 1 << 17,
        "vocab_size" => 1 << 22,
        "max_position_embeddings" | "sliding_window" => 1 << 24,
        _ => 1 << 20,
    }
}

fn get_u64(cfg: &Value, field: &str) -> Result<Option<u64>, CostError> {
    let n = match cfg.get(field) {
        None | Some(Value::Null) => return Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) => n,
            None => match v.as_f64() {
                Some(f) if f >= 0.0 && f.fract() == 0.0 && f < 1.8e19 => f as u64,
                _ => {
                    return Err(CostError::invalid(
                        field,
                        format!("expected a non-negative integer, got {v}"),
                    ))
                }
            },
        },
    };
    let limit = config_field_limit(field);
    if n > limit {
        return Err(CostError::invalid(
            field,
            format!("{n} is beyond the twin's limit of {limit} for this field (docs/limits.md)"),
        ));
    }
    Ok(Some(n))
}

fn req_u64(cfg: &Value, field: &str) -> Result<u64, CostError> {
    get_u64(cfg, field)?.ok_or_else(|| CostError::MissingField {
        field: field.to_string(),
    })
}

fn first_u64(cfg: &Value, fields: &[&str]) -> Result<Option<u64>, CostError> {
    for f in fields {
        if let Some(v) = get_u64(cfg, f)? {
            return Ok(Some(v));
        }
    }
    Ok(None)
}

fn get_bool(cfg: &Value, field: &str) -> Result<Option<bool>, CostError> {
    match cfg.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(CostError::invalid(
            field,
            format!("expected a boolean, got {v}"),
        )),
    }
}

fn nonzero(field: &str, v: u64) -> Result<u64, CostError> {
    if v == 0 {
        Err(CostError::invalid(field, "must be greater than 0"))
    } else {
        Ok(v)
    }
}

fn quant_formats(cfg: &Value) -> Result<Option<(WeightFormat, WeightFormat)>, CostError> {
    let Some(q) = cfg.get("quantization_config") else {
        return Ok(None);
    };
    if q.is_null() {
        return Ok(None);
    }
    let method = q
        .get("quant_method")
        .and_then(Value::as_str)
        .ok_or_else(|| CostError::MissingField {
            field: "quantization_config.quant_method".into(),
        })?
        .to_ascii_lowercase();
    let f = match method.as_str() {
        "mxfp4" => return Ok(Some((WeightFormat::Bf16, WeightFormat::Mxfp4))),
        "fp8" | "fbgemm_fp8" => WeightFormat::Fp8,
        "awq" => WeightFormat::Awq,
        "gptq" => WeightFormat::Gptq,
        "modelopt" | "modelopt_fp4" => {
            let algo = q.get("quant_algo").and_then(Value::as_str).unwrap_or("FP8").to_ascii_uppercase();
            if algo.contains("FP4") {
                WeightFormat::Nvfp4
            } else {
                WeightFormat::Fp8
            }
        }
        "compressed-tensors" | "compressed_tensors" => {
            if q.to_string().contains("\"num_bits\":4") {
                WeightFormat::Gptq
            } else {
                WeightFormat::Fp8
            }
        }
        other => {
            return Err(CostError::invalid(
                "quantization_config.quant_method",
                format!("unsupported `{other}`; supported: fp8, awq, gptq, modelopt (fp8/nvfp4), mxfp4, compressed-tensors"),
            ))
        }
    };
    Ok(Some((f, f)))
}

/// Parse a Hugging Face `config.json` (text) into a [`ModelSpec`]. Multimodal configs are read
/// through their `text_config`. Missing required fields produce [`CostError::MissingField`]
/// naming the field.
pub fn from_hf_config_json(json: &str) -> Result<ModelSpec, CostError> {
    let root: Value = serde_json::from_str(json).map_err(|e| CostError::Json {
        context: "config.json",
        reason: e.to_string(),
    })?;
    if !root.is_object() {
        return Err(CostError::Json {
            context: "config.json",
            reason: "top level is not an object".into(),
        });
    }
    let cfg = match root.get("text_config") {
        Some(t) if t.is_object() => t,
        _ => &root,
    };
    let name = root
        .get("_name_or_path")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .or_else(|| {
            root.get("architectures")
                .and_then(|a| a.get(0))
                .and_then(Value::as_str)
        })
        .unwrap_or("custom-model")
        .to_string();
    let model_type = cfg
        .get("model_type")
        .and_then(Value::as_str)
        .unwrap_or("unknown")
        .to_string();

    let layers_u64 = nonzero("num_hidden_layers", req_u64(cfg, "num_hidden_layers")?)?;
    let num_layers = u32::try_from(layers_u64)
        .map_err(|_| CostError::invalid("num_hidden_layers", "too large"))?;
    let hidden = nonzero("hidden_size", req_u64(cfg, "hidden_size")?)?;
    let heads = nonzero("num_attention_heads", req_u64(cfg, "num_attention_heads")?)?;
    let kv_heads = nonzero(
        "num_key_value_heads",
        get_u64(cfg, "num_key_value_heads")?.unwrap_or(heads),
    )?;
    let vocab = nonzero("vocab_size", req_u64(cfg, "vocab_size")?)?;
    let max_pos = nonzero(
        "max_position_embeddings",
        req_u64(cfg, "max_position_embeddings")?,
    )?;
    let tie = get_bool(cfg, "tie_word_embeddings")?
        .or(get_bool(&root, "tie_word_embeddings")?)
        .unwrap_or(false);
    let attention_bias =
        get_bool(cfg, "attention_bias")?.unwrap_or(false) || model_type.starts_with("qwen2");

    let attention = match get_u64(cfg, "kv_lora_rank")? {
        Some(kv_lora) => Attention::Mla(MlaSpec {
            kv_lora_rank: kv_lora,
            qk_rope_head_dim: req_u64(cfg, "qk_rope_head_dim")?,
            qk_nope_head_dim: req_u64(cfg, "qk_nope_head_dim")?,
            v_head_dim: req_u64(cfg, "v_head_dim")?,
            q_lora_rank: get_u64(cfg, "q_lora_rank")?,
        }),
        None => Attention::Gqa,
    };
    let head_dim = match &attention {
        Attention::Mla(m) => m.qk_nope_head_dim + m.qk_rope_head_dim,
        Attention::Gqa => match get_u64(cfg, "head_dim")? {
            Some(d) => nonzero("head_dim", d)?,
            None => {
                if hidden % heads != 0 {
                    return Err(CostError::invalid(
                        "head_dim",
                        "absent and hidden_size is not divisible by num_attention_heads",
                    ));
                }
                hidden / heads
            }
        },
    };

    let num_experts = first_u64(
        cfg,
        &["num_local_experts", "n_routed_experts", "num_experts"],
    )?
    .filter(|e| *e > 1);
    let intermediate = match get_u64(cfg, "intermediate_size")? {
        Some(i) => i,
        None if num_experts.is_some() => 0,
        None => {
            return Err(CostError::MissingField {
                field: "intermediate_size".into(),
            })
        }
    };
    let moe = match num_experts {
        None => None,
        Some(e) => {
            let top_k = first_u64(
                cfg,
                &[
                    "num_experts_per_tok",
                    "experts_per_token",
                    "num_experts_per_token",
                ],
            )?
            .ok_or_else(|| CostError::MissingField {
                field: "num_experts_per_tok".into(),
            })?;
            if top_k == 0 || top_k > e {
                return Err(CostError::invalid(
                    "num_experts_per_tok",
                    format!("must be in 1..={e}, got {top_k}"),
                ));
            }
            let expert_inter = match get_u64(cfg, "moe_intermediate_size")? {
                Some(v) => v,
                None if intermediate > 0 => intermediate,
                None => {
                    return Err(CostError::MissingField {
                        field: "moe_intermediate_size".into(),
                    })
                }
            };
            let shared = get_u64(cfg, "n_shared_experts")?.unwrap_or(0);
            let shared_inter =
                get_u64(cfg, "shared_expert_intermediate_size")?.unwrap_or(expert_inter);
            let shared =
                if get_u64(cfg, "shared_expert_intermediate_size")?.is_some() && shared == 0 {
                    1
                } else {
                    shared
                };
            let first_dense = get_u64(cfg, "first_k_dense_replace")?
                .unwrap_or(0)
                .min(layers_u64) as u32;
            Some(MoeSpec {
                num_experts: e,
                experts_per_token: top_k,
                expert_intermediate_size: expert_inter,
                num_shared_experts: shared,
                shared_expert_intermediate_size: shared_inter,
                first_dense_layers: first_dense,
                expert_bias: model_type == "gpt_oss",
            })
        }
    };
    if moe.is_some_and(|m| m.first_dense_layers > 0) && intermediate == 0 {
        return Err(CostError::MissingField {
            field: "intermediate_size".into(),
        });
    }

    // Sliding window: explicit per-layer `layer_types`, else all layers when `sliding_window`
    // is set and not disabled by `use_sliding_window: false` (Qwen2/3).
    let use_sw = get_bool(cfg, "use_sliding_window")?.unwrap_or(true);
    let window = if use_sw {
        get_u64(cfg, "sliding_window")?.filter(|w| *w > 0)
    } else {
        None
    };
    let mut sliding_layers = Vec::new();
    if let Some(Value::Array(types)) = cfg.get("layer_types") {
        if types.len() != num_layers as usize {
            return Err(CostError::invalid(
                "layer_types",
                format!("has {} entries for {num_layers} layers", types.len()),
            ));
        }
        for t in types {
            let s = t
                .as_str()
                .ok_or_else(|| CostError::invalid("layer_types", "entries must be strings"))?;
            sliding_layers.push(s.contains("sliding"));
        }
        if sliding_layers.iter().any(|s| *s) && window.is_none() {
            return Err(CostError::MissingField {
                field: "sliding_window".into(),
            });
        }
    } else if window.is_some() && window < Some(max_pos) {
        sliding_layers = vec![true; num_layers as usize];
    }
    let sliding_window = if sliding_layers.iter().any(|s| *s) {
        window
    } else {
        None
    };
    if sliding_window.is_none() {
        sliding_layers.clear();
    }

    let (weight_format, expert_weight_format) = match quant_formats(&root)? {
        Some(f) => f,
        None => {
            let dtype = cfg
                .get("torch_dtype")
                .or(cfg.get("dtype"))
                .and_then(Value::as_str)
                .unwrap_or("bfloat16");
            let f = match dtype {
                "float16" => WeightFormat::Fp16,
                "float32" => WeightFormat::Fp32,
                _ => WeightFormat::Bf16,
            };
            (f, f)
        }
    };

    Ok(ModelSpec {
        name,
        model_type,
        num_layers,
        hidden_size: hidden,
        num_attention_heads: heads,
        num_kv_heads: kv_heads,
        head_dim,
        intermediate_size: intermediate,
        vocab_size: vocab,
        max_position_embeddings: max_pos,
        tie_word_embeddings: tie,
        attention_bias,
        attention,
        moe,
        sliding_window,
        sliding_layers,
        weight_format,
        expert_weight_format,
        num_mtp_layers: get_u64(cfg, "num_nextn_predict_layers")?.unwrap_or(0) as u32,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(x: u64) -> f64 {
        x as f64 / 1e9
    }

    #[test]
    fn param_counts_match_reference_table() {
        // hardware-and-models.md §2.1 derived parameter table (billions, ±0.01).
        let cases = [
            ("llama-3.1-8b", 8.03, 8.03),
            ("llama-3.1-70b", 70.55, 70.55),
            // Tied embeddings: stored once, but the head GEMM still reads them per token.
            ("qwen3-4b", 4.02, 4.41),
            ("qwen3-8b", 8.19, 8.19),
            ("qwen3-14b", 14.77, 14.77),
            ("qwen3-32b", 32.76, 32.76),
            ("mistral-7b-v0.1", 7.24, 7.24),
            ("qwen3-30b-a3b", 30.53, 3.35),
            ("qwen3-235b-a22b", 235.09, 22.19),
            ("mixtral-8x7b", 46.70, 12.88),
            ("gpt-oss-20b", 20.91, 4.19),
            ("gpt-oss-120b", 116.83, 5.71),
            ("deepseek-v3", 671.0, 37.55),
        ];
        for (n, total, active) in cases {
            let m = lookup(n).unwrap();
            assert!(
                (b(m.params_total()) - total).abs() < 0.02 * total.max(1.0) / 10.0 + 0.011,
                "{n} total {}",
                b(m.params_total())
            );
            assert!(
                (b(m.params_active()) - active).abs() < 0.011 + active * 0.002,
                "{n} active {}",
                b(m.params_active())
            );
        }
        let oss = lookup("gpt-oss-20b").unwrap();
        assert!((b(oss.params_active_excluding_embedding()) - 3.61).abs() < 0.011);
    }

    #[test]
    fn lookup_is_forgiving_and_errors_list_names() {
        assert_eq!(lookup("meta-llama/Llama-3.1-8B").unwrap().num_layers, 32);
        assert_eq!(lookup("Llama-3.1-8B-Instruct").unwrap().num_layers, 32);
        assert_eq!(lookup("LLAMA_3.1_70B").unwrap().num_layers, 80);
        assert_eq!(lookup("openai/gpt-oss-120b").unwrap().num_layers, 36);
        let e = lookup("llama-9b").unwrap_err().to_string();
        assert!(e.contains("llama-9b") && e.contains("Qwen/Qwen3-8B"), "{e}");
    }

    #[test]
    fn gpt_oss_layer_pattern() {
        let m = lookup("gpt-oss-20b").unwrap();
        assert!(m.is_sliding(0) && !m.is_sliding(1));
        assert_eq!(m.num_full_layers(), 12);
        assert_eq!(m.num_sliding_layers(), 12);
    }

    const LLAMA_CFG: &str = r#"{
      "architectures": ["LlamaForCausalLM"], "model_type": "llama",
      "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
      "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256,
      "max_position_embeddings": 131072, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
      "rope_scaling": {"factor": 8.0, "rope_type": "llama3"}
    }"#;

    #[test]
    fn parses_llama_config_like_catalog() {
        let parsed = from_hf_config_json(LLAMA_CFG).unwrap();
        let cat = lookup("llama-3.1-8b").unwrap();
        assert_eq!(parsed.params_total(), cat.params_total());
        assert_eq!(parsed.head_dim, 128);
        assert!(parsed.sliding_layers.is_empty());
    }

    #[test]
    fn parses_gpt_oss_and_deepseek_shapes() {
        let oss = r#"{"model_type":"gpt_oss","num_hidden_layers":4,"hidden_size":2880,
          "num_attention_heads":64,"num_key_value_heads":8,"head_dim":64,"intermediate_size":2880,
          "num_local_experts":32,"experts_per_token":4,"vocab_size":201088,
          "max_position_embeddings":131072,"sliding_window":128,"attention_bias":true,
          "layer_types":["sliding_attention","full_attention","sliding_attention","full_attention"],
          "quantization_config":{"quant_method":"mxfp4"}}"#;
        let m = from_hf_config_json(oss).unwrap();
        assert_eq!(m.sliding_window, Some(128));
        assert_eq!(m.num_sliding_layers(), 2);
        assert_eq!(m.expert_weight_format, WeightFormat::Mxfp4);
        assert_eq!(m.moe.unwrap().experts_per_token, 4);

        let ds = r#"{"model_type":"deepseek_v3","num_hidden_layers":61,"hidden_size":7168,
          "num_attention_heads":128,"num_key_value_heads":128,"intermediate_size":18432,
          "moe_intermediate_size":2048,"n_routed_experts":256,"n_shared_experts":1,
          "num_experts_per_tok":8,"first_k_dense_replace":3,"kv_lora_rank":512,"q_lora_rank":1536,
          "qk_rope_head_dim":64,"qk_nope_head_dim":128,"v_head_dim":128,"vocab_size":129280,
          "max_position_embeddings":163840,"num_nextn_predict_layers":1,
          "quantization_config":{"quant_method":"fp8","weight_block_size":[128,128]}}"#;
        let m = from_hf_config_json(ds).unwrap();
        assert_eq!(
            m.params_total(),
            lookup("deepseek-v3").unwrap().params_total()
        );
        assert_eq!(m.mla().unwrap().latent_dim(), 576);
    }

    #[test]
    fn missing_and_bad_fields_are_named() {
        let e = from_hf_config_json(r#"{"hidden_size": 4096}"#).unwrap_err();
        assert_eq!(
            e,
            CostError::MissingField {
                field: "num_hidden_layers".into()
            }
        );
        let bad = LLAMA_CFG.replace("\"hidden_size\": 4096", "\"hidden_size\": \"big\"");
        let e = from_hf_config_json(&bad).unwrap_err().to_string();
        assert!(e.contains("hidden_size"), "{e}");
        let zero = LLAMA_CFG.replace("\"num_hidden_layers\": 32", "\"num_hidden_layers\": 0");
        assert!(from_hf_config_json(&zero)
            .unwrap_err()
            .to_string()
            .contains("num_hidden_layers"));
        assert!(matches!(
            from_hf_config_json("[1,2"),
            Err(CostError::Json { .. })
        ));
        let no_vocab = LLAMA_CFG.replace("\"vocab_size\": 128256,", "");
        assert_eq!(
            from_hf_config_json(&no_vocab).unwrap_err(),
            CostError::MissingField {
                field: "vocab_size".into()
            }
        );
    }
}
