//! The V1 scheduler. vLLM: `vllm/v1/core/sched/`.

mod block_fence;
mod coasting;
pub mod offload;
pub mod output;
pub mod request_queue;
mod scheduler;

pub use output::{
    EngineCoreOutput, EngineCoreOutputs, ModelRunnerOutput, ScheduledKind, ScheduledRequest,
    SchedulerOutput,
};
pub use scheduler::Scheduler;

use crate::request::Request;

/// A request's slot in the scheduler. Handles of finished requests go stale: the
/// generation makes a reused slot distinguishable from its previous occupant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReqHandle {
    index: u32,
    generation: u32,
}

impl ReqHandle {
    pub fn index(self) -> usize {
        self.index as usize
    }

    /// Slot and generation in one number (unique over the scheduler's lifetime).
    pub fn bits(self) -> u64 {
        u64::from(self.generation) << 32 | u64::from(self.index)
    }
}

/// Requests by handle. vLLM: `Scheduler.requests` (a dict by request id).
#[derive(Clone, Debug, Default)]
pub(crate) struct RequestSlab {
    slots: Vec<(u32, Option<Request>)>,
    free: Vec<u32>,
    len: usize,
}

impl RequestSlab {
    pub fn insert(&mut self, req: Request) -> ReqHandle {
        self.len += 1;
        if let Some(index) = self.free.pop() {
            let slot = &mut self.slots[index as usize];
            slot.0 = slot.0.wrapping_add(1);
            slot.1 = Some(req);
            ReqHandle {
                index,
                generation: slot.0,
            }
        } else {
            let index = self.slots.len() as u32;
            self.slots.push((0, Some(req)));
            ReqHandle {
                index,
                generation: 0,
            }
        }
    }

    pub fn get(&self, h: ReqHandle) -> Option<&Request> {
        match self.slots.get(h.index as usize) {
            Some((g, Some(r))) if *g == h.generation => Some(r),
            _ => None,
        }
    }

    pub fn get_mut(&mut self, h: ReqHandle) -> Option<&mut Request> {
        match self.slots.get_mut(h.index as usize) {
            Some((g, Some(r))) if *g == h.generation => Some(r),
            _ => None,
        }
    }

    /// The request behind a handle the scheduler itself holds in a queue.
    pub fn req(&self, h: ReqHandle) -> &Request {
        self.get(h).expect("queued handle must be live")
    }

    pub fn req_mut(&mut self, h: ReqHandle) -> &mut Request {
        self.get_mut(h).expect("queued handle must be live")
    }

    pub fn remove(&mut self, h: ReqHandle) -> Option<Request> {
        let slot = self.slots.get_mut(h.index as usize)?;
        if slot.0 != h.generation || slot.1.is_none() {
            return None;
        }
        self.len -= 1;
        self.free.push(h.index);
        slot.1.take()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Every live request (slot order).
    pub fn iter(&self) -> impl Iterator<Item = &Request> {
        self.slots.iter().filter_map(|(_, r)| r.as_ref())
    }
}
