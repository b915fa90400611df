//! vLLM's API server as the simulator sees it: one asyncio thread per API-server process that
//! takes every engine step's outputs in turn (`AsyncLLM`'s output handler runs
//! `process_outputs`, then each stream's generator writes its SSE chunk). Its time per step
//! grows with the batch (`twin_cost::frontend::step_outputs_s`, ~50 µs a stream), so at a
//! thousand streams it can take longer than the engine's step: the engine core (another
//! process) does not wait and the outputs queue at the API server. `process_outputs` runs in
//! slices of 128 outputs with a yield between them, so each stream writes its chunk before its
//! next output arrives: only a step that fits one slice, reaching a backlogged server, is
//! merged into the pending chunks (vLLM's `RequestOutputCollector`); a bigger one pays every
//! chunk, and a server slower than the engine falls behind without bound.
//!
//! Prompts are tokenized before `add_request` on the renderer's worker threads
//! (`BaseRenderer._executor`, `--renderer-num-workers`, default 1), in arrival order, each by
//! the first worker free. transformers' tokenizer call releases the GIL while it encodes, so
//! tokenization runs beside the output handler instead of delaying it.

use twin_cost::frontend;

/// vLLM's `VLLM_V1_OUTPUT_PROC_CHUNK_SIZE` default: outputs processed between yields.
const OUTPUT_PROC_CHUNK_SIZE: usize = 128;

/// A step's outputs at the API server.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Delivery {
    /// When the API server began processing them: vLLM's `IterationStats` timestamp, which
    /// its /metrics TTFT and E2E end at.
    pub(crate) stamp_s: f64,
    /// When their clients have them (the client's TTFT and E2E end here).
    pub(crate) seen_s: f64,
}

/// One engine's share of the API-server processes.
#[derive(Clone, Debug)]
pub(crate) struct ApiServer {
    /// When it has finished everything handed to it so far.
    free_s: f64,
    /// API-server threads per engine: `--api-server-count` over the DP engines (vLLM defaults
    /// the count to `--data-parallel-size`, so 1).
    threads: f64,
    /// `--stream-interval`: a stream gets a chunk every this many tokens.
    stream_interval: usize,
    /// When each renderer worker has tokenized the prompts handed to it so far.
    renderer_free_s: Vec<f64>,
}

impl ApiServer {
    pub(crate) fn new(
        api_server_count: usize,
        data_parallel_size: usize,
        stream_interval: usize,
        renderer_num_workers: usize,
    ) -> Self {
        ApiServer {
            free_s: 0.0,
            threads: api_server_count.max(1) as f64 / data_parallel_size.max(1) as f64,
            stream_interval: stream_interval.max(1),
            renderer_free_s: vec![0.0; renderer_num_workers.max(1)],
        }
    }

    /// A `prompt_tokens`-token prompt reaches the renderer at `ready_s`; returns when it is
    /// tokenized. vLLM: `BaseRenderer._tokenize_prompt_async` on the renderer's executor, whose
    /// workers take prompts in the order they came (each API-server process has its own).
    pub(crate) fn tokenize(&mut self, ready_s: f64, prompt_tokens: usize) -> f64 {
        let worker = self
            .renderer_free_s
            .iter_mut()
            .min_by(|a, b| a.total_cmp(b))
            .expect("at least one renderer worker");
        let start_s = ready_s.max(*worker);
        *worker = start_s + frontend::tokenize_s(prompt_tokens) / self.threads;
        *worker
    }

