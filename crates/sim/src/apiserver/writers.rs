//! The threads that run writes. A write is CPU work under the store's lock (decode, checks,
//! patch, encode); run on tokio's blocking pool, 64 at once on two cores became 64 threads
//! time-sliced against each other, each with its own allocator heap, so the memory a write
//! touched had mostly left the cache by the time it was reused. A few threads of our own, fed
//! in the order [`super::fair`] admits writes, keep that memory warm and the lock uncontended.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::oneshot;

type Job = Box<dyn FnOnce() + Send>;

/// A fixed set of threads, started with the first write; they end when the server is dropped.
pub struct WriteThreads {
    threads: usize,
    queue: OnceLock<Sender<Job>>,
}

/// Why a write could not run: its thread is gone, or the write panicked.
#[derive(Debug)]
pub struct Lost(pub String);

impl WriteThreads {
    /// `threads` writes run at once (at least one).
    pub fn new(threads: usize) -> Self {
        WriteThreads {
            threads: threads.max(1),
            queue: OnceLock::new(),
        }
    }

    /// Two per core, at least four. At 5,000 simulated nodes on two cores, two threads left
    /// the writes (the run's critical path) too small a share of the CPU beside the kubelet
    /// processes: 141-179 s to ready against 120-137 s with four and 134 s with eight
    /// (docs/benchmarks.md, session 16). A write blocked on the disk (the SQLite store)
    /// leaves others running.
    pub fn for_this_machine() -> Self {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        Self::new((2 * cores).max(4))
    }

    fn sender(&self) -> &Sender<Job> {
        self.queue.get_or_init(|| {
            let (tx, rx) = channel::<Job>();
            let rx = Arc::new(Mutex::new(rx));
            for i in 0..self.threads {
                let rx = rx.clone();
                let spawned = std::thread::Builder::new()
                    .name(format!("sim-write-{i}"))
                    .spawn(move || work(&rx));
                if let Err(e) = spawned {
                    tracing::warn!(error = %e, "could not start a write thread");
                }
            }
            tx
        })
    }

    /// Runs `f` on a write thread; its value, or why there is none.
    pub async fn run<T, F>(&self, f: F) -> Result<T, Lost>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        // What a write starts (a controller's task, a timer) goes to the caller's runtime.
        let rt = tokio::runtime::Handle::try_current().ok();
        let job: Job = Box::new(move || {
            let _rt = rt.as_ref().map(|h| h.enter());
            let out = catch_unwind(AssertUnwindSafe(f)).map_err(|p| Lost(panic_text(&*p)));
            let _ = tx.send(out);
        });
        if self.sender().send(job).is_err() {
            return Err(Lost("no write thread is running".into()));
        }
        rx.await
            .unwrap_or_else(|_| Err(Lost("the write thread stopped".into())))
    }
}

fn work(rx: &Mutex<Receiver<Job>>) {
    loop {
        // The lock is held only to take the next job, not while it runs.
        let next = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
        match next {
            Ok(job) => job(),
            Err(_) => return,
        }
    }
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a write panicked".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_write_runs_on_a_write_thread_and_a_panic_is_an_error() {
        let w = WriteThreads::new(2);
        let name = w
            .run(|| std::thread::current().name().map(str::to_string))
            .await
            .unwrap();
        assert!(name.unwrap().starts_with("sim-write-"));
        let lost = w.run(|| -> u8 { panic!("bad write") }).await.unwrap_err();
        assert_eq!(lost.0, "bad write");
        // The thread that caught the panic still runs writes.
        for i in 0..4u8 {
            assert_eq!(w.run(move || i * 2).await.unwrap(), i * 2);
        }
    }
}
