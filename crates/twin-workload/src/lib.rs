//! twin-workload: what arrives at the engine, and when.
//!
//! Open loop (Poisson, gamma with `--burstiness`, constant, step/ramp rate profiles) and
//! closed loop (fixed concurrency); token lengths from fixed, uniform, normal, lognormal
//! or empirical distributions; shared system-prompt groups; multi-turn sessions whose
//! next prompt contains the previous turn (prompt + answer) after a think time; replay of
//! native, Mooncake, Azure and BurstGPT traces; multi-stage rate schedules that drain between
//! stages (inference-perf's `load.stages`), a fixed pool of prompts cycled in a seeded order,
//! and the client's request timeout. Tokens are synthesised deterministically so
//! equal content means equal token ids, which is what the prefix cache keys on.
//!
//! Deterministic: the same spec and seed give the same requests; memory is bounded by
//! in-flight requests and sessions (nothing is pre-generated).

pub mod arrivals;
pub mod lengths;
pub mod pool;
pub mod stages;
pub mod trace;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub use arrivals::{ArrivalProcess, ArrivalShape, RateProfile};
pub use pool::{PoolEntry, PromptPool, MAX_PROMPT_POOL};
pub use stages::{parse_stages, split_duration_unit, Stage, StagedArrivals};

/// The longest prompt or output one request may ask for (docs/limits.md): longer than any
/// model's context today, and small enough that a request's token ids (4 bytes each) are
/// allocated only after this check.
pub const MAX_REQUEST_TOKENS: usize = 1 << 24;
/// The longest span of arrivals a workload may cover, in virtual seconds: seven days. The
/// report keeps a row per virtual second; a rate of 1e-300 req/s or a trace with far-apart
/// timestamps would otherwise ask for 10^300 of them.
pub const MAX_SPAN_S: f64 = 7.0 * 86_400.0;
/// Gamma burstiness (shape) the arrival process accepts: outside it the gaps are all but
/// zero with rare astronomic ones, which no benchmark means.
pub const BURSTINESS_RANGE: std::ops::RangeInclusive<f64> = 1e-3..=1e3;
pub use lengths::LengthDist;
pub use trace::{parse_trace, TraceContent, TraceFormat, TraceRecord};

#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum WorkloadError {
    #[error("{field}: {message}")]
    Spec { field: String, message: String },
    #[error("{file}: line {line}: {message}")]
    Trace {
        file: String,
        line: usize,
        message: String,
    },
}

/// How requests arrive.
#[derive(Clone, Debug, PartialEq)]
pub enum Arrivals {
    Open(ArrivalProcess),
    /// A fixed number of clients, each sending its next request when the last one ends.
    Closed {
        concurrency: usize,
    },
    /// Replay; lengths and contents come from the records.
    Trace(Vec<TraceRecord>),
    /// Stages one after another, each drained before the next starts ([`stages`]).
    Staged(StagedArrivals),
}

/// A share of requests that start with one of a few shared system prompts.
#[derive(Clone, Debug, PartialEq)]
pub struct SharedPrefix {
    pub num_groups: usize,
    pub prefix_len: usize,
    /// Fraction of requests (0..=1) that use a group.
    pub share: f64,
}

/// Multi-turn conversations.
#[derive(Clone, Debug, PartialEq)]
pub struct Sessions {
    pub turns: LengthDist,
    /// Mean think time between an answer and the next question (exponential).
    pub think_time_s: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadSpec {
    pub arrivals: Arrivals,
    pub input_len: LengthDist,
    pub output_len: LengthDist,
    pub num_requests: usize,
    pub shared_prefix: Option<SharedPrefix>,
    pub sessions: Option<Sessions>,
    pub seed: u64,
    /// Send prompts from a fixed pool of this many, cycled in a seeded order ([`pool`]).
    pub prompt_pool: Option<usize>,
    /// The client gives up on a request this long after sending it: vLLM aborts it then.
    pub request_timeout_s: Option<f64>,
}

fn spec_err(field: &str, message: String) -> WorkloadError {
    WorkloadError::Spec {
        field: field.to_string(),
        message,
    }
}

impl WorkloadSpec {
    /// The mean prompt length the engine sees: a trace's records, or the length distribution
    /// plus the shared prefix the generator puts in front of a share of the prompts.
    pub fn mean_prompt_tokens(&self) -> f64 {
        if let Arrivals::Trace(records) = &self.arrivals {
            if records.is_empty() {
                return 0.0;
            }
            return records.iter().map(|r| r.input_len as f64).sum::<f64>() / records.len() as f64;
        }
        let prefix = self
            .shared_prefix
            .as_ref()
            .map_or(0.0, |sp| sp.share * sp.prefix_len as f64);
        self.input_len.mean() + prefix
    }

