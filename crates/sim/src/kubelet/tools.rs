//! What a plain simulated container prints when its command runs one of the tools people use
//! to check a GPU pod: `env` / `printenv [NAME…]`, and `nvidia-smi -L` (or `--list-gpus`),
//! which lists the GPUs the NVIDIA container runtime would expose for the container's
//! `NVIDIA_VISIBLE_DEVICES` (`all`, `none`/`void`/unset, or a comma list of UUIDs, indices or
//! CDI names `nvidia.com/gpu=<uuid>`), numbered from 0 inside the container. Commands run
//! through `sh -c` / `bash -c` are split on `;`, `&&` and new lines. Other commands print
//! nothing. Pure: the command line, the environment and the node's GPUs in, lines out.

use std::collections::BTreeMap;

use gantry_gpu::DeviceInfo;

/// The container's command and args as one word list.
pub fn command_line(c: &k8s_openapi::api::core::v1::Container) -> Vec<String> {
    c.command
        .iter()
        .flatten()
        .chain(c.args.iter().flatten())
        .cloned()
        .collect()
}

/// The shell segments to look at: `sh -c SCRIPT` splits SCRIPT, else the words themselves.
fn segments(words: &[String]) -> Vec<Vec<String>> {
    let base = |w: &str| w.rsplit('/').next().unwrap_or(w).to_string();
    let shell = words
        .first()
        .is_some_and(|w| matches!(base(w).as_str(), "sh" | "bash" | "dash"));
    if shell && let Some(i) = words.iter().position(|w| w == "-c") {
        let script = words.get(i + 1).cloned().unwrap_or_default();
        return script
            .split(['\n', ';'])
            .flat_map(|s| s.split("&&"))
            .map(|s| s.split_whitespace().map(str::to_string).collect::<Vec<_>>())
            .filter(|s| !s.is_empty())
            .collect();
    }
    vec![words.to_vec()]
}

/// The GPUs the runtime exposes for `NVIDIA_VISIBLE_DEVICES`, in the variable's order.
pub fn visible<'a>(env: &BTreeMap<String, String>, gpus: &'a [DeviceInfo]) -> Vec<&'a DeviceInfo> {
    let v = env
        .get("NVIDIA_VISIBLE_DEVICES")
        .map(|s| s.trim())
        .unwrap_or("");
    match v {
        "" | "none" | "void" => Vec::new(),
        "all" => gpus.iter().collect(),
        list => list
            .split(',')
            .map(|d| d.trim())
            .map(|d| d.strip_prefix("nvidia.com/gpu=").unwrap_or(d))
            .filter_map(|d| match d.parse::<u32>() {
                Ok(i) => gpus.iter().find(|g| g.index == i),
                Err(_) => gpus.iter().find(|g| g.uuid == d),
            })
            .collect(),
    }
}

/// The lines the command prints.
pub fn output(
    words: &[String],
    env: &BTreeMap<String, String>,
    gpus: &[DeviceInfo],
) -> Vec<String> {
    let mut out = Vec::new();
    for seg in segments(words) {
        let Some((first, args)) = seg.split_first() else {
            continue;
        };
        let tool = first.rsplit('/').next().unwrap_or_default();
        match tool {
            "env" if args.is_empty() => out.extend(env.iter().map(|(k, v)| format!("{k}={v}"))),
            "printenv" if args.is_empty() => {
                out.extend(env.iter().map(|(k, v)| format!("{k}={v}")))
            }
            "printenv" => out.extend(args.iter().filter_map(|a| env.get(a).cloned())),
            "nvidia-smi" if args.iter().any(|a| a == "-L" || a == "--list-gpus") => {
                out.extend(
                    visible(env, gpus)
                        .iter()
                        .enumerate()
                        .map(|(i, g)| format!("GPU {i}: {} (UUID: {})", g.name, g.uuid)),
                );
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: u32, uuid: &str) -> DeviceInfo {
        DeviceInfo {
            index,
            uuid: uuid.into(),
            name: "NVIDIA H100 80GB HBM3".into(),
            pci_bus_id: String::new(),
            pci_device_id: 0,
            pci_subsystem_id: 0,
            minor_number: index,
            serial: String::new(),
            brand: String::new(),
            board_part_number: String::new(),
            vbios_version: String::new(),
            compute_capability: (9, 0),
            sm_count: 132,
            mig_capable: true,
        }
    }

    fn words(s: &[&str]) -> Vec<String> {
        s.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn nvidia_smi_lists_what_the_runtime_exposes() {
        let gpus = [gpu(0, "GPU-a"), gpu(1, "GPU-b"), gpu(2, "GPU-c")];
        let env = BTreeMap::from([("NVIDIA_VISIBLE_DEVICES".to_string(), "GPU-c".to_string())]);
        let got = output(
            &words(&["sh", "-c", "nvidia-smi -L; sleep infinity"]),
            &env,
            &gpus,
        );
        assert_eq!(got, ["GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-c)"]);
        let idx = BTreeMap::from([(
            "NVIDIA_VISIBLE_DEVICES".to_string(),
            "1,nvidia.com/gpu=GPU-a".to_string(),
        )]);
        let uuids: Vec<&str> = visible(&idx, &gpus)
            .iter()
            .map(|g| g.uuid.as_str())
            .collect();
        assert_eq!(uuids, ["GPU-b", "GPU-a"]);
        assert!(output(&words(&["nvidia-smi", "-L"]), &BTreeMap::new(), &gpus).is_empty());
        let all = BTreeMap::from([("NVIDIA_VISIBLE_DEVICES".to_string(), "all".to_string())]);
        assert_eq!(
            output(&words(&["/usr/bin/nvidia-smi", "--list-gpus"]), &all, &gpus).len(),
            3
        );
    }

    #[test]
    fn env_and_printenv() {
        let env = BTreeMap::from([
            ("A".to_string(), "1".to_string()),
            ("GPU_PORTION".to_string(), "0.50".to_string()),
        ]);
        assert_eq!(
            output(&words(&["env"]), &env, &[]),
            ["A=1", "GPU_PORTION=0.50"]
        );
        assert_eq!(
            output(
                &words(&["bash", "-c", "printenv GPU_PORTION && python app.py"]),
                &env,
                &[]
            ),
            ["0.50"]
        );
        assert!(output(&words(&["python", "app.py"]), &env, &[]).is_empty());
        assert!(
            output(&[], &env, &[]).is_empty(),
            "no command: the image's entrypoint"
        );
        assert!(output(&words(&["sh", "-c"]), &env, &[]).is_empty());
    }
}
