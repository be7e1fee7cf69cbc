//! `gantry bench schedule --protocol paper`: the FGD paper's protocol on published trace
//! files, several seeds per trace, every policy on the same arrival streams; medians and
//! min–max printed beside the paper's own figures when its result table is given.

use crate::replay::{LEVELS, MixMode, Streams, paired, run, seed_streams, spread};
use crate::workload::trace::{TraceError, read_trace_nodes, read_trace_pods, to_shapes};
use gantry_scheduler::gpushare::{NodeSpec, PodShape, SharePolicy};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct PaperOptions {
    pub nodes: PathBuf,
    pub pods: Vec<PathBuf>,
    pub policies: Vec<SharePolicy>,
    /// Seeds `first_seed .. first_seed + seeds` (the paper: 42..=51).
    pub first_seed: u64,
    pub seeds: u64,
    /// Workload size as a multiple of GPU capacity (the paper: 1.3).
    pub tune_ratio: f64,
    /// The paper's result table (`fgd-paper-results.md` layout), printed alongside.
    pub paper_results: Option<PathBuf>,
    pub streams: Streams,
    /// What FGD and Gantry know of the workload, each a row of its own: the whole trace in
    /// advance (`oracle`, the paper's setting), the arrivals so far (`online[:N]`, the
    /// product's, N arrivals a scheduling cycle).
    pub mixes: Vec<MixMode>,
}

/// A row's name: the policy's, with `/online` when it scored against the online mix.
pub fn row_name(policy: SharePolicy, mode: MixMode) -> String {
    match mode {
        MixMode::Online { .. } if policy.uses_mix() => {
            format!("{}/{}", policy.name(), mode.name())
        }
        _ => policy.name().to_string(),
    }
}

/// The paper's (median, min, max) at each level, by (trace, policy).
pub type PaperFigures = BTreeMap<(String, String), [(f64, f64, f64); 3]>;

/// Figures of one policy on one trace: per level, the per-seed values.
#[derive(Clone, Debug, Default)]
pub struct Cell {
    pub per_level: [Vec<f64>; 3],
    pub placements: usize,
    pub elapsed: Duration,
}

#[derive(Clone, Debug, Default)]
pub struct PaperReport {
    pub seeds: u64,
    /// (trace name, policy name) -> figures, traces in the order given.
    pub rows: Vec<(String, String, Cell)>,
    pub paper: PaperFigures,
}

#[derive(Debug, thiserror::Error)]
pub enum PaperError {
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error("{file}: cannot read: {source}")]
    Read {
        file: String,
        source: std::io::Error,
    },
    #[error("{file}:{line}: {message}")]
    Results {
        file: String,
        line: usize,
        message: String,
    },
}

/// The trace's name: the pod file's stem (`openb_pod_list_default`).
pub fn trace_name(p: &Path) -> String {
    p.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

pub fn run_paper(opts: &PaperOptions) -> Result<PaperReport, PaperError> {
    // In name order, as the simulator sorts them before drawing.
    let mut nodes = read_trace_nodes(&opts.nodes)?;
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    let mut report = PaperReport {
        seeds: opts.seeds,
        ..Default::default()
    };
    if let Some(p) = &opts.paper_results {
        report.paper = read_paper_results(p)?;
    }
    for file in &opts.pods {
        let mut pods = read_trace_pods(file)?;
        pods.sort_by(|a, b| a.name.cmp(&b.name));
        let (specs, shapes) = to_shapes(&nodes, &pods);
        let name = trace_name(file);
        for (row, cell) in run_trace(&specs, &shapes, opts) {
            report.rows.push((name.clone(), row, cell));
        }
    }
    Ok(report)
}

/// Every policy, under each mix mode where it scores against a mix, on the same arrival
/// streams, one per seed. Rows are named by [`row_name`].
pub fn run_trace(
    specs: &[NodeSpec],
    shapes: &[PodShape],
    opts: &PaperOptions,
) -> Vec<(String, Cell)> {
    let capacity: i64 = specs.iter().map(|s| i64::from(s.gpus) * 1000).sum();
    let mut runs: Vec<(SharePolicy, MixMode)> = Vec::new();
    for &p in &opts.policies {
        let mut modes = opts.mixes.clone();
        if modes.is_empty() || !p.uses_mix() {
            modes = vec![MixMode::Oracle];
        }
        for m in modes {
            if !runs.contains(&(p, m)) {
                runs.push((p, m));
            }
        }
    }
    let mut cells: Vec<Cell> = vec![Cell::default(); runs.len()];
    for seed in opts.first_seed..opts.first_seed + opts.seeds {
        let (arrivals, nodes) =
            seed_streams(opts.streams, shapes, specs, capacity, opts.tune_ratio, seed);
        for (&(policy, mode), cell) in runs.iter().zip(cells.iter_mut()) {
            let f = run(policy, mode, &nodes, &arrivals, shapes, seed, true, None);
            for (i, v) in f.unalloc.iter().enumerate() {
                if let Some(v) = v {
                    cell.per_level[i].push(*v);
                }
            }
            cell.placements += f.arrived;
            cell.elapsed += f.elapsed;
        }
    }
    runs.iter()
        .map(|&(p, m)| row_name(p, m))
        .zip(cells)
        .collect()
}

/// The paper's figures from a `fgd-paper-results.md`-style table: rows of `trace
/// NN-Policy seeds med [min-max] med [min-max] med [min-max]`.
pub fn read_paper_results(path: &Path) -> Result<PaperFigures, PaperError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| PaperError::Read {
        file: file.clone(),
        source,
    })?;
    parse_paper_results(&file, &text)
}

