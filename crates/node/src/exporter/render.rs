//! Prometheus text exposition (format 0.0.4), written by hand so counters keep dcgm-exporter's
//! names (prometheus-client would append `_total`). Label order follows dcgm-exporter.

use std::collections::HashMap;
use std::fmt::Write;

use super::fields::{Field, MetricSet};
use super::sample::{Entity, Snapshot, Value};
use crate::host::pod_resources::{Assignment, PodRef};

/// `Content-Type` of the exposition.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Label choices (dcgm-exporter flags of the same meaning).
#[derive(Debug, Clone, Default)]
pub struct RenderOptions {
    /// `Hostname` label value; `None` = `--no-hostname`.
    pub hostname: Option<String>,
    /// `--kubernetes-virtual-gpus`: one series per pod sharing a device, with a `vgpu` label.
    pub virtual_gpus: bool,
    /// `--use-old-namespace`: `uuid`, `pod_name`, `pod_namespace`, `container_name`.
    pub old_namespace: bool,
    /// `--replace-blanks-in-model-name`.
    pub replace_blanks: bool,
}

/// Append `value` escaped for a label value.
fn escape_into(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn label(out: &mut String, first: &mut bool, name: &str, value: &str) {
    if !*first {
        out.push(',');
    }
    *first = false;
    out.push_str(name);
    out.push_str("=\"");
    escape_into(out, value);
    out.push('"');
}

/// The labels every series of `e` carries, before pod labels (no braces).
fn entity_labels(out: &mut String, e: &Entity, set: &MetricSet, opts: &RenderOptions) {
    let mut first = true;
    let mut buf = itoa(e.gpu);
    label(out, &mut first, "gpu", &buf);
    label(
        out,
        &mut first,
        if opts.old_namespace { "uuid" } else { "UUID" },
        &e.uuid,
    );
    label(out, &mut first, "pci_bus_id", &e.pci_bus_id);
    buf.insert_str(0, "nvidia");
    label(out, &mut first, "device", &buf);
    if opts.replace_blanks {
        label(out, &mut first, "modelName", &e.model.replace(' ', "-"));
    } else {
        label(out, &mut first, "modelName", &e.model);
    }
    if let Some(gi) = &e.gpu_instance {
        label(out, &mut first, "GPU_I_PROFILE", &gi.profile);
        label(out, &mut first, "GPU_I_ID", &itoa(gi.id));
    }
    if let Some(h) = &opts.hostname {
        label(out, &mut first, "Hostname", h);
    }
    for l in &set.labels {
        if let Some(v) = &e.labels[l.field as usize] {
            label(out, &mut first, &l.name, v);
        }
    }
}

fn itoa(n: u32) -> String {
    n.to_string()
}

fn pod_labels(out: &mut String, p: &PodRef, opts: &RenderOptions) {
    let (c, ns, pod) = if opts.old_namespace {
        ("container_name", "pod_namespace", "pod_name")
    } else {
        ("container", "namespace", "pod")
    };
    let mut first = false;
    label(out, &mut first, c, &p.container);
    label(out, &mut first, ns, &p.namespace);
    label(out, &mut first, pod, &p.pod);
    if opts.virtual_gpus
        && let Some(v) = &p.vgpu
    {
        label(out, &mut first, "vgpu", v);
    }
}

/// Short names of XIDs that usually mean hardware or driver trouble (and common app faults).
fn xid_message(xid: i64) -> &'static str {
    match xid {
        0 => "No Error",
        13 => "Graphics Engine Exception",
        31 => "GPU memory page fault",
        43 => "GPU stopped processing",
        45 => "Preemptive cleanup",
        48 => "Double Bit ECC Error",
        63 => "Row remapping or page retirement recording event",
        64 => "Row remapping or page retirement recording failure",
        68 => "Video processor exception",
        74 => "NVLINK Error",
        79 => "GPU has fallen off the bus",
        92 => "High single-bit ECC error rate",
        94 => "Contained ECC error",
        95 => "Uncontained ECC error",
        109 => "Context Switch Timeout",
        119 => "GSP RPC Timeout",
        120 => "GSP Error",
        140 => "Unrecovered ECC Error",
        143 => "GPU Initialization Failure",
        _ => "Unknown Error",
    }
}

