//! Waiting for a condition that another task makes true.

use std::fmt;
use std::future::Future;
use std::time::Duration;

/// How often a condition is looked at again.
const POLL: Duration = Duration::from_millis(100);

/// What one look at the condition found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Look<T> {
    /// It holds, with the value the caller wants back.
    Done(T),
    /// Not yet; what was seen instead (reported if the deadline passes).
    Seen(String),
}

/// What a look may return: `bool`, `Option<T>`, `Look<T>`, or a `Result` of any of them (an
/// error is "not yet", and its text is what was seen: a transient API error does not fail
/// the wait, but it is reported if nothing better came after it).
pub trait IntoLook<T> {
    fn into_look(self) -> Look<T>;
}

impl<T> IntoLook<T> for Look<T> {
    fn into_look(self) -> Look<T> {
        self
    }
}

impl IntoLook<()> for bool {
    fn into_look(self) -> Look<()> {
        if self {
            Look::Done(())
        } else {
            Look::Seen("the condition was false".into())
        }
    }
}

impl<T> IntoLook<T> for Option<T> {
    fn into_look(self) -> Look<T> {
        self.map_or_else(|| Look::Seen("nothing yet".into()), Look::Done)
    }
}

impl<T, L: IntoLook<T>, E: fmt::Display> IntoLook<T> for Result<L, E> {
    fn into_look(self) -> Look<T> {
        match self {
            Ok(l) => l.into_look(),
            Err(e) => Look::Seen(format!("error: {e}")),
        }
    }
}

/// A wait that ran out of time, with what the last look saw.
#[derive(Debug, Clone)]
pub struct Timeout {
    pub what: String,
    pub after: Duration,
    pub last_seen: String,
}

impl fmt::Display for Timeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "timed out after {:.1} s waiting for {}; last seen: {}",
            self.after.as_secs_f64(),
            self.what,
            self.last_seen
        )
    }
}

impl std::error::Error for Timeout {}

/// Looks at a condition every 100 ms until it holds or `limit` passes. The last look happens
/// at or after the deadline, so a condition that becomes true just in time is not missed.
pub async fn eventually<T, L, F, Fut>(
    what: &str,
    limit: Duration,
    mut look: F,
) -> Result<T, Timeout>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = L>,
    L: IntoLook<T>,
{
    let start = tokio::time::Instant::now();
    let deadline = start + limit;
    loop {
        let last_seen = match look().await.into_look() {
            Look::Done(v) => return Ok(v),
            Look::Seen(s) => s,
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(Timeout {
                what: what.to_string(),
                after: start.elapsed(),
                last_seen,
            });
        }
        tokio::time::sleep(POLL.min(deadline - tokio::time::Instant::now())).await;
    }
}

/// `eventually` with the limit in seconds.
pub async fn eventually_secs<T, L, F, Fut>(what: &str, secs: u64, look: F) -> Result<T, Timeout>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = L>,
    L: IntoLook<T>,
{
    eventually(what, Duration::from_secs(secs), look).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test]
    async fn returns_the_value_once_the_condition_holds() {
        let n = Arc::new(AtomicU32::new(0));
        let got = eventually("three looks", Duration::from_secs(5), || {
            let n = n.clone();
            async move {
                let v = n.fetch_add(1, Ordering::SeqCst) + 1;
                (v >= 3).then_some(v)
            }
        })
        .await
        .unwrap();
        assert_eq!(got, 3);
    }

    #[tokio::test]
    async fn a_timeout_reports_what_was_last_seen() {
        let n = Arc::new(AtomicU32::new(0));
        let err = eventually("never", Duration::from_millis(500), || {
            let n = n.clone();
            async move {
                let v = n.fetch_add(1, Ordering::SeqCst);
                Look::<()>::Seen(format!("look {v}"))
            }
        })
        .await
        .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("waiting for never"), "{text}");
        // 100 ms polls over 0.5 s: at least the first and the one at the deadline.
        let last: u32 = text.rsplit("look ").next().unwrap().parse().unwrap();
        assert!(
            last >= 2 && last as usize + 1 == n.load(Ordering::SeqCst) as usize,
            "{text}"
        );
    }

    #[tokio::test]
    async fn errors_are_not_yet_and_are_reported() {
        let err = eventually("an API answer", Duration::from_millis(300), || async {
            Err::<bool, _>("connection refused")
        })
        .await
        .unwrap_err();
        assert!(
            err.to_string().contains("error: connection refused"),
            "{err}"
        );
        let ok: () = eventually_secs("true", 1, || async { Ok::<_, String>(true) })
            .await
            .unwrap();
        assert_eq!(ok, ());
    }
}
