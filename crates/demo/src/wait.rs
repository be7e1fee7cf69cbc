//! Waiting for the cluster to reach a state, with a deadline and a clear message when it
//! does not.

use std::future::Future;
use std::time::Duration;

use crate::DemoError;

const POLL: Duration = Duration::from_millis(400);

/// Poll `check` until it returns `Ok(Some(v))`. `Ok(None)` means "not yet" and carries on;
/// the last "not yet" reason (from `progress`) goes into the timeout error.
pub async fn until<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T, DemoError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Progress<T>, DemoError>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last;
    loop {
        match check().await? {
            Progress::Done(v) => return Ok(v),
            Progress::NotYet(why) => last = why,
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(DemoError::Timeout {
                what: what.to_string(),
                secs: timeout.as_secs(),
                last,
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

pub enum Progress<T> {
    Done(T),
    NotYet(String),
}
