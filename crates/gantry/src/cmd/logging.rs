//! Where the process's log goes: stderr (colour only on a terminal), or a file for
//! `gantry demo`, whose terminal belongs to the story; warnings and errors are counted so the
//! demo can say how many the file holds.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use tracing::{Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

static WARNINGS: AtomicUsize = AtomicUsize::new(0);
static ERRORS: AtomicUsize = AtomicUsize::new(0);

/// Counts the WARN and ERROR events that pass the filter.
struct Count;

impl<S: Subscriber> Layer<S> for Count {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        match *event.metadata().level() {
            Level::ERROR => ERRORS.fetch_add(1, Ordering::Relaxed),
            Level::WARN => WARNINGS.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
    }
}

/// (warnings, errors) logged so far.
pub fn counts() -> (usize, usize) {
    (
        WARNINGS.load(Ordering::Relaxed),
        ERRORS.load(Ordering::Relaxed),
    )
}

/// Install the subscriber. `file`: write the log there (from the start) instead of stderr;
/// if it cannot be opened, say so and log to stderr.
pub fn init(filter: &str, file: Option<&Path>) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|e| {
        eprintln!("--log {filter:?}: {e}; using \"warn\"");
        EnvFilter::new("warn")
    });
    let opened = file.map(|p| {
        std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(p)
            .map_err(|e| {
                eprintln!(
                    "cannot write the log to {}: {e}; logging to stderr",
                    p.display()
                )
            })
    });
    let fmt = match opened {
        Some(Ok(f)) => tracing_subscriber::fmt::layer()
            .with_writer(std::sync::Mutex::new(f))
            .with_ansi(false)
            .boxed(),
        _ => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            // Colour codes only for a terminal: logs piped to a file or CI stay plain text.
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .boxed(),
    };
    tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .with(Count)
        .init();
}