fn write_value(out: &mut String, v: Value) {
    // Writing into a String cannot fail.
    let _ = match v {
        Value::Int(i) => write!(out, "{i}"),
        Value::Float(f) => write!(out, "{f:.6}"),
    };
}

/// Who each entity belongs to: every container holding it, in the kubelet's order. A shared
/// GPU (time-slicing or MPS replicas) is attributed to every pod sharing it — dcgm-exporter
/// keeps only the last one — once per container, or once per replica with virtual GPUs
/// (the `vgpu` label tells them apart).
fn owners<'a>(
    snap: &Snapshot,
    pods: &'a [Assignment],
    opts: &RenderOptions,
) -> HashMap<String, Vec<&'a PodRef>> {
    let mut map: HashMap<String, Vec<&PodRef>> = HashMap::new();
    for a in pods {
        let Some(key) = snap.key_for_device(&a.device) else {
            continue;
        };
        let holders = map.entry(key).or_default();
        let same = |h: &&PodRef| {
            if opts.virtual_gpus {
                **h == a.owner
            } else {
                (&h.pod, &h.namespace, &h.container)
                    == (&a.owner.pod, &a.owner.namespace, &a.owner.container)
            }
        };
        if !holders.iter().any(same) {
            holders.push(&a.owner);
        }
    }
    map
}

