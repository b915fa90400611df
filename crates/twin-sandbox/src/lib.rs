//! twin-sandbox: `vllm-twin sandbox`, the seed article's interactive parameter→metric
//! simulator as a local web page. One binary serves the page and its assets (embedded,
//! no network); each change of a control assembles a `vllm serve` argv, runs vLLM's
//! start-up through `twin_sim` (the memory plan, or vLLM's refusal), then simulates
//! minutes of traffic in virtual time on a blocking thread and streams one point per
//! virtual second to the page over server-sent events, with the seed's alert banners and
//! twin-doctor's findings (bottleneck, playbook branch, recommendations) for the run's
//! trailing window, live (the doctor works on a second thread, one 15 s scrape behind the
//! simulation, deterministically). Modules: [`controls`] (what the page sends, checked,
//! and the equivalent command lines), [`runs`] (the bridge to the simulator), [`series`] (the
//! observer that buckets the run and feeds the twin's metrics recorder), [`findings`] (the
//! seed's alerts and the live doctor), [`presets`], [`server`] (axum routes, SSE,
//! cancellation), [`assets`] (the embedded page) and [`cli`].

pub mod assets;
pub mod cli;
pub mod controls;
pub mod findings;
pub mod presets;
pub mod runs;
pub mod series;
pub mod server;