pub fn parse_paper_results(file: &str, text: &str) -> Result<PaperFigures, PaperError> {
    let mut out = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let mut words = line.split_whitespace();
        let (Some(trace), Some(policy)) = (words.next(), words.next()) else {
            continue;
        };
        // Data rows start with a trace name and an `NN-Policy` column.
        let Some((num, name)) = policy.split_once('-') else {
            continue;
        };
        if !trace.starts_with("openb") || num.parse::<u32>().is_err() {
            continue;
        }
        let rest: String = words
            .skip(1)
            .collect::<Vec<_>>()
            .join(" ")
            .replace(['[', ']'], " ")
            .replace('-', " ");
        let nums: Result<Vec<f64>, _> = rest.split_whitespace().map(str::parse::<f64>).collect();
        let bad = |message: String| PaperError::Results {
            file: file.to_string(),
            line: i + 1,
            message,
        };
        let nums = nums.map_err(|e| bad(format!("not a number: {e}")))?;
        if nums.len() != 9 {
            return Err(bad(format!("expected 9 figures, found {}", nums.len())));
        }
        let f = |k: usize| (nums[3 * k], nums[3 * k + 1], nums[3 * k + 2]);
        out.insert((trace.to_string(), name.to_string()), [f(0), f(1), f(2)]);
    }
    Ok(out)
}

fn fmt_spread(v: Option<(f64, f64, f64)>) -> String {
    v.map_or("-".into(), |(m, lo, hi)| {
        format!("{m:6.2} [{lo:5.2}-{hi:5.2}]")
    })
}

impl PaperReport {
    /// Median at 100 % arrived, per (trace, policy).
    pub fn median_at_100(&self, trace: &str, policy: &str) -> Option<f64> {
        self.rows
            .iter()
            .find(|(t, p, _)| t == trace && p == policy)
            .and_then(|(_, _, c)| spread(&c.per_level[2]))
            .map(|s| s.0)
    }
}

impl fmt::Display for PaperReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let levels: Vec<String> = LEVELS.iter().map(|l| format!("unalloc@{l}")).collect();
        writeln!(
            f,
            "{:<28} {:<14} {:>5} {:>21} {:>21} {:>21} {:>21} {:>10}",
            "trace",
            "policy",
            "seeds",
            levels[0],
            levels[1],
            levels[2],
            "paper unalloc@100",
            "place/s"
        )?;
        for (trace, policy, c) in &self.rows {
            let paper = self
                .paper
                .get(&(trace.clone(), policy.clone()))
                .map(|v| v[2]);
            writeln!(
                f,
                "{:<28} {:<14} {:>5} {:>21} {:>21} {:>21} {:>21} {:>10.0}",
                trace,
                policy,
                c.per_level[2].len(),
                fmt_spread(spread(&c.per_level[0])),
                fmt_spread(spread(&c.per_level[1])),
                fmt_spread(spread(&c.per_level[2])),
                fmt_spread(paper),
                c.placements as f64 / c.elapsed.as_secs_f64().max(1e-9),
            )?;
        }
        self.fmt_paired(f)
    }
}