    /// A step's `num_outputs` outputs reach the API server at `t_s`, the first outputs of
    /// requests with `first_prompt_tokens` prompt tokens among them. (vLLM's inter-token
    /// latency is the engine's: no delivery time enters it.)
    pub(crate) fn deliver(
        &mut self,
        t_s: f64,
        num_outputs: usize,
        first_prompt_tokens: usize,
    ) -> Delivery {
        if num_outputs == 0 {
            return Delivery {
                stamp_s: t_s,
                seen_s: t_s,
            };
        }
        // `AsyncLLM.output_handler` yields every `VLLM_V1_OUTPUT_PROC_CHUNK_SIZE` outputs.
        let merges = self.free_s > t_s && num_outputs <= OUTPUT_PROC_CHUNK_SIZE;
        // `OutputProcessor._new_request_output` with `stream_interval`: a chunk every n tokens.
        let chunks = if merges {
            0
        } else {
            num_outputs.div_ceil(self.stream_interval)
        };
        // `AsyncLLM.output_handler` stamps the step when it takes it off the engine's queue.
        let stamp_s = t_s.max(self.free_s);
        self.free_s = stamp_s
            + frontend::step_outputs_s(num_outputs, chunks, first_prompt_tokens) / self.threads;
        Delivery {
            stamp_s,
            seen_s: self.free_s,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_stream_takes_the_measured_60_us() {
        let mut a = ApiServer::new(1, 1, 1, 1);
        let seen = a.deliver(1.0, 1, 0).seen_s;
        assert!((seen - 1.0 - frontend::DETOKENIZE_S).abs() < 1e-15);
        assert!((frontend::DETOKENIZE_S - 60e-6).abs() < 1e-12);
    }

    #[test]
    fn a_thousand_streams_fall_behind_a_fast_engine() {
        let mut a = ApiServer::new(1, 1, 1, 1);
        // ~50 ms of API-server work per step against a 10 ms engine step.
        let first = a.deliver(0.0, 1000, 0).seen_s - 0.0;
        assert!((0.049..0.051).contains(&first), "{first}");
        let mut lag_s = Vec::new();
        for k in 1..40 {
            let t = k as f64 * 0.010;
            lag_s.push(a.deliver(t, 1000, 0).seen_s - t);
        }
        // Every step writes every chunk (more than one slice of outputs): the lag grows ~40 ms
        // a step.
        assert!(lag_s.windows(2).all(|w| w[1] > w[0]), "{lag_s:?}");
        assert!(lag_s[38] > 0.35, "{}", lag_s[38]);
        // A hundred streams behind a 1.5 ms step fit one slice: a backlogged step merges into
        // the pending chunks, and the lag stays within one step's chunks (~5 ms).
        let mut small = ApiServer::new(1, 1, 1, 1);
        let lags: Vec<f64> = (0..200)
            .map(|k| {
                let t = k as f64 * 0.0015;
                small.deliver(t, 100, 0).seen_s - t
            })
            .collect();
        assert!(lags.iter().all(|&l| l < 0.0052), "{lags:?}");
        assert!(lags[100..].iter().all(|&l| l <= lags[0] + 1e-9), "{lags:?}");
        // More API servers, or chunks every 8 tokens, cut the work.
        let mut four = ApiServer::new(4, 1, 1, 1);
        assert!(four.deliver(0.0, 1000, 0).seen_s < first / 3.9);
        let mut sparse = ApiServer::new(1, 1, 8, 1);
        assert!(sparse.deliver(0.0, 1000, 0).seen_s < first / 2.0);
    }

    #[test]
    fn outputs_beyond_what_one_thread_can_process_pile_up() {
        // 1000 streams at 6 µs each exceed a 5 ms engine step: nothing merges that away.
        let mut a = ApiServer::new(1, 1, 1, 1);
        let mut lag = 0.0;
        for k in 0..100 {
            let t = k as f64 * 0.005;
            lag = a.deliver(t, 1000, 0).seen_s - t;
        }
        assert!(lag > 0.05, "{lag}");
    }

    #[test]
    fn prompts_wait_for_the_renderer_in_arrival_order() {
        let mut a = ApiServer::new(1, 1, 1, 1);
        let one_s = frontend::tokenize_s(8192);
        // An 8k-token prompt alone takes its own tokenization.
        let first = a.tokenize(1.0, 8192);
        assert!((first - 1.0 - one_s).abs() < 1e-12, "{first}");
        // A burst: each waits for the ones ahead of it.
        let burst: Vec<f64> = (0..4).map(|_| a.tokenize(2.0, 8192)).collect();
        for (k, &done) in burst.iter().enumerate() {
            let want = 2.0 + (k + 1) as f64 * one_s;
            assert!((done - want).abs() < 1e-12, "{k}: {done} vs {want}");
        }
        // A later arrival after the queue drained starts at once.
        assert!((a.tokenize(5.0, 1024) - 5.0 - frontend::tokenize_s(1024)).abs() < 1e-12);
        // Two API servers share the work.
        let mut two = ApiServer::new(2, 1, 1, 1);
        assert!((two.tokenize(0.0, 8192) - one_s / 2.0).abs() < 1e-12);
        // Two renderer workers take a burst two at a time.
        let mut workers = ApiServer::new(1, 1, 1, 2);
        let done: Vec<f64> = (0..4).map(|_| workers.tokenize(0.0, 8192)).collect();
        let want = [one_s, one_s, 2.0 * one_s, 2.0 * one_s];
        for (d, w) in done.iter().zip(want) {
            assert!((d - w).abs() < 1e-12, "{done:?}");
        }
    }

    #[test]
    fn metrics_stamp_a_step_when_the_server_takes_it_up() {
        let mut a = ApiServer::new(1, 1, 1, 1);
        let first = a.deliver(0.0, 1000, 0);
        assert_eq!(first.stamp_s, 0.0);
        // The next step arrives while the server is busy: stamped when it gets to it, seen
        // after its own work.
        let second = a.deliver(0.005, 1000, 0);
        assert_eq!(second.stamp_s, first.seen_s);
        assert!(second.seen_s > second.stamp_s + 0.019, "{second:?}");
    }

    #[test]
    fn a_first_output_primes_its_detokenizer_on_the_prompt() {
        let mut cold = ApiServer::new(1, 1, 1, 1);
        let mut warm = ApiServer::new(1, 1, 1, 1);
        let first = cold.deliver(0.0, 4, 8192).seen_s;
        let later = warm.deliver(0.0, 4, 0).seen_s;
        let prime_s = 8192.0 * frontend::DETOKENIZER_PRIME_PER_TOKEN_S;
        assert!((first - later - prime_s).abs() < 1e-12, "{first} {later}");
        // The handler is busy that long: the next step's outputs wait behind it.
        assert!(cold.deliver(0.001, 4, 0).stamp_s >= first);
    }
}
