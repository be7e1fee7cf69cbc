//! CRI-O: the `nvidia` runtime lives in a drop-in file of its own (`crio.conf.d/99-nvidia.toml`),
//! so the user's `crio.conf` is only read, never written.

use super::error::ToolkitError;
use super::tomlutil::{detached_copy, get, get_or_create, set_value, str_at};
use std::path::{Path, PathBuf};
use toml_edit::{DocumentMut, Item, Table, Value};

/// What to register.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    pub runtime_name: String,
    pub binary_path: String,
    pub set_as_default: bool,
}

/// The drop-in for the given sources (`crio.conf`, then the other drop-ins in the order CRI-O
/// reads them; later ones win). The runtime table is a copy of the default runtime (or `runc`,
/// `crun`) so settings such as `monitor_path` carry over, pointed at the NVIDIA runtime.
pub fn drop_in(
    sources: &[(PathBuf, DocumentMut)],
    opts: &Options,
) -> Result<DocumentMut, ToolkitError> {
    let mut default_name: Option<String> = None;
    let mut runtimes: Vec<(String, Item)> = Vec::new();
    for (path, doc) in sources {
        let Some(runtime) = get(doc.as_item(), &["crio", "runtime"], path)? else {
            continue;
        };
        if let Some(name) = str_at(runtime, "default_runtime") {
            default_name = Some(name.to_string());
        }
        if let Some(table) = get(runtime, &["runtimes"], path)?.and_then(Item::as_table_like) {
            for (name, item) in table.iter() {
                if item.is_table_like() {
                    runtimes.retain(|(n, _)| n != name);
                    runtimes.push((name.to_string(), item.clone()));
                }
            }
        }
    }
    let candidates = default_name
        .as_deref()
        .filter(|n| !n.starts_with(opts.runtime_name.as_str()))
        .into_iter()
        .chain(["runc", "crun"]);
    let source = candidates
        .filter_map(|name| runtimes.iter().find(|(n, _)| n == name))
        .map(|(_, item)| item)
        .next();

    let mut runtime = match source {
        Some(item) => detached_copy(item),
        None => Item::Table(Table::new()),
    };
    if let Some(mut t) = runtime.as_inline_table().cloned().map(|t| t.into_table()) {
        t.set_implicit(false);
        runtime = Item::Table(t);
    }
    // The drop-in is ours: default layout, not the source file's indentation.
    if let Item::Table(t) = &mut runtime {
        t.decor_mut().clear();
    }
    set_value(
        &mut runtime,
        "runtime_path",
        Value::from(opts.binary_path.as_str()),
    );
    set_value(&mut runtime, "runtime_type", Value::from("oci"));

    let here = Path::new("crio drop-in");
    let mut doc = DocumentMut::new();
    if opts.set_as_default {
        let crio_runtime = get_or_create(doc.as_item_mut(), &["crio", "runtime"], here)?;
        if let Item::Table(t) = crio_runtime {
            t.set_implicit(false);
        }
        set_value(
            crio_runtime,
            "default_runtime",
            Value::from(opts.runtime_name.as_str()),
        );
    }
    let table = get_or_create(doc.as_item_mut(), &["crio", "runtime", "runtimes"], here)?;
    if let Some(t) = table.as_table_like_mut() {
        t.insert(&opts.runtime_name, runtime);
    }
    Ok(doc)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> Options {
        Options {
            runtime_name: "nvidia".into(),
            binary_path: "/t/nvidia-container-runtime".into(),
            set_as_default: true,
        }
    }

    #[test]
    fn copies_the_default_runtime() {
        let conf: DocumentMut = "[crio.runtime]\ndefault_runtime = \"crun\"\n[crio.runtime.runtimes.crun]\n# the OCI runtime\nruntime_path = \"/usr/bin/crun\"\nmonitor_path = \"/usr/libexec/crio/conmon\"\n".parse().unwrap();
        let doc = drop_in(&[(PathBuf::from("crio.conf"), conf)], &opts()).unwrap();
        assert_eq!(
            doc.to_string(),
            "[crio.runtime]\ndefault_runtime = \"nvidia\"\n\n[crio.runtime.runtimes.nvidia]\nruntime_path = \"/t/nvidia-container-runtime\"\nmonitor_path = \"/usr/libexec/crio/conmon\"\nruntime_type = \"oci\"\n"
        );
    }

    #[test]
    fn no_sources_gives_a_minimal_runtime() {
        let doc = drop_in(
            &[],
            &Options {
                set_as_default: false,
                ..opts()
            },
        )
        .unwrap();
        assert_eq!(
            doc.to_string(),
            "[crio.runtime.runtimes.nvidia]\nruntime_path = \"/t/nvidia-container-runtime\"\nruntime_type = \"oci\"\n"
        );
    }
}
