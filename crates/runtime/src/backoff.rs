//! What a loop does after a failed round: wait a capped, jittered, doubling delay before the
//! next try (so a broken API server or a bad object is not hammered), and log the failures
//! rate-limited (the first of a streak at once, then one line per [`LOG_EVERY`] with the count
//! left out, and one line when the loop recovers). Pure: the caller passes the time and the
//! jitter, so the rules are unit-tested without clocks.

use std::time::{Duration, Instant};

/// The delay after the first failure of a streak.
pub const INITIAL: Duration = Duration::from_secs(1);
/// The delay never grows past this.
pub const MAX: Duration = Duration::from_secs(60);
/// A failing loop logs one warning this often, at most.
pub const LOG_EVERY: Duration = Duration::from_secs(60);
/// The jitter takes up to this share off a delay, so loops that failed together (one API
/// server outage) do not retry in step.
pub const JITTER: f64 = 0.2;

/// Capped exponential backoff: `initial`, doubling per consecutive failure, up to `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: INITIAL,
            max: MAX,
        }
    }
}

impl Backoff {
    /// The delay after the `streak`-th consecutive failure (1 for the first), with `jitter`
    /// in `[0, 1)` taking up to [`JITTER`] of it off.
    pub fn delay(&self, streak: u32, jitter: f64) -> Duration {
        let doublings = streak.saturating_sub(1).min(31);
        let full = self.initial.saturating_mul(1 << doublings).min(self.max);
        full.mul_f64(1.0 - JITTER * jitter.clamp(0.0, 1.0))
    }
}

/// A loop's failure streak and what of it has been logged.
#[derive(Debug, Default)]
pub struct Failures {
    streak: u32,
    logged_at: Option<Instant>,
    left_out: u64,
}

/// What to log about a failure (the caller logs, with its loop's name and error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// Warn: the `streak`-th failure in a row, `left_out` of them not logged since the last line.
    Warn { streak: u32, left_out: u64 },
    /// Within [`LOG_EVERY`] of the last line: debug only.
    Quiet { streak: u32 },
}

impl Failures {
    /// One more failure at `now`: its place in the streak and whether to warn.
    pub fn failed(&mut self, now: Instant) -> Report {
        self.streak = self.streak.saturating_add(1);
        match self.logged_at {
            Some(at) if now.saturating_duration_since(at) < LOG_EVERY => {
                self.left_out += 1;
                Report::Quiet {
                    streak: self.streak,
                }
            }
            _ => {
                self.logged_at = Some(now);
                Report::Warn {
                    streak: self.streak,
                    left_out: std::mem::take(&mut self.left_out),
                }
            }
        }
    }

    /// A round succeeded: the streak ends. Returns how many failures it had (0: none).
    pub fn succeeded(&mut self) -> u32 {
        let streak = std::mem::take(&mut self.streak);
        self.logged_at = None;
        self.left_out = 0;
        streak
    }

    /// Consecutive failures so far.
    pub fn streak(&self) -> u32 {
        self.streak
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_doubles_from_one_second_to_a_minute() {
        let b = Backoff::default();
        let secs: Vec<u64> = (1..=9).map(|n| b.delay(n, 0.0).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(b.delay(u32::MAX, 0.0), MAX, "no overflow on a long streak");
    }

    #[test]
    fn jitter_takes_at_most_a_fifth_off_and_never_exceeds_the_cap() {
        let b = Backoff::default();
        assert_eq!(b.delay(1, 0.5), Duration::from_millis(900));
        assert_eq!(b.delay(7, 0.999_999).as_secs(), 48);
        for j in [0.0, 0.3, 0.7, 1.0, 7.0, -1.0] {
            let d = b.delay(20, j);
            assert!(d <= MAX && d >= MAX.mul_f64(1.0 - JITTER), "{d:?}");
        }
    }

    #[test]
    fn the_first_failure_warns_then_one_line_a_minute_with_the_count_left_out() {
        let t0 = Instant::now();
        let mut f = Failures::default();
        assert_eq!(
            f.failed(t0),
            Report::Warn {
                streak: 1,
                left_out: 0
            }
        );
        assert_eq!(
            f.failed(t0 + Duration::from_secs(1)),
            Report::Quiet { streak: 2 }
        );
        assert_eq!(
            f.failed(t0 + Duration::from_secs(3)),
            Report::Quiet { streak: 3 }
        );
        assert_eq!(
            f.failed(t0 + LOG_EVERY),
            Report::Warn {
                streak: 4,
                left_out: 2
            }
        );
        assert_eq!(f.succeeded(), 4);
        assert_eq!(f.streak(), 0);
        // A new streak warns at once again.
        assert_eq!(
            f.failed(t0 + LOG_EVERY + Duration::from_secs(1)),
            Report::Warn {
                streak: 1,
                left_out: 0
            }
        );
    }
}
