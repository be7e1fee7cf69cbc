//! Warnings from periodic work, rate-limited and aggregated. An agent that retries every
//! second logs the first failure at once, then at most one line per window for the same kind
//! of failure, saying how many it left out. The limit is per process and per kind, so where
//! many agents share a process (the simulated cluster runs thousands of nodes' exporters in
//! one) a slow machine gives one line per window, not one per agent per round.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

/// One line per kind of warning this often, at most.
pub const WINDOW: Duration = Duration::from_secs(10);

/// When a kind of warning was last logged and how many were left out since.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    logged_at: Option<Instant>,
    suppressed: u64,
}

impl Window {
    pub const fn new() -> Self {
        Window {
            logged_at: None,
            suppressed: 0,
        }
    }

    /// One more occurrence at `now`: `Some(left_out)` when it is to be logged (with the count
    /// of those left out since the last logged one), `None` when it is left out.
    pub fn admit(&mut self, now: Instant, every: Duration) -> Option<u64> {
        match self.logged_at {
            Some(at) if now.saturating_duration_since(at) < every => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.logged_at = Some(now);
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }
}

impl Default for Window {
    fn default() -> Self {
        Self::new()
    }
}

static WINDOWS: LazyLock<Mutex<HashMap<&'static str, Window>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// Whether a warning of kind `key` is to be logged now, and how many of that kind were left
/// out since the last one (process-wide, [`WINDOW`]).
pub fn admit(key: &'static str) -> Option<u64> {
    let mut w = WINDOWS.lock().unwrap_or_else(|p| p.into_inner());
    w.entry(key).or_default().admit(Instant::now(), WINDOW)
}

/// `tracing::warn!` of kind `key`, rate-limited and aggregated as the module says.
#[macro_export]
macro_rules! warn_limited {
    ($key:expr, $($arg:tt)+) => {
        if let Some(left_out) = $crate::warn_limit::admit($key) {
            tracing::warn!(similar_left_out = left_out, $($arg)+);
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_is_logged_then_one_per_window_with_the_count_left_out() {
        let t0 = Instant::now();
        let every = Duration::from_secs(10);
        let mut w = Window::new();
        assert_eq!(w.admit(t0, every), Some(0));
        for s in 1..10 {
            assert_eq!(w.admit(t0 + Duration::from_secs(s), every), None);
        }
        assert_eq!(w.admit(t0 + Duration::from_secs(10), every), Some(9));
        assert_eq!(w.admit(t0 + Duration::from_secs(11), every), None);
        assert_eq!(w.admit(t0 + Duration::from_secs(25), every), Some(1));
    }

    #[test]
    fn kinds_are_limited_apart() {
        assert_eq!(admit("warn_limit test a"), Some(0));
        assert_eq!(admit("warn_limit test a"), None);
        assert_eq!(admit("warn_limit test b"), Some(0));
    }
}
