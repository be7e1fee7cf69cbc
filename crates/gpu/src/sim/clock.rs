//! Time source for the simulator: wall time, or a manual clock that tests advance.

use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug)]
pub enum SimClock {
    Real(Instant),
    Manual(Mutex<Duration>),
}

impl SimClock {
    pub fn real() -> Self {
        SimClock::Real(Instant::now())
    }

    pub fn manual() -> Self {
        SimClock::Manual(Mutex::new(Duration::ZERO))
    }

    /// Time since the simulator started.
    pub fn now(&self) -> Duration {
        match self {
            SimClock::Real(start) => start.elapsed(),
            SimClock::Manual(t) => *t.lock().unwrap_or_else(|e| e.into_inner()),
        }
    }

    /// Advance a manual clock; returns false on a real clock.
    pub fn advance(&self, by: Duration) -> bool {
        match self {
            SimClock::Real(_) => false,
            SimClock::Manual(t) => {
                let mut t = t.lock().unwrap_or_else(|e| e.into_inner());
                *t += by;
                true
            }
        }
    }
}