    /// Every bound a workload must respect before anything is generated (docs/limits.md).
    pub fn validate(&self) -> Result<(), WorkloadError> {
        if let Some(sp) = &self.shared_prefix {
            if sp.num_groups == 0 || !(0.0..=1.0).contains(&sp.share) {
                return Err(spec_err(
                    "--shared-prefix",
                    "need at least one group and a share in [0, 1]".into(),
                ));
            }
            if sp.prefix_len > MAX_REQUEST_TOKENS {
                return Err(spec_err(
                    "--shared-prefix",
                    format!(
                        "len={} is beyond the twin's limit of {MAX_REQUEST_TOKENS} tokens",
                        sp.prefix_len
                    ),
                ));
            }
            // Every group's prompt is synthesised up front: bound them together.
            let total = sp.num_groups.checked_mul(sp.prefix_len);
            if total.is_none_or(|t| t > MAX_REQUEST_TOKENS) {
                return Err(spec_err(
                    "--shared-prefix",
                    format!(
                        "groups={} × len={} is beyond the twin's limit of {MAX_REQUEST_TOKENS} shared-prefix tokens in all",
                        sp.num_groups, sp.prefix_len
                    ),
                ));
            }
        }
        if let Some(s) = &self.sessions {
            if !(s.think_time_s.is_finite() && (0.0..=MAX_SPAN_S).contains(&s.think_time_s)) {
                return Err(spec_err(
                    "--think-time",
                    format!("{} s must be in [0, {MAX_SPAN_S}] s", s.think_time_s),
                ));
            }
        }
        match &self.arrivals {
            Arrivals::Open(p) => p.validate(self.num_requests)?,
            Arrivals::Staged(st) => {
                st.validate("--stages")?;
                if self.sessions.is_some() {
                    return Err(spec_err(
                        "--stages",
                        "multi-turn sessions would carry requests across stages; use one or the other".into(),
                    ));
                }
            }
            _ => {}
        }
        if let Some(n) = self.prompt_pool {
            pool::validate_size(n)?;
            if self.sessions.is_some() || matches!(self.arrivals, Arrivals::Trace(_)) {
                return Err(spec_err(
                    "--prompt-pool",
                    "applies to synthetic single-turn prompts, not to --multi-turn sessions or a trace".into(),
                ));
            }
        }
        if let Some(t) = self.request_timeout_s {
            if !(t.is_finite() && t > 0.0 && t <= MAX_SPAN_S) {
                return Err(spec_err(
                    "--request-timeout",
                    format!("{t} s must be in (0, {MAX_SPAN_S}] s"),
                ));
            }
        }
        Ok(())
    }
}

/// One request to submit.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestSpec {
    /// Issue order, from 0.
    pub id: u64,
    pub arrival_time_s: f64,
    pub prompt_token_ids: Vec<u32>,
    /// Output length the client forces (`max_tokens` with `ignore_eos`).
    pub max_tokens: usize,
    pub session: Option<u64>,
    pub turn: u32,
    /// Its stage of a staged run (from 0).
    pub stage: Option<u32>,
}

