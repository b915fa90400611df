//! Presets: the defaults plus the seed article's four playbook scenarios, each a set of
//! controls that makes the twin show the scenario (checked by the tests: the doctor, watching
//! each preset's run, names the preset's playbook branch).

use serde::Serialize;

use crate::controls::{Controls, Traffic};

#[derive(Clone, Debug, Serialize)]
pub struct Preset {
    pub id: &'static str,
    pub name: &'static str,
    pub description: &'static str,
    /// The seed playbook's scenario (`1` … `4`; empty for the healthy default).
    pub scenario: &'static str,
    /// The doctor's branch id the run must raise (the banner the page shows; docs/doctor.md).
    pub expect: &'static str,
    pub controls: Controls,
}

pub fn presets() -> Vec<Preset> {
    let d = Controls::default;
    vec![
        Preset {
            id: "default",
            name: "Healthy chat",
            description: "Llama-3.1-8B on one H100 at vLLM defaults, chat-like traffic well \
                          below capacity: no alerts.",
            scenario: "",
            expect: "",
            controls: d(),
        },
        Preset {
            id: "ttft-queueing",
            name: "1 · TTFT high, ITL normal (queueing)",
            description: "--max-num-seqs 16 pins num_requests_running at 16 while KV sits low: \
                          requests queue at the door (pseudo-saturation, playbook 1 branch A).",
            scenario: "1",
            expect: "ttft-queue-pseudo-saturation",
            controls: Controls {
                max_num_seqs: 16,
                rate: 8.0,
                ..d()
            },
        },
        Preset {
            id: "itl-interference",
            name: "2 · ITL P99 high (prefill interference)",
            description: "Mostly short chats plus long documents, with a 16k step budget: a \
                          long prefill lands in a decode step and stalls every stream \
                          (playbook 2 branch A).",
            scenario: "2",
            expect: "itl-prefill-interference",
            controls: Controls {
                rate: 3.0,
                prompt_mean: 3000,
                prompt_spread: 1.4,
                output_mean: 300,
                output_spread: 0.5,
                max_num_batched_tokens: 16384,
                ..d()
            },
        },
        Preset {
            id: "kv-preemption",
            name: "3 · Preemptions (KV overrun)",
            description: "Long generations on a small KV pool (--gpu-memory-utilization 0.5): \
                          running requests grow until the pool is exhausted and vLLM evicts \
                          them (playbook 3).",
            scenario: "3",
            expect: "kv-preemption",
            controls: Controls {
                traffic: Traffic::Concurrency,
                concurrency: 256,
                prompt_mean: 1500,
                output_mean: 2000,
                output_spread: 0.3,
                gpu_memory_utilization: 0.5,
                prefix_share: 0.0,
                ..d()
            },
        },
        Preset {
            id: "autoscaling",
            name: "4 · Autoscaling signal",
            description: "Traffic at one replica's limit (96 sequences, a 0.45 memory share): KV \
                          > 0.65 and more than 3 waiting for 15 s, the seed's HPA trigger \
                          (playbook 4), before any preemption.",
            scenario: "4",
            expect: "autoscale-signal",
            controls: Controls {
                rate: 20.0,
                output_mean: 300,
                max_num_seqs: 96,
                gpu_memory_utilization: 0.45,
                ..d()
            },
        },
        Preset {
            id: "fleet-sessions",
            name: "Fleet · round-robin vs sessions",
            description: "Four replicas behind a round-robin load balancer serving 5-turn \
                          conversations: each turn lands on another replica and misses the \
                          prefix cache its previous turn filled. Switch the router to \
                          session-affinity (or prefix-aware) and TTFT falls: the seed's \
                          load-balancer advice.",
            scenario: "",
            expect: "",
            controls: Controls {
                rate: 4.0,
                turns: 5,
                think_time_s: 3.0,
                replicas: 4,
                router: "round-robin".into(),
                ..d()
            },
        },
    ]
}

pub fn find(id: &str) -> Option<Preset> {
    presets().into_iter().find(|p| p.id == id)
}
