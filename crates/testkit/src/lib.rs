//! Test support shared by every crate's tests.
//!
//! The one rule it enforces: an assertion about something another task writes (a label, an
//! event, a status, a metric) waits for it with a deadline, never assumes the order of two
//! writes, and on timeout says what it last saw. `eventually` is the one way to do that.

mod wait;

pub use wait::{IntoLook, Look, Timeout, eventually, eventually_secs};