#[derive(Clone, Debug)]
struct SessionState {
    turns_left: u32,
    turn: u32,
    history: Vec<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Due {
    time_bits: u64,
    seq: u64,
}

#[derive(Clone, Debug)]
enum Pending {
    /// A new request (or the first turn of a new session) from the synthetic generator.
    Fresh,
    /// The next turn of a session.
    Turn(u64),
    /// Trace record index.
    Trace(usize),
}

/// Vocabulary range of synthetic tokens (avoids ids below 3: pad/bos/eos conventions).
const TOKEN_LO: u32 = 3;
const TOKEN_SPAN: u32 = 120_000;

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Spare capacity for the outputs the engine appends to a prompt's vector, so that
/// appending does not copy the prompt (the engine reserves up to 2,048 itself).
fn output_room(max_tokens: usize) -> usize {
    max_tokens.min(2048)
}

/// Deterministic tokens for a content key: the same key always gives the same tokens.
pub fn synth_tokens(key: u64, n: usize, out: &mut Vec<u32>) {
    let mut s = mix(key ^ 0x5DEE_CE66_D1CE_4E5B);
    // Two tokens per mixed word (multiply-shift on each half), written into place: prompts
    // are most of the per-request work outside the engine's steps.
    let span = u64::from(TOKEN_SPAN);
    let token = |half: u64| TOKEN_LO + ((half * span) >> 32) as u32;
    let start = out.len();
    out.resize(start + n, 0);
    let mut pairs = out[start..].chunks_exact_mut(2);
    for pair in &mut pairs {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let z = mix(s);
        pair[0] = token(z & 0xFFFF_FFFF);
        pair[1] = token(z >> 32);
    }
    if let [last] = pairs.into_remainder() {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        *last = token(mix(s) & 0xFFFF_FFFF);
    }
}

fn time_key(t: f64) -> u64 {
    // Arrival times are non-negative, so their bit patterns order like the values.
    t.max(0.0).to_bits()
}

/// The request stream. Pull with [`Workload::pop_due`]; report finishes with
/// [`Workload::on_finished`] so closed-loop clients and sessions can continue.
pub struct Workload {
    spec: WorkloadSpec,
    rng: ChaCha8Rng,
    issued: u64,
    scheduled: u64,
    seq: u64,
    due: BinaryHeap<Reverse<(Due, u64)>>,
    pending: HashMap<u64, (f64, Pending)>,
    sessions: HashMap<u64, SessionState>,
    next_session: u64,
    group_tokens: Vec<Vec<u32>>,
    pool: Option<PromptPool>,
    stage: StageState,
}

/// Where a staged run is: its current stage, the requests of it still to be scheduled and
/// those scheduled but not yet ended.
#[derive(Clone, Debug, Default)]
struct StageState {
    index: usize,
    left_to_schedule: usize,
    unfinished: usize,
}

impl Workload {
    pub fn new(spec: WorkloadSpec) -> Result<Self, WorkloadError> {
        spec.validate()?;
        let group_tokens = spec
            .shared_prefix
            .as_ref()
            .map(|sp| {
                (0..sp.num_groups)
                    .map(|g| {
                        let mut v = Vec::new();
                        synth_tokens(0xC0FF_EE00 + g as u64, sp.prefix_len, &mut v);
                        v
                    })
                    .collect()
            })
            .unwrap_or_default();
        let pool = spec
            .prompt_pool
            .map(|n| {
                PromptPool::new(
                    n,
                    &spec.input_len,
                    &spec.output_len,
                    spec.shared_prefix.as_ref(),
                    spec.seed,
                )
            })
            .transpose()?;
        let mut w = Workload {
            rng: ChaCha8Rng::seed_from_u64(spec.seed),
            pool,
            stage: StageState::default(),
            spec,
            issued: 0,
            scheduled: 0,
            seq: 0,
            due: BinaryHeap::new(),
            pending: HashMap::new(),
            sessions: HashMap::new(),
            next_session: 0,
            group_tokens,
        };
        match &w.spec.arrivals {
            // The first request arrives at time 0, like `vllm bench serve`.
            Arrivals::Open(_) => {
                w.push(0.0, Pending::Fresh);
            }
            Arrivals::Closed { concurrency } => {
                for _ in 0..*concurrency {
                    w.push(0.0, Pending::Fresh);
                }
            }
            Arrivals::Trace(records) => {
                let n = records.len().min(w.spec.num_requests);
                let times: Vec<f64> = records[..n].iter().map(|r| r.arrival_time_s).collect();
                for (i, t) in times.into_iter().enumerate() {
                    w.push(t, Pending::Trace(i));
                }
            }
            Arrivals::Staged(_) => w.start_stage(0, 0.0),
        }
        Ok(w)
    }

    pub fn spec(&self) -> &WorkloadSpec {
        &self.spec
    }

    /// Requests handed out so far.
    pub fn issued(&self) -> u64 {
        self.issued
    }

    /// Stage `k` starts at `t_s` with its first request (nothing when past the last stage).
    fn start_stage(&mut self, k: usize, t_s: f64) {
        let Arrivals::Staged(st) = &self.spec.arrivals else {
            return;
        };
        let Some(n) = st.stages.get(k).map(Stage::num_requests) else {
            return;
        };
        self.stage = StageState {
            index: k,
            left_to_schedule: n,
            unfinished: 0,
        };
        self.push_stage_request(t_s);
    }

    fn push_stage_request(&mut self, t_s: f64) {
        if self.stage.left_to_schedule > 0 && self.push(t_s, Pending::Fresh) {
            self.stage.left_to_schedule -= 1;
            self.stage.unfinished += 1;
        } else {
            // The request cap cut the stage short: nothing more of it will come.
            self.stage.left_to_schedule = 0;
        }
    }

