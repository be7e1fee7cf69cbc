//! Container logs of simulated pods: what `kubectl logs` reads. An in-process agent's
//! `tracing` events (INFO and above) are its container's output: the kubelet runs the agent's
//! future under [`capture`], which records each event into that container's bounded buffer
//! and still hands it to the subscriber that was in charge (so `gantry up` prints as before).
//!
//! Buffers are keyed by pod uid (unique in the process, so several clusters in one process
//! never mix) and container name; the current and the previous run of each container are
//! kept, as the kubelet keeps the previous container's log for `--previous`.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use tracing::field::{Field, Visit};
use tracing::instrument::WithSubscriber;
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Dispatch, Event, Level, Metadata, Subscriber};

/// Lines kept per container run; older lines are dropped first.
pub const MAX_LINES: usize = 2000;
/// Longest line kept (longer ones are cut, as a log rotation would not, but memory matters more).
const MAX_LINE_BYTES: usize = 4096;

/// One logged line and when it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub time: chrono::DateTime<chrono::Utc>,
    pub text: String,
}

/// One run of a container.
#[derive(Debug, Default)]
struct Run {
    /// Sequence number of `lines[0]`.
    first: u64,
    lines: VecDeque<Line>,
    ended: bool,
}

#[derive(Debug, Default)]
struct Runs {
    /// Increases with each run, so a follower notices a restart.
    generation: u64,
    current: Option<Run>,
    previous: Option<Run>,
}

/// The log of one container: its current and previous runs.
#[derive(Debug)]
pub struct ContainerLog {
    runs: Mutex<Runs>,
    changed: tokio::sync::watch::Sender<u64>,
}