impl PaperReport {
    /// Gantry's rows (oracle and online mix) against every other row, seed by seed at 100 %:
    /// medians of a few seeds move with the seeds, the paired difference shows which is lower.
    fn fmt_paired(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let gantry = SharePolicy::Gantry.name();
        let is_gantry = |p: &str| p.split('/').next() == Some(gantry);
        let mut header = false;
        for (trace, row, g) in self.rows.iter().filter(|r| is_gantry(&r.1)) {
            for (_, policy, c) in self.rows.iter().filter(|r| &r.0 == trace && &r.1 != row) {
                let Some(d) = paired(&g.per_level[2], &c.per_level[2]) else {
                    continue;
                };
                if !header {
                    writeln!(
                        f,
                        "\nGantry - policy at 100 %, paired by seed: mean ± standard error, seeds where Gantry is lower"
                    )?;
                    header = true;
                }
                writeln!(
                    f,
                    "{:<28} {:<14} {:<14} {:>+7.3} ± {:.3} {:>5}/{}",
                    trace, row, policy, d.mean, d.std_err, d.lower, d.seeds
                )?;
            }
        }
        self.fmt_against_paper(f)
    }

    /// Gantry's rows against the paper's FGD median at each level: `x <= y` or `x > y`.
    fn fmt_against_paper(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let gantry = SharePolicy::Gantry.name();
        let mut header = false;
        for (trace, row, c) in &self.rows {
            if row.split('/').next() != Some(gantry) {
                continue;
            }
            let Some(fgd) = self.paper.get(&(trace.clone(), "FGD".to_string())) else {
                continue;
            };
            if !header {
                writeln!(
                    f,
                    "\nGantry against the paper's FGD, medians at 90 / 95 / 100 %"
                )?;
                header = true;
            }
            write!(f, "{trace:<28} {row:<14}")?;
            for (i, paper) in fgd.iter().enumerate() {
                match spread(&c.per_level[i]) {
                    Some((m, _, _)) => {
                        // Both to the two decimals printed, so equal figures compare equal.
                        let op = if (m * 100.0).round() <= (paper.0 * 100.0).round() {
                            "<="
                        } else {
                            "> "
                        };
                        write!(f, "  {m:6.2} {op} {:6.2}", paper.0)?;
                    }
                    None => write!(f, "  {:>16}", "-")?,
                }
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_paper_table_layout() {
        let text = "intro\n```\ntrace policy seeds unalloc@90 med[min-max]\n\
            openb_pod_list_default       05-BestFit           10     9.99 [ 9.96-10.06]     7.14 [ 6.97- 7.38]     7.09 [ 6.96- 7.36]\n```\n";
        let m = parse_paper_results("r.md", text).unwrap();
        let v = m[&("openb_pod_list_default".into(), "BestFit".into())];
        assert_eq!(v[2], (7.09, 6.96, 7.36));
        let bad = "openb_x 01-Random 10 1.0 [1.0-2.0]\n";
        let e = parse_paper_results("r.md", bad).unwrap_err().to_string();
        assert!(e.starts_with("r.md:1:"), "{e}");
    }

    #[test]
    fn the_report_pairs_gantry_with_each_policy_seed_by_seed() {
        use gantry_scheduler::gpushare::ModelSet;
        // 100 GPUs and no pod over one, so most seeds have arrivals that round to 100 %.
        let specs: Vec<NodeSpec> = (0..50)
            .map(|i| NodeSpec {
                name: format!("n{i}"),
                cpu: 32_000,
                mem: 1 << 18,
                gpus: 2,
                model: 0,
            })
            .collect();
        let pod = |milli: u16, num_gpu: u8| PodShape {
            cpu: 2000,
            mem: 1024,
            num_gpu,
            milli,
            models: ModelSet::Any,
            spec: 0,
        };
        let shapes = vec![
            pod(300, 1),
            pod(700, 1),
            pod(450, 1),
            pod(1000, 1),
            pod(0, 0),
        ];
        let opts = PaperOptions {
            nodes: PathBuf::new(),
            pods: vec![],
            policies: vec![SharePolicy::BestFit, SharePolicy::Fgd, SharePolicy::Gantry],
            first_seed: 7,
            seeds: 4,
            tune_ratio: 1.3,
            paper_results: None,
            streams: Default::default(),
            mixes: vec![MixMode::Oracle],
        };
        let rows = run_trace(&specs, &shapes, &opts)
            .into_iter()
            .map(|(p, c)| ("t".to_string(), p, c))
            .collect();
        let report = PaperReport {
            seeds: 4,
            rows,
            paper: PaperFigures::new(),
        };
        let text = report.to_string();
        let paired: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("Gantry - policy"))
            .skip(1)
            .collect();
        assert_eq!(paired.len(), 2, "{text}");
        assert!(
            paired[0].starts_with("t ") && paired[0].contains("BestFit"),
            "{text}"
        );
        let at_100 = report.rows[0].2.per_level[2].len();
        assert!(at_100 >= 2, "{text}");
        let tail = format!("/{at_100}");
        assert!(
            paired[1].contains("FGD") && paired[1].ends_with(&tail),
            "{text}"
        );
    }
}
