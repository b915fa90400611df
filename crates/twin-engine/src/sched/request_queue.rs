//! Waiting queues. vLLM: `vllm/v1/core/sched/request_queue.py`.

use std::collections::{BTreeMap, VecDeque};

use super::ReqHandle;

/// Sort key of the priority queue: (priority, arrival time bits, creation seq).
pub type PriorityKey = (i64, u64, u64);

/// vLLM: `FCFSRequestQueue` (a deque) or `PriorityRequestQueue` (a heap; iterated in
/// sorted order, so a sorted map gives the same order for every operation).
#[derive(Clone, Debug)]
pub enum RequestQueue {
    Fcfs(VecDeque<ReqHandle>),
    Priority(BTreeMap<PriorityKey, ReqHandle>),
}

impl RequestQueue {
    pub fn new(priority: bool) -> Self {
        if priority {
            RequestQueue::Priority(BTreeMap::new())
        } else {
            RequestQueue::Fcfs(VecDeque::new())
        }
    }

    pub fn len(&self) -> usize {
        match self {
            RequestQueue::Fcfs(q) => q.len(),
            RequestQueue::Priority(q) => q.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// vLLM: `add_request` (FCFS: append; priority: heap push).
    pub fn add(&mut self, h: ReqHandle, key: PriorityKey) {
        match self {
            RequestQueue::Fcfs(q) => q.push_back(h),
            RequestQueue::Priority(q) => {
                q.insert(key, h);
            }
        }
    }

    /// vLLM: `prepend_request` (FCFS: to the front; priority: by key).
    pub fn prepend(&mut self, h: ReqHandle, key: PriorityKey) {
        match self {
            RequestQueue::Fcfs(q) => q.push_front(h),
            RequestQueue::Priority(q) => {
                q.insert(key, h);
            }
        }
    }

    pub fn peek(&self) -> Option<ReqHandle> {
        match self {
            RequestQueue::Fcfs(q) => q.front().copied(),
            RequestQueue::Priority(q) => q.values().next().copied(),
        }
    }

    pub fn pop(&mut self) -> Option<ReqHandle> {
        match self {
            RequestQueue::Fcfs(q) => q.pop_front(),
            RequestQueue::Priority(q) => q.pop_first().map(|(_, h)| h),
        }
    }

    /// vLLM: `remove_request`.
    pub fn remove(&mut self, h: ReqHandle, key: PriorityKey) {
        match self {
            RequestQueue::Fcfs(q) => {
                if let Some(pos) = q.iter().position(|&x| x == h) {
                    q.remove(pos);
                }
            }
            RequestQueue::Priority(q) => {
                q.remove(&key);
            }
        }
    }

    /// Remove a handle without its sort key (its request may already be freed).
    pub fn remove_handle(&mut self, h: ReqHandle) {
        match self {
            RequestQueue::Fcfs(q) => q.retain(|&x| x != h),
            RequestQueue::Priority(q) => q.retain(|_, &mut x| x != h),
        }
    }

    /// Queue order (heap-pop order for priority).
    pub fn iter(&self) -> Box<dyn Iterator<Item = ReqHandle> + '_> {
        match self {
            RequestQueue::Fcfs(q) => Box::new(q.iter().copied()),
            RequestQueue::Priority(q) => Box::new(q.values().copied()),
        }
    }

    /// The FCFS deque, for cache-aware reordering (which vLLM does only under FCFS).
    pub fn fcfs_mut(&mut self) -> Option<&mut VecDeque<ReqHandle>> {
        match self {
            RequestQueue::Fcfs(q) => Some(q),
            RequestQueue::Priority(_) => None,
        }
    }
}
