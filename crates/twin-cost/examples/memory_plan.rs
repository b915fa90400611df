//! Prints the startup memory plan: `memory_plan <model> <gpu> [tp] [kv_cache_dtype] [max_model_len]`.
use twin_cost::{gpu, model, plan_memory, KvCacheDtype, MaxModelLen, ServeConfig};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let get = |i: usize, d: &str| args.get(i).cloned().unwrap_or_else(|| d.to_string());
    let run = || -> Result<(), twin_cost::CostError> {
        let m = model::lookup(&get(1, "llama-3.1-8b"))?;
        let g = gpu::lookup(&get(2, "h100"))?;
        let cfg = ServeConfig {
            tensor_parallel_size: get(3, "1").parse().unwrap_or(1),
            kv_cache_dtype: KvCacheDtype::parse(&get(4, "auto"))?,
            max_model_len: match args.get(5) {
                Some(s) if s == "-1" => MaxModelLen::Auto,
                Some(s) => MaxModelLen::Tokens(s.parse().unwrap_or(1)),
                None => MaxModelLen::Derived,
            },
            ..ServeConfig::default()
        };
        println!("{}", plan_memory(&m, g, &cfg)?);
        Ok(())
    };
    if let Err(e) = run() {
        println!("error: {}", e.vllm_message());
    }
}
