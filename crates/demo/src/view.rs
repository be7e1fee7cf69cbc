//! What the user watches: a live terminal view (phases with a progress bar, the node × GPU
//! grid, queue shares), or plain lines when stdout is not a terminal (CI, pipes). Plain
//! output draws the frames the scenario hands over: each one is the cluster as read when
//! the phase's claim had been checked, so the picture matches the sentence above it.

use std::io::Write;
use std::time::{Duration, Instant};

use gantry_sim::ui::{Collector, Snapshot, grid_lines};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// What the grid's cells mean (printed once above the first plain frame, and in the live
/// view's header).
pub const LEGEND: &str = "one cell per GPU: ██ whole GPU  ▒n n pods share it  ▓n shared, fully used  ·· free  XX faulted";

/// What the scenario reports as it goes.
#[derive(Clone, Debug)]
pub enum Update {
    Phase {
        index: usize,
        total: usize,
        name: String,
    },
    /// A line worth keeping (plain output prints each one once).
    Step(String),
    /// A passing detail of a wait (live view only).
    Progress(String),
    /// A picture of the cluster in the middle of a phase, with what it shows.
    Frame {
        caption: String,
        snapshot: Box<Snapshot>,
    },
    PhaseDone {
        name: String,
        secs: f64,
        snapshot: Box<Snapshot>,
    },
}

pub type Reporter = mpsc::UnboundedSender<Update>;

/// Start the view; drop the sender (and await the handle) to finish it.
pub fn spawn(live: bool, collector: Collector) -> (Reporter, JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let task = if live {
        tokio::spawn(live_view(rx, collector))
    } else {
        tokio::spawn(plain_view(rx))
    };
    (tx, task)
}

fn queue_lines(s: &Snapshot) -> Vec<String> {
    s.queues
        .iter()
        .filter(|q| q.parent.is_some())
        .map(|q| {
            let fs = q
                .fair_share
                .map(|v| format!("{v:.1}"))
                .unwrap_or_else(|| "-".into());
            format!(
                "  queue {:<10} allocated {:>5.1}  fair share {:>5}  pending pods {}",
                q.name, q.allocated, fs, q.pending_pods
            )
        })
        .collect()
}

/// A frame as plain text lines: the grid, then the queues.
pub fn frame_lines(s: &Snapshot) -> Vec<String> {
    grid_lines(s, 16)
        .into_iter()
        .chain(queue_lines(s))
        .collect()
}

async fn plain_view(mut rx: mpsc::UnboundedReceiver<Update>) {
    let mut out = std::io::stdout();
    let mut last_step = String::new();
    let mut legend_shown = false;
    let mut frame = |s: &Snapshot, t: &mut String| {
        if !legend_shown {
            t.push_str("\n        (");
            t.push_str(LEGEND);
            t.push(')');
            legend_shown = true;
        }
        for l in frame_lines(s) {
            t.push_str("\n        ");
            t.push_str(&l);
        }
    };
    while let Some(u) = rx.recv().await {
        let text = match u {
            Update::Phase { index, total, name } => format!("[{index}/{total}] {name}"),
            Update::Step(s) if s == last_step => continue,
            Update::Step(s) => {
                last_step = s.clone();
                format!("      {s}")
            }
            Update::Progress(_) => continue,
            Update::Frame { caption, snapshot } => {
                let mut t = format!("      {caption}:");
                frame(&snapshot, &mut t);
                t
            }
            Update::PhaseDone {
                name,
                secs,
                snapshot,
            } => {
                let mut t = format!("      done: {name} ({secs:.1} s)");
                frame(&snapshot, &mut t);
                t
            }
        };
        let _ = writeln!(out, "{text}");
    }
    let _ = out.flush();
}

fn bar(done: usize, total: usize, width: usize) -> String {
    let filled = (done * width).checked_div(total).unwrap_or(0).min(width);
    format!("[{}{}]", "#".repeat(filled), "-".repeat(width - filled))
}

async fn live_view(mut rx: mpsc::UnboundedReceiver<Update>, collector: Collector) {
    use crossterm::{QueueableCommand, cursor, terminal};
    let mut out = std::io::stdout();
    let mut phases: Vec<(String, Option<f64>)> = Vec::new();
    let mut total = 0;
    let mut step = String::new();
    let mut progress = String::new();
    let mut phase_started = Instant::now();
    let mut drawn: u16 = 0;
    let mut tick = tokio::time::interval(Duration::from_millis(300));
    let mut open = true;
    while open {
        tokio::select! {
            u = rx.recv() => match u {
                Some(Update::Phase { total: t, name, .. }) => {
                    total = t;
                    phases.push((name, None));
                    step.clear();
                    progress.clear();
                    phase_started = Instant::now();
                }
                Some(Update::Step(s)) => { step = s; progress.clear(); }
                Some(Update::Progress(p)) => progress = p,
                Some(Update::Frame { .. }) => {}
                Some(Update::PhaseDone { secs, .. }) => { if let Some(p) = phases.last_mut() { p.1 = Some(secs); } }
                None => open = false,
            },
            _ = tick.tick() => {}
        }
        let s = collector.latest();
        let done = phases.iter().filter(|p| p.1.is_some()).count();
        let mut lines = vec![format!(
            "Gantry demo {} {done}/{total} phases",
            bar(done, total, 30)
        )];
        let waited = phase_started.elapsed().as_secs();
        for (name, secs) in &phases {
            lines.push(match secs {
                Some(t) => format!("  ✓ {name} ({t:.1} s)"),
                // A wait longer than a second shows its clock and what it is waiting for.
                None if waited >= 1 => format!("  ▶ {name} — {step} ({waited} s) {progress}"),
                None => format!("  ▶ {name} — {step}"),
            });
        }
        let pct = if s.gpus_total == 0 {
            0.0
        } else {
            100.0 * s.gpus_allocated / s.gpus_total as f64
        };
        lines.push(format!(
            "GPUs in use: {:.1} of {} ({pct:.0}%)   {LEGEND}",
            s.gpus_allocated, s.gpus_total
        ));
        lines.extend(grid_lines(&s, 14).into_iter().map(|l| format!("  {l}")));
        lines.extend(queue_lines(&s));
        let _ = out.queue(cursor::MoveToPreviousLine(drawn));
        let _ = out.queue(terminal::Clear(terminal::ClearType::FromCursorDown));
        for l in &lines {
            let _ = writeln!(out, "{l}");
        }
        let _ = out.flush();
        drawn = lines.len() as u16;
    }
}
