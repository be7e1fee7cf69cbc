//! Trace replay input: the two CSV files of Alibaba's cluster-trace-gpu-v2023 layout.
//! nodes: `name,cpu_milli,memory_mib,gpu,model`; pods: `name,cpu_milli,memory_mib,num_gpu,
//! gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time`.

use crate::input::*;
use gantry_api::names;
use gantry_k8s_rules::{Operator, Requirement};
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{file}: cannot read: {source}")]
    Read {
        file: String,
        source: std::io::Error,
    },
    #[error("{file}: header lacks column {column:?}")]
    MissingColumn { file: String, column: &'static str },
    #[error("{file}:{line}: column {column}: {message}")]
    Field {
        file: String,
        line: usize,
        column: &'static str,
        message: String,
    },
    #[error("{file}: no rows")]
    Empty { file: String },
}

struct Table {
    file: String,
    header: Vec<String>,
    rows: Vec<(usize, Vec<String>)>,
}

impl Table {
    fn read(path: &Path) -> Result<Table, TraceError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| TraceError::Read {
            file: file.clone(),
            source,
        })?;
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty());
        let header = lines
            .next()
            .map(|(_, h)| h.split(',').map(|c| c.trim().to_string()).collect())
            .unwrap_or_default();
        let rows: Vec<(usize, Vec<String>)> = lines
            .map(|(i, l)| (i + 1, l.split(',').map(|c| c.trim().to_string()).collect()))
            .collect();
        if rows.is_empty() {
            return Err(TraceError::Empty { file });
        }
        Ok(Table { file, header, rows })
    }
    fn col(&self, name: &'static str) -> Result<usize, TraceError> {
        self.header
            .iter()
            .position(|h| h == name)
            .ok_or(TraceError::MissingColumn {
                file: self.file.clone(),
                column: name,
            })
    }
    fn num(
        &self,
        row: &(usize, Vec<String>),
        col: usize,
        name: &'static str,
    ) -> Result<i64, TraceError> {
        let raw = row.1.get(col).map(String::as_str).unwrap_or("");
        if raw.is_empty() {
            return Ok(0);
        }
        raw.parse::<f64>()
            .map(|v| v as i64)
            .map_err(|_| TraceError::Field {
                file: self.file.clone(),
                line: row.0,
                column: name,
                message: format!("{raw:?} is not a number"),
            })
    }
}

/// Nodes as `NodeInput`s (GPU model as the GFD product label).
pub fn read_nodes(path: &Path) -> Result<Vec<NodeInput>, TraceError> {
    let t = Table::read(path)?;
    let (name, cpu, mem, gpu, model) = (
        t.col("name")?,
        t.col("cpu_milli")?,
        t.col("memory_mib")?,
        t.col("gpu")?,
        t.col("model")?,
    );
    let mut out = Vec::new();
    for row in &t.rows {
        let mut labels = BTreeMap::new();
        let m = row.1.get(model).cloned().unwrap_or_default();
        if !m.is_empty() {
            labels.insert(names::LABEL_GPU_PRODUCT.to_string(), m);
        }
        out.push(NodeInput {
            name: row.1.get(name).cloned().unwrap_or_default(),
            labels,
            taints: vec![],
            schedulable: true,
            cpu_milli: t.num(row, cpu, "cpu_milli")?,
            memory_bytes: t.num(row, mem, "memory_mib")? << 20,
            pods: 256,
            gpus: t.num(row, gpu, "gpu")?.clamp(0, 255) as u32,
            mig: BTreeMap::new(),
        });
    }
    Ok(out)
}

/// Pods in creation order. `gpu_milli` < 1000 on a one-GPU pod is a `gpu-fraction`;
/// `gpu_spec` (models separated by `|`) becomes required affinity on the GPU product.
pub fn read_pods(path: &Path) -> Result<Vec<PodInput>, TraceError> {
    let t = Table::read(path)?;
    let (name, cpu, mem, ngpu, gmilli, spec, created) = (
        t.col("name")?,
        t.col("cpu_milli")?,
        t.col("memory_mib")?,
        t.col("num_gpu")?,
        t.col("gpu_milli")?,
        t.col("gpu_spec")?,
        t.col("creation_time")?,
    );
    let mut out = Vec::new();
    for row in &t.rows {
        let n = t.num(row, ngpu, "num_gpu")?;
        let milli = t.num(row, gmilli, "gpu_milli")?;
        let mut p = PodInput {
            namespace: "trace".into(),
            name: row.1.get(name).cloned().unwrap_or_default(),
            cpu_milli: t.num(row, cpu, "cpu_milli")?,
            memory_bytes: t.num(row, mem, "memory_mib")? << 20,
            creation: t.num(row, created, "creation_time")?,
            ..Default::default()
        };
        p.pod_group = p.name.clone();
        if n == 1 && milli > 0 && milli < 1000 {
            p.annotations.insert(
                names::ANNOTATION_GPU_FRACTION.to_string(),
                format!("{}", milli as f64 / 1000.0),
            );
        } else if n > 0 {
            p.extended.insert(names::RESOURCE_GPU.to_string(), n);
        }
        let models: Vec<String> = row
            .1
            .get(spec)
            .map(|s| {
                s.split('|')
                    .filter(|m| !m.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        if !models.is_empty() {
            let product = Requirement::new(names::LABEL_GPU_PRODUCT, Operator::In, &models)
                .map_err(|message| TraceError::Field {
                    file: t.file.clone(),
                    line: row.0,
                    column: "gpu_spec",
                    message,
                })?;
            p.affinity = Some(NodeSelector {
                terms: vec![NodeSelectorTerm {
                    match_expressions: vec![product],
                    match_fields: vec![],
                }],
            });
        }
        out.push(p);
    }
    out.sort_by_key(|p| p.creation);
    Ok(out)
}
