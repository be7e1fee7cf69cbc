//! Writes take turns by client. A bounded number run at once; the rest wait, each client's in
//! its own queue, and a freed turn goes to the next client with one waiting (round robin), as
//! kube-apiserver's API Priority and Fairness queues requests per flow. A client with
//! thousands of writes queued (a process of simulated kubelets patching pod status) then does
//! not starve one with a few (the DaemonSet controller creating the pods they wait for), and
//! a waiting write holds only its request's bytes. Admitted writes run on the server's write
//! threads ([`super::writers`]).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use tokio::sync::oneshot;

/// Who a request comes from: its connection (every request of an HTTP/2 client shares one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Flow(pub u64);

pub struct FairGate {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    free: usize,
    queues: HashMap<Flow, VecDeque<oneshot::Sender<()>>>,
    /// Flows with a write waiting, in the order their turns come.
    order: VecDeque<Flow>,
}

/// A write's turn; the next waiting one gets it when this is dropped.
pub struct Turn<'g>(&'g FairGate);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.0.pass();
    }
}

/// A waiter given up before its turn came: a turn handed to it meanwhile goes on.
struct Waiting<'g> {
    rx: Option<oneshot::Receiver<()>>,
    gate: &'g FairGate,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some(mut rx) = self.rx.take() {
            rx.close();
            if rx.try_recv().is_ok() {
                self.gate.pass();
            }
        }
    }
}

impl FairGate {
    /// `turns` writes run at once (at least one).
    pub fn new(turns: usize) -> Self {
        FairGate {
            state: Mutex::new(State {
                free: turns.max(1),
                ..State::default()
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for `flow`'s next turn.
    pub async fn turn(&self, flow: Flow) -> Turn<'_> {
        let rx = {
            let mut s = self.lock();
            if s.free > 0 {
                s.free -= 1;
                return Turn(self);
            }
            let (tx, rx) = oneshot::channel();
            let q = s.queues.entry(flow).or_default();
            q.push_back(tx);
            if q.len() == 1 {
                s.order.push_back(flow);
            }
            rx
        };
        let mut w = Waiting {
            rx: Some(rx),
            gate: self,
        };
        if let Some(rx) = w.rx.as_mut() {
            // Err only if the gate is gone with its senders: nothing to wait for.
            let _ = rx.await;
        }
        w.rx = None;
        Turn(self)
    }

    /// A turn ends: to the next flow's first waiter still there, else it is free.
    fn pass(&self) {
        let mut s = self.lock();
        while let Some(flow) = s.order.pop_front() {
            let Some(q) = s.queues.get_mut(&flow) else {
                continue;
            };
            let next = q.pop_front();
            if q.is_empty() {
                s.queues.remove(&flow);
            } else {
                s.order.push_back(flow);
            }
            if let Some(tx) = next
                && tx.send(()).is_ok()
            {
                return;
            }
        }
        s.free += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn a_freed_turn_goes_to_the_next_client_not_the_next_request() {
        let gate = Arc::new(FairGate::new(1));
        let held = gate.turn(Flow(0)).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        // Client 1 queues five writes before client 2 queues one.
        for (i, flow) in [1, 1, 1, 1, 1, 2].into_iter().enumerate() {
            let (gate, order) = (gate.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let _t = gate.turn(Flow(flow)).await;
                order.lock().unwrap().push((flow, i));
                tokio::task::yield_now().await;
            }));
            tokio::task::yield_now().await;
        }
        drop(held);
        for t in tasks {
            t.await.unwrap();
        }
        let order = order.lock().unwrap().clone();
        assert_eq!(order[..2], [(1, 0), (2, 5)], "{order:?}");
        assert_eq!(order.len(), 6);
    }

    #[tokio::test]
    async fn no_more_run_at_once_than_the_turns_and_none_is_lost_to_a_dropped_waiter() {
        let gate = Arc::new(FairGate::new(2));
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for i in 0..40u64 {
            let (gate, running, most) = (gate.clone(), running.clone(), most.clone());
            tasks.push(tokio::spawn(async move {
                let wait = gate.turn(Flow(i % 3));
                // Every fourth gives up waiting almost at once.
                let t = if i % 4 == 0 {
                    match tokio::time::timeout(std::time::Duration::from_millis(1), wait).await {
                        Ok(t) => t,
                        Err(_) => return,
                    }
                } else {
                    wait.await
                };
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                drop(t);
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert!(most.load(Ordering::SeqCst) <= 2);
        // Both turns are free again: two can be taken without waiting.
        let a = tokio::time::timeout(std::time::Duration::from_secs(1), gate.turn(Flow(9))).await;
        let b = tokio::time::timeout(std::time::Duration::from_secs(1), gate.turn(Flow(9))).await;
        assert!(a.is_ok() && b.is_ok());
    }
}
