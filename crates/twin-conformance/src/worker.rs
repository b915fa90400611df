//! The oracle's fake model runner and draft proposer (`vllm_sched_oracle.FakeWorker`).

use std::collections::HashMap;

use twin_engine::{
    KvTransfer, ModelRunner, ModelRunnerOutput, ReqHandle, RequestStatus, ScheduledKind, Scheduler,
    SchedulerOutput, TokenId,
};

use crate::scenario::{ResolvedRequest, Scenario};
use crate::{DRAFT_MISS_TOKEN_ID, STOP_TOKEN_ID};

struct Plan {
    stop_after_tokens: Option<u64>,
    stop_at_step: Option<u64>,
    spec_accept: Option<Vec<usize>>,
}

/// One P/D request's transfer, as the NIXL worker would report it (scripts/oracle_pd.py's
/// `PdWorker`).
struct Transfer {
    handle: ReqHandle,
    kv_transfer: KvTransfer,
    load_steps: u64,
    send_steps: u64,
    /// The step its load started (or it was first seen finished, for a send).
    from_step: Option<u64>,
    reported: bool,
}

/// What the GPU worker would do, reduced to token bookkeeping.
pub struct FakeWorker {
    plans: HashMap<String, Plan>,
    k: usize,
    use_async: bool,
    /// Output tokens the worker has produced per request (reset at install).
    wlen: HashMap<String, usize>,
    drafts: HashMap<String, Vec<TokenId>>,
    nprop: HashMap<String, usize>,
    last_sampled: Vec<(ReqHandle, String)>,
    toks: Vec<TokenId>,
    /// P/D requests by scenario index, once they arrived.
    transfers: Vec<Option<Transfer>>,
    /// Offloading jobs not yet reported: (job id, step due), in planning order
    /// (scripts/oracle_offload.py's `OffloadWorker`).
    offload_jobs: Vec<(u64, u64)>,
    offload_load_steps: u64,
    offload_store_steps: u64,
}

/// `1000 + crc32(f"{id}:{k}") % 30000`, or the stop token once the plan says so.
fn target_token(plan: &Plan, id: &str, k: usize, step: u64) -> TokenId {
    let stop_by_count = plan.stop_after_tokens.is_some_and(|s| k as u64 + 1 >= s);
    let stop_by_step = plan.stop_at_step.is_some_and(|s| step >= s);
    if stop_by_count || stop_by_step {
        return STOP_TOKEN_ID;
    }
    1000 + crc32fast::hash(format!("{id}:{k}").as_bytes()) % 30000
}

impl FakeWorker {
    pub fn new(scn: &Scenario, k: usize, use_async: bool) -> Self {
        let plans = scn
            .requests
            .iter()
            .map(|r: &ResolvedRequest| {
                (
                    r.id.clone(),
                    Plan {
                        stop_after_tokens: r.stop_after_tokens,
                        stop_at_step: r.stop_at_step,
                        spec_accept: r.spec_accept.clone(),
                    },
                )
            })
            .collect();
        FakeWorker {
            plans,
            k,
            use_async,
            wlen: HashMap::new(),
            drafts: HashMap::new(),
            nprop: HashMap::new(),
            last_sampled: Vec::new(),
            toks: Vec::new(),
            transfers: scn.requests.iter().map(|_| None).collect(),
            offload_jobs: Vec::new(),
            offload_load_steps: scn.offload_load_steps,
            offload_store_steps: scn.offload_store_steps,
        }
    }

    /// The offloading worker's completions for the batch of `step`: a job the scheduler
    /// asks to flush now (the worker waits for it before the forward), a load
    /// `kv_offload_load_steps` after the step that planned it, a store
    /// `kv_offload_store_steps` after.
    fn report_offload_jobs(
        &mut self,
        so: &SchedulerOutput,
        step: u64,
        out: &mut ModelRunnerOutput,
    ) {
        let meta = &so.kv_offload;
        for (id, due) in &mut self.offload_jobs {
            if meta.jobs_to_flush.contains(id) {
                *due = step;
            }
        }
        for j in &meta.load_jobs {
            self.offload_jobs
                .push((j.id, step + self.offload_load_steps));
        }
        for j in &meta.store_jobs {
            let due = if meta.jobs_to_flush.contains(&j.id) {
                step
            } else {
                step + self.offload_store_steps
            };
            self.offload_jobs.push((j.id, due));
        }
        self.offload_jobs.retain(|&(id, due)| {
            let done = due <= step;
            if done {
                out.completed_kv_jobs.push(id);
            }
            !done
        });
    }

