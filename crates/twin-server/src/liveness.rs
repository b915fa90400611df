//! Whether the engine thread is alive. The thread is the twin's EngineCore process: if it dies
//! (a panic, or its loop returning when nobody asked it to stop) `/health` answers 503,
//! generation requests fail with vLLM's `EngineDeadError`, and `serve` shuts the API server
//! down and exits non-zero with the cause. vLLM: `EngineDeadError`
//! (`v1/engine/exceptions.py`), `terminate_if_errored` (`entrypoints/launchers/launcher.py`).

use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use tokio::sync::Notify;

/// The engine thread's liveness, shared by the thread, the handlers and the CLI.
#[derive(Debug, Default)]
pub struct EngineLiveness {
    cause: OnceLock<String>,
    died: Notify,
    stopping: AtomicBool,
}

impl EngineLiveness {
    /// Graceful shutdown asked for: the loop returning from now on is not a death.
    pub fn stopping(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    /// Run the engine loop on this thread and record how it ended.
    pub fn supervise(&self, run: impl FnOnce()) {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
            Err(payload) => self.mark_dead(format!(
                "the engine thread panicked: {}",
                panic_message(&*payload)
            )),
            Ok(()) if !self.stopping.load(Ordering::SeqCst) => {
                self.mark_dead("the engine loop exited without being asked to stop".into())
            }
            Ok(()) => {}
        }
    }

    fn mark_dead(&self, cause: String) {
        // The first cause is the root one.
        let _ = self.cause.set(cause);
        // Waiters create their `Notified` before reading `cause`, so none is missed.
        self.died.notify_waiters();
    }

    /// Why the engine died; None while it is alive.
    pub fn dead(&self) -> Option<&str> {
        self.cause.get().map(String::as_str)
    }

    /// Resolves with the cause once the engine has died.
    pub async fn wait_dead(&self) -> &str {
        loop {
            let notified = self.died.notified();
            if let Some(c) = self.dead() {
                return c;
            }
            notified.await;
        }
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-string panic payload".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_or_an_unasked_exit_is_a_death_a_requested_stop_is_not() {
        let l = EngineLiveness::default();
        l.supervise(|| panic!("step {} failed", 7));
        assert_eq!(l.dead(), Some("the engine thread panicked: step 7 failed"));
        // The first cause stays.
        l.supervise(|| ());
        assert_eq!(l.dead(), Some("the engine thread panicked: step 7 failed"));

        let l = EngineLiveness::default();
        l.supervise(|| ());
        assert_eq!(
            l.dead(),
            Some("the engine loop exited without being asked to stop")
        );

        let l = EngineLiveness::default();
        l.stopping();
        l.supervise(|| ());
        assert_eq!(l.dead(), None);
    }

    #[tokio::test]
    async fn waiters_learn_the_cause_whenever_they_start_waiting() {
        let l = std::sync::Arc::new(EngineLiveness::default());
        let early = tokio::spawn({
            let l = l.clone();
            async move { l.wait_dead().await.to_string() }
        });
        tokio::task::yield_now().await;
        std::thread::spawn({
            let l = l.clone();
            move || l.supervise(|| panic!("boom"))
        })
        .join()
        .unwrap();
        assert_eq!(early.await.unwrap(), "the engine thread panicked: boom");
        assert_eq!(l.wait_dead().await, "the engine thread panicked: boom");
    }
}