/// Render the whole exposition into `out` (cleared first; its capacity is reused).
pub fn render(
    out: &mut String,
    set: &MetricSet,
    snap: &Snapshot,
    pods: &[Assignment],
    opts: &RenderOptions,
) {
    out.clear();
    let owners = owners(snap, pods, opts);
    // Per entity: its label prefix, then one suffix per owning pod (or one empty suffix).
    let mut prefixes: Vec<(String, Vec<String>)> = Vec::with_capacity(snap.entities.len());
    for e in &snap.entities {
        let mut prefix = String::with_capacity(256);
        entity_labels(&mut prefix, e, set, opts);
        let suffixes = match owners.get(&e.pod_key()) {
            Some(holders) => holders
                .iter()
                .map(|p| {
                    let mut s = String::with_capacity(96);
                    pod_labels(&mut s, p, opts);
                    s
                })
                .collect(),
            None => vec![String::new()],
        };
        prefixes.push((prefix, suffixes));
    }
    for m in &set.metrics {
        if !snap.entities.iter().any(|e| e.get(m.field).is_some()) {
            continue;
        }
        out.push_str("# HELP ");
        out.push_str(&m.name);
        out.push(' ');
        for c in m.help.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                c => out.push(c),
            }
        }
        out.push_str("\n# TYPE ");
        out.push_str(&m.name);
        out.push(' ');
        out.push_str(&m.kind);
        out.push('\n');
        for (e, (prefix, suffixes)) in snap.entities.iter().zip(&prefixes) {
            let Some(v) = e.get(m.field) else { continue };
            for suffix in suffixes {
                out.push_str(&m.name);
                out.push('{');
                out.push_str(prefix);
                if m.field == Field::XidErrors
                    && let Value::Int(x) = v
                {
                    let _ = write!(out, ",err_code=\"{x}\",err_msg=\"{}\"", xid_message(x));
                }
                out.push_str(suffix);
                out.push_str("} ");
                write_value(out, v);
                out.push('\n');
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exporter::fields::{FIELD_COUNT, default_set};
    use crate::exporter::sample::GpuInstanceRef;

    fn entity(gi: Option<u32>) -> Entity {
        let mut values = [None; FIELD_COUNT];
        values[Field::GpuTemp as usize] = Some(Value::Int(40));
        values[Field::PowerUsage as usize] = Some(Value::Float(74.5));
        values[Field::XidErrors as usize] = Some(Value::Int(79));
        let mut labels: [Option<String>; crate::exporter::fields::LABEL_FIELD_COUNT] =
            Default::default();
        labels[0] = Some("580.159.04".into());
        Entity {
            gpu: 0,
            uuid: "GPU-1".into(),
            pci_bus_id: "00000000:19:00.0".into(),
            model: "NVIDIA \"H200\"".into(),
            gpu_instance: gi.map(|id| GpuInstanceRef {
                profile: "1g.18gb".into(),
                id,
            }),
            values,
            labels,
        }
    }

    #[test]
    fn renders_dcgm_shaped_lines() {
        let snap = Snapshot {
            entities: vec![entity(None)],
            gpu_uuids: vec!["GPU-1".into()],
            ..Default::default()
        };
        let pods = vec![Assignment {
            device: "GPU-1".into(),
            owner: PodRef {
                pod: "p".into(),
                namespace: "ns".into(),
                container: "c".into(),
                vgpu: None,
            },
        }];
        let opts = RenderOptions {
            hostname: Some("node-a".into()),
            ..Default::default()
        };
        let mut out = String::new();
        render(&mut out, &default_set(), &snap, &pods, &opts);
        assert!(out.contains("# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"), "{out}");
        assert!(out.contains(
            "DCGM_FI_DEV_GPU_TEMP{gpu=\"0\",UUID=\"GPU-1\",pci_bus_id=\"00000000:19:00.0\",device=\"nvidia0\",modelName=\"NVIDIA \\\"H200\\\"\",Hostname=\"node-a\",DCGM_FI_DRIVER_VERSION=\"580.159.04\",container=\"c\",namespace=\"ns\",pod=\"p\"} 40\n"
        ), "{out}");
        assert!(out.contains("} 74.500000\n"), "{out}");
        assert!(
            out.contains("err_code=\"79\",err_msg=\"GPU has fallen off the bus\""),
            "{out}"
        );
        assert!(
            !out.contains("DCGM_FI_DEV_SM_CLOCK"),
            "absent fields have no family"
        );
    }

    #[test]
    fn a_shared_gpu_is_attributed_to_every_pod_sharing_it() {
        let snap = Snapshot {
            entities: vec![entity(None)],
            gpu_uuids: vec!["GPU-1".into()],
            ..Default::default()
        };
        let pod = |name: &str, n: &str| Assignment {
            device: "GPU-1".into(),
            owner: PodRef {
                pod: name.into(),
                namespace: "ns".into(),
                container: "c".into(),
                vgpu: Some(n.into()),
            },
        };
        // Four pods time-sliced on one GPU (pod `d` holds two replicas).
        let pods = vec![
            pod("a", "0"),
            pod("b", "1"),
            pod("c", "2"),
            pod("d", "3"),
            pod("d", "4"),
        ];
        let mut out = String::new();
        let mut opts = RenderOptions::default();
        render(&mut out, &default_set(), &snap, &pods, &opts);
        let temp: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with("DCGM_FI_DEV_GPU_TEMP{"))
            .collect();
        assert_eq!(temp.len(), 4, "one series per pod sharing the GPU: {out}");
        for (line, p) in temp.iter().zip(["a", "b", "c", "d"]) {
            assert!(
                line.ends_with(&format!(
                    "container=\"c\",namespace=\"ns\",pod=\"{p}\"}} 40"
                )),
                "{line}"
            );
        }
        opts.virtual_gpus = true;
        render(&mut out, &default_set(), &snap, &pods, &opts);
        assert_eq!(out.matches("DCGM_FI_DEV_GPU_TEMP{").count(), 5);
        assert!(out.contains("pod=\"a\",vgpu=\"0\""), "{out}");
        assert!(out.contains("pod=\"d\",vgpu=\"4\""), "{out}");
    }

    #[test]
    fn gpu_instance_labels_follow_model_name() {
        let snap = Snapshot {
            entities: vec![entity(Some(7))],
            ..Default::default()
        };
        let mut out = String::new();
        render(
            &mut out,
            &default_set(),
            &snap,
            &[],
            &RenderOptions::default(),
        );
        assert!(out.contains("modelName=\"NVIDIA \\\"H200\\\"\",GPU_I_PROFILE=\"1g.18gb\",GPU_I_ID=\"7\",DCGM_FI_DRIVER_VERSION"), "{out}");
    }
}