    /// Request `index` of the scenario arrived as `handle`.
    pub fn arrived(&mut self, r: &ResolvedRequest, handle: ReqHandle) {
        if r.kv_transfer != KvTransfer::None {
            self.transfers[r.index] = Some(Transfer {
                handle,
                kv_transfer: r.kv_transfer,
                load_steps: r.kv_load_steps,
                send_steps: r.kv_send_steps,
                from_step: None,
                reported: false,
            });
        }
    }

    /// The NIXL worker's completions for the batch of `step`, in scenario order: a load
    /// `load_steps` after the step that started it, a send `send_steps` after its request
    /// finished.
    fn report_transfers(&mut self, sched: &Scheduler, step: u64, out: &mut ModelRunnerOutput) {
        for t in self.transfers.iter_mut().flatten() {
            if t.reported {
                continue;
            }
            let Some(r) = sched.request(t.handle) else {
                continue;
            };
            let (due_after, active) = match t.kv_transfer {
                KvTransfer::LoadFromRemote => (
                    t.load_steps,
                    r.status == RequestStatus::WaitingForRemoteKvs
                        || (r.is_finished() && t.from_step.is_some()),
                ),
                KvTransfer::SendToRemote => (t.send_steps, r.is_finished()),
                KvTransfer::None => continue,
            };
            if !active {
                continue;
            }
            let from = *t.from_step.get_or_insert(step);
            if step >= from + due_after {
                t.reported = true;
                match t.kv_transfer {
                    KvTransfer::LoadFromRemote => out.finished_recving.push(t.handle),
                    _ => out.finished_sending.push(t.handle),
                }
            }
        }
    }

    /// After sampling at `step`, propose K drafts for the next positions.
    fn propose(&mut self, id: &str, step: u64) {
        let plan = &self.plans[id];
        let j = self.nprop.entry(id.to_string()).or_insert(0);
        let pat_len = plan.spec_accept.as_ref().map_or(1, Vec::len);
        let accept = plan
            .spec_accept
            .as_ref()
            .map_or(self.k, |p| p[*j % pat_len])
            .min(self.k);
        *j += 1;
        let base = self.wlen[id];
        let mut d: Vec<TokenId> = (0..accept)
            .map(|i| target_token(plan, id, base + i, step + 1))
            .collect();
        d.resize(self.k, DRAFT_MISS_TOKEN_ID);
        self.drafts.insert(id.to_string(), d);
    }
}

impl ModelRunner for FakeWorker {
    fn execute_model(
        &mut self,
        sched: &Scheduler,
        so: &SchedulerOutput,
        out: &mut ModelRunnerOutput,
    ) {
        let step = so.step;
        for e in &so.scheduled {
            if e.kind != ScheduledKind::Running {
                // (Re)installed from the scheduler's state.
                let r = sched.request(e.handle).expect("scheduled request is live");
                self.wlen
                    .insert(r.request_id.clone(), r.num_output_tokens());
                self.drafts.remove(&r.request_id);
            }
        }
        for &h in &so.preempted {
            if let Some(r) = sched.request(h) {
                self.drafts.remove(&r.request_id);
            }
        }
        self.last_sampled.clear();
        self.report_transfers(sched, step, out);
        self.report_offload_jobs(so, step, out);
        if so.total_num_scheduled_tokens == 0 {
            return;
        }
        for e in &so.scheduled {
            if !e.samples {
                out.push(&[]);
                continue;
            }
            let id = &sched
                .request(e.handle)
                .expect("scheduled request is live")
                .request_id;
            let plan = &self.plans[id];
            let k0 = self.wlen[id];
            let mut sched_drafts: &[TokenId] = so.spec_tokens(e);
            let m = sched_drafts.len();
            if m > 0 && self.use_async {
                // The scheduler holds placeholders; the worker verifies its own drafts.
                sched_drafts = self
                    .drafts
                    .get(id)
                    .map_or(&[][..], |d| &d[..m.min(d.len())]);
            }
            self.toks.clear();
            self.toks.push(target_token(plan, id, k0, step));
            for (i, &d) in sched_drafts.iter().enumerate() {
                if d != *self.toks.last().expect("non-empty") {
                    break;
                }
                self.toks.push(target_token(plan, id, k0 + i + 1, step));
            }
            self.wlen.insert(id.clone(), k0 + self.toks.len());
            out.push(&self.toks);
            self.last_sampled.push((e.handle, id.clone()));
            if self.k > 0 {
                let id = id.clone();
                self.propose(&id, step);
            }
        }
    }

    fn take_draft_token_ids(
        &mut self,
        _sched: &Scheduler,
        drafts: &mut Vec<(ReqHandle, Vec<TokenId>)>,
    ) {
        for (h, id) in &self.last_sampled {
            if let Some(d) = self.drafts.get(id) {
                drafts.push((*h, d.clone()));
            }
        }
    }
}