    /// Schedules a request at `t`; false once `num_requests` are scheduled.
    fn push(&mut self, t: f64, p: Pending) -> bool {
        if self.scheduled >= self.spec.num_requests as u64 {
            return false;
        }
        self.scheduled += 1;
        let seq = self.seq;
        self.seq += 1;
        self.pending.insert(seq, (t, p));
        self.due.push(Reverse((
            Due {
                time_bits: time_key(t),
                seq,
            },
            seq,
        )));
        true
    }

    /// When the next request is due, if any is known.
    pub fn next_time(&self) -> Option<f64> {
        self.due.peek().map(|Reverse((_, seq))| self.pending[seq].0)
    }

    /// The next request if it is due at or before `now_s`.
    pub fn pop_due(&mut self, now_s: f64) -> Option<RequestSpec> {
        let t = self.next_time()?;
        if t > now_s {
            return None;
        }
        let Reverse((_, seq)) = self.due.pop().expect("peeked");
        let (t, p) = self.pending.remove(&seq).expect("pending entry");
        let id = self.issued;
        self.issued += 1;
        let req = match p {
            Pending::Fresh => {
                let mut stage = None;
                match &self.spec.arrivals {
                    Arrivals::Open(proc_) => {
                        let proc_ = proc_.clone();
                        if let Some(next) = proc_.next_after(t, &mut self.rng) {
                            self.push(next, Pending::Fresh);
                        }
                    }
                    Arrivals::Staged(st) => {
                        stage = Some(self.stage.index as u32);
                        if self.stage.left_to_schedule > 0 {
                            let proc_ = ArrivalProcess {
                                shape: st.shape.clone(),
                                rate: RateProfile::Constant(st.stages[self.stage.index].rate),
                            };
                            if let Some(next) = proc_.next_after(t, &mut self.rng) {
                                self.push_stage_request(next);
                            }
                        }
                    }
                    _ => {}
                }
                let mut req = self.fresh(id, t);
                req.stage = stage;
                req
            }
            Pending::Turn(s) => self.next_turn(id, t, s),
            Pending::Trace(i) => self.trace_request(id, i),
        };
        Some(req)
    }

    fn pick_group(&mut self) -> Option<usize> {
        let sp = self.spec.shared_prefix.as_ref()?;
        let (n, share) = (sp.num_groups, sp.share);
        (self.rng.gen::<f64>() < share).then(|| self.rng.gen_range(0..n))
    }

    fn fresh(&mut self, id: u64, t: f64) -> RequestSpec {
        // A pool entry's tokens come from its index: a prompt sent again is the same prompt.
        let (group, n, max_tokens, content_key) = match self.pool.as_mut() {
            Some(pool) => {
                let e = pool.next_entry();
                (
                    e.group.map(|g| g as usize),
                    e.input_len,
                    e.max_tokens,
                    0x5000_0000_0000 + u64::from(e.index),
                )
            }
            None => {
                let group = self.pick_group();
                let n = self.spec.input_len.sample(&mut self.rng);
                let max_tokens = self.spec.output_len.sample(&mut self.rng);
                (group, n, max_tokens, 0x1000_0000_0000 + id)
            }
        };
        let prefix: &[u32] = group.map_or(&[], |g| &self.group_tokens[g]);
        let mut prompt = Vec::with_capacity(prefix.len() + n + output_room(max_tokens));
        prompt.extend_from_slice(prefix);
        synth_tokens(content_key, n, &mut prompt);
        let mut session = None;
        if let Some(s) = &self.spec.sessions {
            let turns = s.turns.sample(&mut self.rng).max(1) as u32;
            let sid = self.next_session;
            self.next_session += 1;
            if turns > 1 {
                self.sessions.insert(
                    sid,
                    SessionState {
                        turns_left: turns - 1,
                        turn: 0,
                        history: prompt.clone(),
                    },
                );
            }
            session = Some(sid);
        }
        RequestSpec {
            id,
            arrival_time_s: t,
            prompt_token_ids: prompt,
            max_tokens,
            session,
            turn: 0,
            stage: None,
        }
    }

