//! Trace input: the CSV files of Alibaba's cluster-trace-gpu-v2023 as published.
//! nodes: `sn` (or `name`), `cpu_milli`, `memory_mib`, `gpu`, `model`; pods: `name`,
//! `cpu_milli`, `memory_mib`, `num_gpu`, `gpu_milli`, and optionally `gpu_spec`, `qos`,
//! `pod_phase`, `creation_time`, `deletion_time`, `scheduled_time` (the `multigpu*` files
//! stop after `gpu_milli`). Columns are found by name; unknown ones are ignored.

use gantry_api::names;
use gantry_k8s_rules::{Operator, Requirement};
use gantry_scheduler::gpushare::{Models, NodeSpec, PodShape, model::MAX_GPUS};
use gantry_scheduler::input::*;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{file}: cannot read: {source}")]
    Read {
        file: String,
        source: std::io::Error,
    },
    #[error("{file}: not CSV: {message}")]
    Csv { file: String, message: String },
    #[error("{file}: header lacks column {column:?}")]
    MissingColumn { file: String, column: &'static str },
    #[error("{file}:{line}: column {column}: {message}")]
    Field {
        file: String,
        line: u64,
        column: &'static str,
        message: String,
    },
    #[error("{file}: no rows")]
    Empty { file: String },
}

/// One node row.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceNode {
    pub name: String,
    pub cpu_milli: i64,
    pub memory_mib: i64,
    pub gpu: u32,
    pub model: String,
}

/// One pod row. `gpu_milli` is per device.
#[derive(Clone, Debug, PartialEq)]
pub struct TracePod {
    pub name: String,
    pub cpu_milli: i64,
    pub memory_mib: i64,
    pub num_gpu: u32,
    pub gpu_milli: u32,
    /// Acceptable GPU models (`gpu_spec`, `|`-separated); empty: any.
    pub gpu_spec: Vec<String>,
    pub creation_time: i64,
}

struct Table {
    file: String,
    header: csv::StringRecord,
    rows: Vec<csv::StringRecord>,
}

impl Table {
    fn parse(file: &str, input: impl Read) -> Result<Table, TraceError> {
        let csv_err = |e: csv::Error| TraceError::Csv {
            file: file.to_string(),
            message: e.to_string(),
        };
        let mut r = csv::ReaderBuilder::new()
            .trim(csv::Trim::All)
            .flexible(true)
            .from_reader(input);
        let header = r.headers().map_err(csv_err)?.clone();
        let mut rows = Vec::new();
        for rec in r.records() {
            let rec = rec.map_err(csv_err)?;
            if rec.iter().all(str::is_empty) {
                continue;
            }
            rows.push(rec);
        }
        if rows.is_empty() {
            return Err(TraceError::Empty {
                file: file.to_string(),
            });
        }
        Ok(Table {
            file: file.to_string(),
            header,
            rows,
        })
    }
    fn find(&self, names: &[&'static str]) -> Option<usize> {
        names
            .iter()
            .find_map(|n| self.header.iter().position(|h| h == *n))
    }
    fn col(&self, names: &[&'static str]) -> Result<usize, TraceError> {
        self.find(names).ok_or(TraceError::MissingColumn {
            file: self.file.clone(),
            column: names[0],
        })
    }
    fn text<'a>(&self, row: &'a csv::StringRecord, col: Option<usize>) -> &'a str {
        col.and_then(|c| row.get(c)).unwrap_or("")
    }
    /// A whole, non-negative number; empty means 0.
    fn num(
        &self,
        row: &csv::StringRecord,
        col: usize,
        name: &'static str,
    ) -> Result<i64, TraceError> {
        let raw = self.text(row, Some(col));
        if raw.is_empty() {
            return Ok(0);
        }
        let err = |message: String| TraceError::Field {
            file: self.file.clone(),
            line: row.position().map_or(0, |p| p.line()),
            column: name,
            message,
        };
        let v = raw
            .parse::<i64>()
            .or_else(|_| match raw.parse::<f64>() {
                Ok(f) if f.is_finite() && f.fract() == 0.0 => Ok(f as i64),
                _ => Err(()),
            })
            .map_err(|_| err(format!("{raw:?} is not a whole number")))?;
        if v < 0 {
            return Err(err(format!("{v} is negative")));
        }
        Ok(v)
    }
}