impl Default for ContainerLog {
    fn default() -> Self {
        Self {
            runs: Mutex::new(Runs::default()),
            changed: tokio::sync::watch::channel(0).0,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl ContainerLog {
    fn bump(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    /// A new run starts: the current one becomes the previous.
    fn start_run(&self) {
        let mut r = lock(&self.runs);
        r.generation += 1;
        r.previous = r.current.take().map(|mut p| {
            p.ended = true;
            p
        });
        r.current = Some(Run::default());
        drop(r);
        self.bump();
    }

    /// Appends a line to the current run.
    pub fn push(&self, text: String) {
        let mut text = text;
        if text.len() > MAX_LINE_BYTES {
            let mut cut = MAX_LINE_BYTES;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
        }
        let mut r = lock(&self.runs);
        let Some(run) = r.current.as_mut() else {
            return;
        };
        run.lines.push_back(Line {
            time: chrono::Utc::now(),
            text,
        });
        if run.lines.len() > MAX_LINES {
            run.lines.pop_front();
            run.first += 1;
        }
        drop(r);
        self.bump();
    }

    /// The current run has ended (the container exited).
    pub fn end_run(&self) {
        if let Some(run) = lock(&self.runs).current.as_mut() {
            run.ended = true;
        }
        self.bump();
    }

    /// The lines of the current run, or with `previous` of the last run that ended (the
    /// current one while a crashed container waits to restart); None if there is none.
    pub fn snapshot(&self, previous: bool) -> Option<Snapshot> {
        let r = lock(&self.runs);
        let run = match (&r.current, previous) {
            (Some(c), true) if c.ended => Some(c),
            (_, true) => r.previous.as_ref(),
            (c, false) => c.as_ref(),
        }?;
        Some(Snapshot {
            generation: r.generation,
            next: run.first + run.lines.len() as u64,
            lines: run.lines.iter().cloned().collect(),
        })
    }

    /// Lines of run `generation` from sequence `from`, and whether that run is over (ended,
    /// replaced by a restart, or its pod gone).
    pub fn since(&self, generation: u64, from: u64) -> (Vec<Line>, u64, bool) {
        let r = lock(&self.runs);
        let Some(run) = r.current.as_ref().filter(|_| r.generation == generation) else {
            return (Vec::new(), from, true);
        };
        let skip = from.saturating_sub(run.first) as usize;
        let lines: Vec<Line> = run.lines.iter().skip(skip).cloned().collect();
        let next = run.first + run.lines.len() as u64;
        (lines, next, run.ended)
    }

    /// Wakes when anything changes.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }
}

/// The lines of one run at one moment, and where a follower continues.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub generation: u64,
    pub next: u64,
    pub lines: Vec<Line>,
}

type Key = (String, String);
static HUB: LazyLock<Mutex<HashMap<Key, Arc<ContainerLog>>>> = LazyLock::new(Default::default);

/// The log of container `container` of the pod with `uid`, if it ever ran here.
pub fn get(uid: &str, container: &str) -> Option<Arc<ContainerLog>> {
    lock(&HUB)
        .get(&(uid.to_string(), container.to_string()))
        .cloned()
}

/// A container of pod `uid` starts a run; its log (created on the first run).
pub fn start(uid: &str, container: &str) -> Arc<ContainerLog> {
    let log = lock(&HUB)
        .entry((uid.to_string(), container.to_string()))
        .or_default()
        .clone();
    log.start_run();
    log
}

/// Forgets the logs of pod `uid` when dropped (the pod is gone from its node). Followers see
/// their run end.
pub struct PodLogs(pub String);

impl Drop for PodLogs {
    fn drop(&mut self) {
        let gone: Vec<Arc<ContainerLog>> = {
            let mut hub = lock(&HUB);
            let keys: Vec<Key> = hub.keys().filter(|k| k.0 == self.0).cloned().collect();
            keys.iter().filter_map(|k| hub.remove(k)).collect()
        };
        for log in gone {
            lock(&log.runs).current = None;
            log.bump();
        }
    }
}

/// Runs `fut` with its `tracing` events recorded into `log` (INFO and above), and passed on
/// to the subscriber in charge where it enables them.
pub fn capture<F: Future>(log: Arc<ContainerLog>, fut: F) -> impl Future<Output = F::Output> {
    let forward = tracing::dispatcher::get_default(Dispatch::clone);
    let scope = Scope { log, forward };
    SCOPE.scope(scope, fut).with_subscriber(CAPTURE.clone())
}

#[derive(Clone)]
struct Scope {
    log: Arc<ContainerLog>,
    forward: Dispatch,
}

tokio::task_local! {
    static SCOPE: Scope;
}

/// One dispatcher for every container (registering a dispatcher costs a pass over every
/// callsite; one per container would not scale to a thousand nodes).
static CAPTURE: LazyLock<Dispatch> = LazyLock::new(|| Dispatch::new(Capture::default()));

/// The subscriber agents run under: records events into the task's container log and
/// forwards them. Spans are not tracked (a log line is the event and its fields).
#[derive(Default)]
struct Capture {
    next_span: AtomicU64,
}

fn captured(meta: &Metadata<'_>) -> bool {
    meta.is_event() && *meta.level() <= Level::INFO
}

impl Subscriber for Capture {
    fn register_callsite(&self, meta: &'static Metadata<'static>) -> Interest {
        if captured(meta) {
            Interest::sometimes()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, meta: &Metadata<'_>) -> bool {
        meta.is_event()
            && (captured(meta) || SCOPE.try_with(|s| s.forward.enabled(meta)).unwrap_or(false))
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        // Forwarded events above INFO are enabled by the forwarded-to subscriber's own hint.
        Some(tracing::level_filters::LevelFilter::INFO)
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        // Far from the ids a registry hands out, should one be seen by the forwarded-to
        // subscriber as an event's parent.
        Id::from_u64((1 << 62) + self.next_span.fetch_add(1, Ordering::Relaxed))
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let _ = SCOPE.try_with(|s| {
            if captured(event.metadata()) {
                s.log.push(format_event(event));
            }
            if s.forward.enabled(event.metadata()) {
                s.forward.event(event);
            }
        });
    }
}

/// `LEVEL target: message key=value …`, as tracing's default format writes it.
pub fn format_event(event: &Event<'_>) -> String {
    #[derive(Default)]
    struct V {
        message: String,
        fields: String,
    }
    impl Visit for V {
        fn record_str(&mut self, f: &Field, v: &str) {
            if f.name() == "message" {
                self.message = v.to_string();
            } else {
                self.fields.push_str(&format!(" {}={v}", f.name()));
            }
        }
        fn record_debug(&mut self, f: &Field, v: &dyn std::fmt::Debug) {
            if f.name() == "message" {
                self.message = format!("{v:?}");
            } else {
                self.fields.push_str(&format!(" {}={v:?}", f.name()));
            }
        }
    }
    let mut v = V::default();
    event.record(&mut v);
    let m = event.metadata();
    format!(
        "{} {:>5} {}: {}{}",
        chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.6fZ"),
        m.level(),
        m.target(),
        v.message,
        v.fields
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn captures_a_runs_events_keeps_the_previous_run_and_bounds_lines() {
        let uid = uuid::Uuid::new_v4().to_string();
        let _gone = PodLogs(uid.clone());
        let log = start(&uid, "agent");
        capture(log.clone(), async {
            tracing::info!(devices = 8, "registered with the kubelet");
            tracing::debug!("not kept");
        })
        .await;
        // Outside the capture: not this container's output.
        tracing::info!("elsewhere");
        let s = log.snapshot(false).expect("current run");
        assert_eq!(s.lines.len(), 1, "{s:?}");
        assert!(
            s.lines[0]
                .text
                .ends_with("INFO gantry_sim::logs::tests: registered with the kubelet devices=8"),
            "{:?}",
            s.lines[0]
        );
        assert!(log.snapshot(true).is_none(), "running, never restarted");
        log.end_run();
        // Crashed, waiting to restart: its run is the previous one already.
        assert_eq!(log.snapshot(true).map(|s| s.lines.len()), Some(1));
        let restarted = start(&uid, "agent");
        assert!(Arc::ptr_eq(&log, &restarted));
        assert_eq!(restarted.snapshot(true).map(|s| s.lines.len()), Some(1));
        assert_eq!(restarted.snapshot(false).map(|s| s.lines.len()), Some(0));
        for i in 0..MAX_LINES + 5 {
            restarted.push(format!("line {i}"));
        }
        let s = restarted.snapshot(false).expect("run");
        assert_eq!(s.lines.len(), MAX_LINES);
        assert_eq!(s.lines[0].text, "line 5");
        // A follower of the old run learns it is over; of the new one, reads from its seq.
        assert!(restarted.since(s.generation - 1, 0).2);
        let (lines, next, ended) = restarted.since(s.generation, s.next - 2);
        assert_eq!((lines.len(), next, ended), (2, s.next, false));
        drop(_gone);
        assert!(get(&uid, "agent").is_none());
        assert!(restarted.since(s.generation, 0).2);
    }
}
