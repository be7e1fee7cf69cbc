//! What the user watches: a live terminal view (phases with a progress bar, the node × GPU
//! grid, queue shares), or plain lines when stdout is not a terminal (CI, pipes).

use std::io::Write;
use std::time::Duration;

use gantry_sim::ui::{Collector, Snapshot, grid_lines};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// What the scenario reports as it goes.
#[derive(Clone, Debug)]
pub enum Update {
    Phase {
        index: usize,
        total: usize,
        name: String,
    },
    Step(String),
    PhaseDone {
        name: String,
        secs: f64,
    },
}

pub type Reporter = mpsc::UnboundedSender<Update>;

/// Start the view; drop the sender (and await the handle) to finish it.
pub fn spawn(live: bool, collector: Collector) -> (Reporter, JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let task = if live {
        tokio::spawn(live_view(rx, collector))
    } else {
        tokio::spawn(plain_view(rx, collector))
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

async fn plain_view(mut rx: mpsc::UnboundedReceiver<Update>, collector: Collector) {
    let mut out = std::io::stdout();
    let mut last_step = String::new();
    while let Some(u) = rx.recv().await {
        let text = match u {
            Update::Phase { index, total, name } => format!("[{index}/{total}] {name}"),
            // Progress is reported on every poll; a log only wants the changes.
            Update::Step(s) if s == last_step => continue,
            Update::Step(s) => {
                last_step = s.clone();
                format!("      {s}")
            }
            Update::PhaseDone { name, secs } => {
                let s = collector.latest();
                let mut t = format!("      done: {name} ({secs:.1} s)");
                for l in grid_lines(&s, 12).iter().chain(queue_lines(&s).iter()) {
                    t.push_str("\n        ");
                    t.push_str(l);
                }
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
    let mut drawn: u16 = 0;
    let mut tick = tokio::time::interval(Duration::from_millis(300));
    let mut open = true;
    while open {
        tokio::select! {
            u = rx.recv() => match u {
                Some(Update::Phase { total: t, name, .. }) => { total = t; phases.push((name, None)); step.clear(); }
                Some(Update::Step(s)) => step = s,
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
        for (name, secs) in &phases {
            lines.push(match secs {
                Some(t) => format!("  ✓ {name} ({t:.1} s)"),
                None => format!("  ▶ {name} — {step}"),
            });
        }
        let pct = if s.gpus_total == 0 {
            0.0
        } else {
            100.0 * s.gpus_allocated / s.gpus_total as f64
        };
        lines.push(format!("GPUs: {:.1} of {} allocated ({pct:.0}%)   ██ whole  ▒n/▓n shared by n pods  ·· free  XX faulted", s.gpus_allocated, s.gpus_total));
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