fn open(path: &Path) -> Result<(String, std::fs::File), TraceError> {
    let file = path.display().to_string();
    let f = std::fs::File::open(path).map_err(|source| TraceError::Read {
        file: file.clone(),
        source,
    })?;
    Ok((file, f))
}

/// Node rows from any reader; `file` names it in errors.
pub fn parse_nodes(file: &str, input: impl Read) -> Result<Vec<TraceNode>, TraceError> {
    let t = Table::parse(file, input)?;
    let name = t.col(&["sn", "name"])?;
    let cpu = t.col(&["cpu_milli"])?;
    let mem = t.col(&["memory_mib"])?;
    let gpu = t.col(&["gpu"])?;
    let model = t.find(&["model"]);
    let mut out = Vec::with_capacity(t.rows.len());
    for row in &t.rows {
        let gpus = t.num(row, gpu, "gpu")?;
        if gpus > MAX_GPUS as i64 {
            return Err(TraceError::Field {
                file: t.file.clone(),
                line: row.position().map_or(0, |p| p.line()),
                column: "gpu",
                message: format!("{gpus} GPUs on one node (at most {MAX_GPUS})"),
            });
        }
        out.push(TraceNode {
            name: t.text(row, Some(name)).to_string(),
            cpu_milli: t.num(row, cpu, "cpu_milli")?,
            memory_mib: t.num(row, mem, "memory_mib")?,
            gpu: gpus as u32,
            model: t.text(row, model).to_string(),
        });
    }
    Ok(out)
}

/// Pod rows from any reader, in file order.
pub fn parse_pods(file: &str, input: impl Read) -> Result<Vec<TracePod>, TraceError> {
    let t = Table::parse(file, input)?;
    let name = t.col(&["name"])?;
    let cpu = t.col(&["cpu_milli"])?;
    let mem = t.col(&["memory_mib"])?;
    let ngpu = t.col(&["num_gpu"])?;
    let gmilli = t.col(&["gpu_milli"])?;
    let spec = t.find(&["gpu_spec"]);
    let created = t.find(&["creation_time"]);
    let mut out = Vec::with_capacity(t.rows.len());
    for row in &t.rows {
        let line = row.position().map_or(0, |p| p.line());
        let num_gpu = t.num(row, ngpu, "num_gpu")?;
        let milli = t.num(row, gmilli, "gpu_milli")?;
        let bad = |column, message: String| TraceError::Field {
            file: t.file.clone(),
            line,
            column,
            message,
        };
        if num_gpu > MAX_GPUS as i64 {
            return Err(bad(
                "num_gpu",
                format!("{num_gpu} GPUs (at most {MAX_GPUS})"),
            ));
        }
        if milli > 1000 {
            return Err(bad(
                "gpu_milli",
                format!("{milli} is more than one GPU (1000)"),
            ));
        }
        out.push(TracePod {
            name: t.text(row, Some(name)).to_string(),
            cpu_milli: t.num(row, cpu, "cpu_milli")?,
            memory_mib: t.num(row, mem, "memory_mib")?,
            num_gpu: num_gpu as u32,
            gpu_milli: milli as u32,
            gpu_spec: t
                .text(row, spec)
                .split('|')
                .filter(|m| !m.is_empty())
                .map(str::to_string)
                .collect(),
            creation_time: match created {
                Some(c) => t.num(row, c, "creation_time")?,
                None => 0,
            },
        });
    }
    Ok(out)
}

pub fn read_trace_nodes(path: &Path) -> Result<Vec<TraceNode>, TraceError> {
    let (file, f) = open(path)?;
    parse_nodes(&file, f)
}

pub fn read_trace_pods(path: &Path) -> Result<Vec<TracePod>, TraceError> {
    let (file, f) = open(path)?;
    parse_pods(&file, f)
}