    fn next_turn(&mut self, id: u64, t: f64, sid: u64) -> RequestSpec {
        let st = self.sessions.get_mut(&sid).expect("live session");
        st.turn += 1;
        st.turns_left -= 1;
        let mut prompt = st.history.clone();
        let n = self.spec.input_len.sample(&mut self.rng);
        synth_tokens(0x2000_0000_0000 + id, n, &mut prompt);
        let max_tokens = self.spec.output_len.sample(&mut self.rng);
        let st = self.sessions.get_mut(&sid).expect("live session");
        st.history.clone_from(&prompt);
        let turn = st.turn;
        RequestSpec {
            id,
            arrival_time_s: t,
            prompt_token_ids: prompt,
            max_tokens,
            session: Some(sid),
            turn,
            stage: None,
        }
    }

    fn trace_request(&mut self, id: u64, i: usize) -> RequestSpec {
        let Arrivals::Trace(records) = &self.spec.arrivals else {
            unreachable!("trace pending only with trace arrivals")
        };
        let r = &records[i];
        let mut prompt = Vec::with_capacity(r.input_len);
        match &r.content {
            TraceContent::Unique => synth_tokens(0x3000_0000_0000 + id, r.input_len, &mut prompt),
            TraceContent::Tokens(t) => prompt.extend_from_slice(t),
            TraceContent::PrefixGroup { group, prefix_len } => {
                let key = group.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                    (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
                });
                synth_tokens(key, *prefix_len, &mut prompt);
                synth_tokens(0x3000_0000_0000 + id, r.input_len - prefix_len, &mut prompt);
            }
            TraceContent::Blocks {
                hash_ids,
                block_tokens,
            } => {
                for (b, h) in hash_ids.iter().enumerate() {
                    let n = (*block_tokens).min(r.input_len - b * block_tokens);
                    synth_tokens(0x4000_0000_0000 + h, n, &mut prompt);
                }
            }
        }
        RequestSpec {
            id,
            arrival_time_s: r.arrival_time_s,
            prompt_token_ids: prompt,
            max_tokens: r.output_len,
            session: None,
            turn: 0,
            stage: None,
        }
    }

    /// A request ended at `now_s` with these output tokens (`None` if it was rejected or
    /// aborted: its session ends). Schedules closed-loop follow-ups and next turns.
    pub fn on_finished(&mut self, req: &RequestSpec, output_tokens: Option<&[u32]>, now_s: f64) {
        if req.stage.is_some() {
            self.stage.unfinished = self.stage.unfinished.saturating_sub(1);
            if self.stage.unfinished == 0 && self.stage.left_to_schedule == 0 {
                // inference-perf's `run_stage` waits for every request of the stage.
                self.start_stage(self.stage.index + 1, now_s);
            }
        }
        let mut continued = false;
        if let (Some(sid), Some(out)) = (req.session, output_tokens) {
            if let Some(st) = self.sessions.get_mut(&sid) {
                if st.turns_left > 0 {
                    st.history.extend_from_slice(out);
                    let think = self.spec.sessions.as_ref().map_or(0.0, |s| s.think_time_s);
                    let gap = if think > 0.0 {
                        -self.rng.gen::<f64>().max(f64::MIN_POSITIVE).ln() * think
                    } else {
                        0.0
                    };
                    self.push(now_s + gap, Pending::Turn(sid));
                    continued = true;
                } else {
                    self.sessions.remove(&sid);
                }
            }
        } else if let Some(sid) = req.session {
            self.sessions.remove(&sid);
        }
        if !continued && matches!(self.spec.arrivals, Arrivals::Closed { .. }) {
            self.push(now_s, Pending::Fresh);
        }
    }

