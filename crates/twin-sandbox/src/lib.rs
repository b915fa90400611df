//! twin-sandbox: `vllm-twin sandbox`, the seed article's interactive parameter→metric
//! simulator as a local web page. One binary serves the page and its assets (embedded,
//! no network); each change of a control assembles a `vllm serve` argv, runs vLLM's
//! start-up through `twin_sim` (the memory plan, or vLLM's refusal), then simulates
//! minutes of traffic in virtual time on a blocking thread and streams one point per
//! virtual second to the page over server-sent events, with the seed's alert banners and
//! playbook findings evaluated live. Modules: [`controls`] (what the page sends, checked,
//! and the equivalent command lines), [`runs`] (the bridge to the simulator), [`series`]
//! (the observer that buckets the run), [`findings`] (the seed's rules and the doctor
//! hook), [`presets`], [`server`] (axum routes, SSE, cancellation), [`assets`] (the
//! embedded page) and [`cli`].

pub mod assets;
pub mod cli;
pub mod controls;
pub mod findings;
pub mod presets;
pub mod runs;
pub mod series;
pub mod server;