/// Nodes and pods as the GPU-sharing core's values (GPU models interned from the nodes).
pub fn to_shapes(nodes: &[TraceNode], pods: &[TracePod]) -> (Vec<NodeSpec>, Vec<PodShape>) {
    let mut models = Models::default();
    let specs = nodes
        .iter()
        .map(|n| NodeSpec {
            name: n.name.clone(),
            cpu: n.cpu_milli,
            mem: n.memory_mib,
            gpus: n.gpu as u8,
            // At most 64 distinct models; beyond that a node reads as model-less.
            model: models
                .intern(&n.model)
                .unwrap_or(gantry_scheduler::gpushare::model::NO_MODEL),
        })
        .collect();
    // GPU-model requests as the simulator keys them: the non-empty names joined by `|`,
    // none for a pod without GPUs; ranked in string order.
    let spec_of = |p: &TracePod| {
        if p.num_gpu == 0 {
            String::new()
        } else {
            p.gpu_spec
                .iter()
                .filter(|s| !s.is_empty())
                .cloned()
                .collect::<Vec<_>>()
                .join("|")
        }
    };
    let keys: Vec<String> = pods.iter().map(spec_of).collect();
    let mut requests = keys.clone();
    requests.push(String::new());
    requests.sort();
    requests.dedup();
    let shapes = pods
        .iter()
        .zip(&keys)
        .map(|(p, key)| {
            let rank = requests.binary_search(key).unwrap_or(0);
            let (num_gpu, milli) = if p.num_gpu == 0 || p.gpu_milli == 0 {
                (0, 0)
            } else {
                (p.num_gpu as u8, p.gpu_milli as u16)
            };
            PodShape {
                cpu: p.cpu_milli,
                mem: p.memory_mib,
                num_gpu,
                milli,
                models: models.set_of(&p.gpu_spec),
                spec: u16::try_from(rank).unwrap_or(u16::MAX),
            }
        })
        .collect();
    (specs, shapes)
}

/// Nodes as `NodeInput`s (GPU model as the GFD product label).
pub fn read_nodes(path: &Path) -> Result<Vec<NodeInput>, TraceError> {
    Ok(read_trace_nodes(path)?
        .into_iter()
        .map(node_input)
        .collect())
}

pub fn node_input(n: TraceNode) -> NodeInput {
    let mut labels = BTreeMap::new();
    if !n.model.is_empty() {
        labels.insert(names::LABEL_GPU_PRODUCT.to_string(), n.model);
    }
    NodeInput {
        name: n.name,
        labels,
        taints: vec![],
        schedulable: true,
        cpu_milli: n.cpu_milli,
        memory_bytes: n.memory_mib << 20,
        pods: 256,
        gpus: n.gpu,
        mig: BTreeMap::new(),
        gpu_devices: Vec::new(),
    }
}

/// Pods in creation order. `gpu_milli` < 1000 on a one-GPU pod is a `gpu-fraction`;
/// `gpu_spec` becomes required affinity on the GPU product.
pub fn read_pods(path: &Path) -> Result<Vec<PodInput>, TraceError> {
    let mut out = Vec::new();
    for t in read_trace_pods(path)? {
        let name = t.name.clone();
        out.push(pod_input(t).map_err(|message| TraceError::Csv {
            file: path.display().to_string(),
            message: format!("pod {name}: gpu_spec: {message}"),
        })?);
    }
    out.sort_by_key(|p| p.creation);
    Ok(out)
}

/// Fails when a `gpu_spec` model is not a valid label value (it becomes a node affinity).
pub fn pod_input(t: TracePod) -> Result<PodInput, String> {
    let mut p = PodInput {
        namespace: "trace".into(),
        name: t.name,
        cpu_milli: t.cpu_milli,
        memory_bytes: t.memory_mib << 20,
        creation: t.creation_time,
        ..Default::default()
    };
    p.pod_group = p.name.clone();
    if t.num_gpu == 1 && t.gpu_milli > 0 && t.gpu_milli < 1000 {
        p.annotations.insert(
            names::ANNOTATION_GPU_FRACTION.to_string(),
            format!("{}", f64::from(t.gpu_milli) / 1000.0),
        );
    } else if t.num_gpu > 0 && t.gpu_milli > 0 {
        p.extended
            .insert(names::RESOURCE_GPU.to_string(), i64::from(t.num_gpu));
    }
    if !t.gpu_spec.is_empty() {
        let product = Requirement::new(names::LABEL_GPU_PRODUCT, Operator::In, &t.gpu_spec)?;
        p.affinity = Some(NodeSelector {
            terms: vec![NodeSelectorTerm {
                match_expressions: vec![product],
                match_fields: vec![],
            }],
        });
    }
    Ok(p)
}