    /// Nothing more will ever arrive (no due requests and none can follow).
    pub fn is_exhausted(&self) -> bool {
        let closed = matches!(self.spec.arrivals, Arrivals::Closed { .. });
        if let Arrivals::Staged(st) = &self.spec.arrivals {
            let last = self.stage.index + 1 >= st.stages.len();
            return self.due.is_empty()
                && (self.scheduled >= self.spec.num_requests as u64
                    || (last && self.stage.left_to_schedule == 0));
        }
        self.due.is_empty()
            && (self.scheduled >= self.spec.num_requests as u64
                || (self.sessions.is_empty() && !closed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(arrivals: Arrivals) -> WorkloadSpec {
        WorkloadSpec {
            arrivals,
            input_len: LengthDist::Fixed(20),
            output_len: LengthDist::Fixed(4),
            num_requests: 50,
            shared_prefix: Some(SharedPrefix {
                num_groups: 2,
                prefix_len: 8,
                share: 1.0,
            }),
            sessions: None,
            seed: 3,
            prompt_pool: None,
            request_timeout_s: None,
        }
    }

    #[test]
    fn synthetic_tokens_are_two_per_mixed_word_appended_in_order() {
        // The plain statement of what synth_tokens writes, token by token.
        fn reference(key: u64, n: usize) -> Vec<u32> {
            let mut s = mix(key ^ 0x5DEE_CE66_D1CE_4E5B);
            let token = |half: u64| TOKEN_LO + ((half * u64::from(TOKEN_SPAN)) >> 32) as u32;
            let mut v = Vec::new();
            while v.len() < n {
                s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let z = mix(s);
                v.push(token(z & 0xFFFF_FFFF));
                if v.len() < n {
                    v.push(token(z >> 32));
                }
            }
            v
        }
        for n in [0, 1, 2, 3, 64, 777] {
            let mut out = vec![9, 9];
            synth_tokens(42, n, &mut out);
            assert_eq!(&out[..2], &[9, 9]);
            assert_eq!(out[2..], reference(42, n)[..], "n = {n}");
            assert!(out[2..]
                .iter()
                .all(|&t| (TOKEN_LO..TOKEN_LO + TOKEN_SPAN).contains(&t)));
        }
    }

    #[test]
    fn poisson_rate_and_determinism() {
        let open = Arrivals::Open(ArrivalProcess {
            shape: ArrivalShape::Poisson,
            rate: RateProfile::Constant(10.0),
        });
        let mut a = Workload::new(WorkloadSpec {
            num_requests: 5000,
            ..spec(open.clone())
        })
        .unwrap();
        let mut b = Workload::new(WorkloadSpec {
            num_requests: 5000,
            ..spec(open)
        })
        .unwrap();
        let mut last = 0.0;
        let mut n = 0;
        while let Some(r) = a.pop_due(f64::INFINITY) {
            assert_eq!(Some(&r), b.pop_due(f64::INFINITY).as_ref());
            assert!(r.arrival_time_s >= last);
            last = r.arrival_time_s;
            assert_eq!(r.prompt_token_ids.len(), 28);
            n += 1;
        }
        assert_eq!(n, 5000);
        let rate = 5000.0 / last;
        assert!((rate - 10.0).abs() < 0.6, "rate {rate}");
    }

    #[test]
    fn mean_prompt_tokens_is_what_the_generator_sends() {
        // Half the prompts carry the 8-token prefix in front of 20 tokens of their own.
        let mut s = spec(Arrivals::Open(ArrivalProcess {
            shape: ArrivalShape::Poisson,
            rate: RateProfile::Constant(10.0),
        }));
        s.num_requests = 4000;
        s.shared_prefix.as_mut().unwrap().share = 0.5;
        let expected = s.mean_prompt_tokens();
        assert_eq!(expected, 24.0);
        let mut w = Workload::new(s).unwrap();
        let (mut total, mut n) = (0usize, 0usize);
        while let Some(r) = w.pop_due(f64::INFINITY) {
            total += r.prompt_token_ids.len();
            n += 1;
        }
        let sent = total as f64 / n as f64;
        assert!(
            (sent - expected).abs() < 0.2,
            "sent {sent}, expected {expected}"
        );
    }

    #[test]
    fn closed_loop_and_sessions_reuse_history() {
        let mut s = spec(Arrivals::Closed { concurrency: 2 });
        s.sessions = Some(Sessions {
            turns: LengthDist::Fixed(3),
            think_time_s: 0.0,
        });
        let mut w = Workload::new(s).unwrap();
        let r0 = w.pop_due(0.0).unwrap();
        let r1 = w.pop_due(0.0).unwrap();
        assert!(w.pop_due(0.0).is_none(), "only 2 clients");
        w.on_finished(&r0, Some(&[9, 9, 9, 9]), 1.0);
        let r2 = w.pop_due(1.0).unwrap();
        assert_eq!(r2.session, r0.session);
        assert_eq!(r2.turn, 1);
        let mut expect = r0.prompt_token_ids.clone();
        expect.extend_from_slice(&[9, 9, 9, 9]);
        assert_eq!(&r2.prompt_token_ids[..expect.len()], &expect[..]);
        // share = 1.0: every prompt starts with one of the two 8-token group prefixes.
        let groups = [
            r0.prompt_token_ids[..8].to_vec(),
            r1.prompt_token_ids[..8].to_vec(),
        ];
        assert!(groups.iter().all(|g| g.len() == 8));
        assert_ne!(r0.prompt_token_ids[8..], r1.prompt_token_ids[8..]);
    }
}
