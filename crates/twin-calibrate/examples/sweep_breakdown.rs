//! Where the twin's decode step goes for the InferenceMAX sweep configurations: one line per
//! GPU and TP at 1k/1k, concurrency `SWEEP_CONC` (default 4), with the step's breakdown, to
//! read the sweeps' ITL errors against (`--example sweep_rows` prints the errors). With
//! `SWEEP_PREFILL=N` one of the requests is a prefill of N prompt tokens instead (the step a
//! TTFT holds).
//! `cargo run --profile ci -p twin-calibrate --example sweep_breakdown`.

use twin_calibrate::sweeps;
use twin_cost::{BatchShape, CostModel};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let conc: u32 = std::env::var("SWEEP_CONC")
        .ok()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(4);
    let prefill_tokens: Option<u32> = std::env::var("SWEEP_PREFILL")
        .ok()
        .map(|s| s.parse())
        .transpose()?;
    println!("gpu tp conc | step ms | linear moe(experts) attn elementwise lm_head allreduce fixed host | ms");
    for (c, _, published) in sweeps::published()? {
        if c.isl != 1024 || c.osl != 1024 || c.concurrency != conc {
            continue;
        }
        let (config, startup) = sweeps::set_up(&c)?;
        let cost = CostModel::from_plan(&config.model, &config.gpu, &startup.plan)?;
        let mut batch = BatchShape::new();
        let decodes = match prefill_tokens {
            Some(n) => {
                batch.push_prefill(n, 0, true);
                conc - 1
            }
            None => conc,
        };
        for _ in 0..decodes {
            batch.push_decode(1024 + 512);
        }
        let s = cost.step_time_s(&batch);
        let b = s.breakdown;
        let ms = |x: f64| x * 1e3;
        println!(
            "{} {} {} | {:.2} (published ITL {:.2}) | {:.2} {:.2}({:.1}) {:.2} {:.2} {:.2} {:.2} {:.2} {:.2}",
            c.gpu,
            c.tp,
            conc,
            ms(s.step_time_s),
            published.itl_ms,
            ms(b.linear_s),
            ms(b.moe_s),
            b.moe_experts_touched,
            ms(b.attention_s),
            ms(b.elementwise_s),
            ms(b.lm_head_s),
            ms(b.tp_allreduce_s),
            ms(b.fixed_gpu_s),
            ms(b.host_exposed_s),
        );
    }
    Ok(())
}
