//! containerd `config.toml` edits (config versions 2 and 3), in place or as a drop-in.
//!
//! Everything here is pure: text in, text out. Tables we add carry no fixed position, so
//! toml_edit prints them right after the tables that precede them (the existing runtimes);
//! every other byte of the user's file is reproduced as parsed.

use super::error::ToolkitError;
use super::tomlutil::{self, dotted, get, get_or_create, set_value, str_at};
use std::path::Path;
use toml_edit::{Array, DocumentMut, Item, Table, Value};

/// What to register.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Runtime name (`nvidia`).
    pub runtime_name: String,
    /// Absolute path of `nvidia-container-runtime` on the host.
    pub binary_path: String,
    /// Make it `default_runtime_name`.
    pub set_as_default: bool,
    /// Set `enable_cdi = true` on the CRI plugin.
    pub enable_cdi: bool,
}

/// The CRI plugin table name for a config version.
pub fn cri_plugin(version: i64) -> Option<&'static str> {
    match version {
        2 => Some("io.containerd.grpc.v1.cri"),
        3 => Some("io.containerd.cri.v1.runtime"),
        _ => None,
    }
}

/// The config version of a parsed file: 2 for an empty file (as upstream), an error for
/// version 1 (no `version` key) or unknown versions.
pub fn version(doc: &DocumentMut, path: &Path) -> Result<i64, ToolkitError> {
    match doc.get("version") {
        None if doc.is_empty() => Ok(2),
        None => Err(ToolkitError::config(
            path,
            "no `version` key, so this is a version 1 config; only versions 2 and 3 are supported \
             (run `containerd config migrate` first)",
        )),
        Some(item) => match item.as_integer() {
            Some(v @ (2 | 3)) => Ok(v),
            Some(v) => Err(ToolkitError::config(
                path,
                format!("unsupported config `version = {v}`; only versions 2 and 3 are supported"),
            )),
            None => Err(ToolkitError::config(path, "`version` must be an integer")),
        },
    }
}

/// Registers the runtime in `doc` (in-place mode).
pub fn configure(doc: &mut DocumentMut, opts: &Options, path: &Path) -> Result<(), ToolkitError> {
    let version = version(doc, path)?;
    if doc.get("version").is_none() {
        doc.insert("version", toml_edit::value(version));
    }
    let plugin = cri_plugin(version).unwrap_or_default();
    let runtimes_path = ["plugins", plugin, "containerd", "runtimes"];
    let default_path = ["plugins", plugin, "containerd"];

    let desired = desired_runtime(doc, plugin, opts, path)?;
    let runtimes = get_or_create(doc.as_item_mut(), &runtimes_path, path)?;
    if let Some(table) = runtimes.as_table_like_mut() {
        match table.get_mut(&opts.runtime_name) {
            Some(current) => tomlutil::sync(current, &desired),
            None => {
                table.insert(&opts.runtime_name, desired);
            }
        }
    }

    let current_default = get(doc.as_item(), &default_path, path)?
        .and_then(|c| str_at(c, "default_runtime_name"))
        .map(str::to_string);
    if opts.set_as_default {
        if current_default.as_deref() != Some(opts.runtime_name.as_str()) {
            let containerd = get_or_create(doc.as_item_mut(), &default_path, path)?;
            set_value(
                containerd,
                "default_runtime_name",
                Value::from(opts.runtime_name.as_str()),
            );
        }
    } else if current_default.as_deref() == Some(opts.runtime_name.as_str()) {
        remove_key(doc, &default_path, "default_runtime_name", path)?;
    }

    if opts.enable_cdi {
        let cri = get_or_create(doc.as_item_mut(), &["plugins", plugin], path)?;
        if str_bool(cri, "enable_cdi") != Some(true) {
            set_value(cri, "enable_cdi", Value::from(true));
        }
    }
    Ok(())
}

/// Removes what [`configure`] adds: the runtime, and `default_runtime_name` if it names it.
/// `enable_cdi` is left alone: it may have been the user's own setting.
pub fn unconfigure(
    doc: &mut DocumentMut,
    runtime_name: &str,
    path: &Path,
) -> Result<(), ToolkitError> {
    let version = version(doc, path)?;
    let plugin = cri_plugin(version).unwrap_or_default();
    remove_key(
        doc,
        &["plugins", plugin, "containerd", "runtimes"],
        runtime_name,
        path,
    )?;
    let default_path = ["plugins", plugin, "containerd"];
    let names_ours = get(doc.as_item(), &default_path, path)?
        .and_then(|c| str_at(c, "default_runtime_name"))
        == Some(runtime_name);
    if names_ours {
        remove_key(doc, &default_path, "default_runtime_name", path)?;
    }
    Ok(())
}

/// The drop-in file for `main`: `version`, then a copy of the whole CRI plugin table (containerd
/// before 2.1 replaces plugin tables key by key instead of merging them), then our edits.
pub fn drop_in(
    main: &DocumentMut,
    opts: &Options,
    main_path: &Path,
    drop_in_path: &Path,
) -> Result<DocumentMut, ToolkitError> {
    let version = version(main, main_path)?;
    let plugin = cri_plugin(version).unwrap_or_default();
    let mut doc = DocumentMut::new();
    doc.insert("version", toml_edit::value(version));
    if let Some(cri) = get(main.as_item(), &["plugins", plugin], main_path)? {
        let plugins = get_or_create(doc.as_item_mut(), &["plugins"], drop_in_path)?;
        if let Some(t) = plugins.as_table_like_mut() {
            t.insert(plugin, cri.clone());
        }
    }
    configure(&mut doc, opts, drop_in_path)?;
    Ok(doc)
}

/// Adds `glob` to the top-level `imports` of the main config (and `version` if the file is empty).
pub fn add_import(main: &mut DocumentMut, glob: &str, path: &Path) -> Result<(), ToolkitError> {
    let version = version(main, path)?;
    if main.get("version").is_none() {
        main.insert("version", toml_edit::value(version));
    }
    match main.get_mut("imports") {
        None => {
            let mut array = Array::new();
            array.push(glob);
            main.insert("imports", toml_edit::value(array));
        }
        Some(item) => {
            let Some(array) = item.as_array_mut() else {
                return Err(ToolkitError::config(
                    path,
                    "`imports` must be an array of strings",
                ));
            };
            if !array.iter().any(|v| v.as_str() == Some(glob)) {
                array.push(glob);
            }
        }
    }
    Ok(())
}

/// Removes `glob` from `imports`, keeping the key itself (an `imports = []` the user had stays).
pub fn remove_import(main: &mut DocumentMut, glob: &str, path: &Path) -> Result<(), ToolkitError> {
    let Some(item) = main.get_mut("imports") else {
        return Ok(());
    };
    let Some(array) = item.as_array_mut() else {
        return Err(ToolkitError::config(
            path,
            "`imports` must be an array of strings",
        ));
    };
    if array.iter().any(|v| v.as_str() == Some(glob)) {
        array.retain(|v| v.as_str() != Some(glob));
    }
    Ok(())
}

/// The runtime table we want: a copy of the runtime containerd uses today (so settings such as
/// `SystemdCgroup` carry over), pointed at the NVIDIA runtime binary.
fn desired_runtime(
    doc: &DocumentMut,
    plugin: &str,
    opts: &Options,
    path: &Path,
) -> Result<Item, ToolkitError> {
    let containerd = get(doc.as_item(), &["plugins", plugin, "containerd"], path)?;
    let runtimes = match containerd {
        Some(c) => get(c, &["runtimes"], path)?,
        None => None,
    };
    let default_name = containerd.and_then(|c| str_at(c, "default_runtime_name"));
    let candidates = default_name
        .filter(|n| !n.starts_with(opts.runtime_name.as_str()))
        .into_iter()
        .chain(["runc", "crun"]);
    let source = candidates
        .filter_map(|name| {
            runtimes
                .and_then(|r| r.as_table_like())
                .and_then(|r| r.get(name))
        })
        .find(|item| item.is_table_like());

    let mut runtime = match source {
        Some(item) => tomlutil::detached_copy(item),
        None => Item::Table(Table::new()),
    };
    if str_at(&runtime, "runtime_type").is_none_or(str::is_empty) {
        set_value(
            &mut runtime,
            "runtime_type",
            Value::from("io.containerd.runc.v2"),
        );
    }
    let here = [
        "plugins",
        plugin,
        "containerd",
        "runtimes",
        opts.runtime_name.as_str(),
    ];
    let options =
        get_or_create(&mut runtime, &["options"], Path::new(&dotted(&here))).map_err(|_| {
            ToolkitError::config(path, format!("`{}.options` must be a table", dotted(&here)))
        })?;
    if let Item::Table(t) = options {
        t.set_implicit(false);
    }
    set_value(
        options,
        "BinaryName",
        Value::from(opts.binary_path.as_str()),
    );
    if let Some(inline) = options.as_inline_table_mut() {
        inline.fmt();
    }
    Ok(runtime)
}

fn str_bool(item: &Item, key: &str) -> Option<bool> {
    item.as_table_like()?.get(key)?.as_bool()
}

fn remove_key(
    doc: &mut DocumentMut,
    table: &[&str],
    key: &str,
    path: &Path,
) -> Result<(), ToolkitError> {
    if get(doc.as_item(), table, path)?.is_some()
        && let Some(t) = get_or_create(doc.as_item_mut(), table, path)?.as_table_like_mut()
    {
        t.remove(key);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(default: bool) -> Options {
        Options {
            runtime_name: "nvidia".into(),
            binary_path: "/usr/local/nvidia/toolkit/nvidia-container-runtime".into(),
            set_as_default: default,
            enable_cdi: false,
        }
    }

    fn run(text: &str, default: bool) -> String {
        let mut doc = tomlutil::parse(text, Path::new("c.toml")).unwrap();
        configure(&mut doc, &opts(default), Path::new("c.toml")).unwrap();
        doc.to_string()
    }

    #[test]
    fn empty_file_becomes_version_2_with_the_runtime() {
        let out = run("", true);
        let doc: DocumentMut = out.parse().unwrap();
        assert_eq!(doc["version"].as_integer(), Some(2));
        let p = &doc["plugins"]["io.containerd.grpc.v1.cri"]["containerd"];
        assert_eq!(p["default_runtime_name"].as_str(), Some("nvidia"));
        assert_eq!(
            p["runtimes"]["nvidia"]["runtime_type"].as_str(),
            Some("io.containerd.runc.v2")
        );
        assert_eq!(
            p["runtimes"]["nvidia"]["options"]["BinaryName"].as_str(),
            Some("/usr/local/nvidia/toolkit/nvidia-container-runtime")
        );
    }

    #[test]
    fn copies_runc_options_for_v3() {
        let src = "version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]\n  runtime_type = 'io.containerd.runc.v2'\n  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\n    SystemdCgroup = true\n";
        let out = run(src, false);
        assert!(out.starts_with(src), "{out}");
        let doc: DocumentMut = out.parse().unwrap();
        let nv =
            &doc["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]["nvidia"];
        assert_eq!(nv["options"]["SystemdCgroup"].as_bool(), Some(true));
        assert!(
            out.contains("\n    BinaryName = "),
            "indented like siblings: {out}"
        );
    }

    #[test]
    fn second_run_changes_nothing() {
        let once = run("version = 2\n", true);
        assert_eq!(run(&once, true), once);
    }

    #[test]
    fn not_default_removes_our_default_only() {
        let once = run("version = 2\n", true);
        let twice = run(&once, false);
        assert!(!twice.contains("default_runtime_name"), "{twice}");
        let theirs = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\ndefault_runtime_name = \"runc\"\n";
        assert!(run(theirs, false).contains("default_runtime_name = \"runc\""));
    }

    #[test]
    fn version_1_is_refused() {
        let doc = tomlutil::parse("[plugins.cri]\n", Path::new("c.toml")).unwrap();
        let err = version(&doc, Path::new("c.toml")).unwrap_err().to_string();
        assert!(err.contains("version 1"), "{err}");
    }

    #[test]
    fn imports_are_added_once_and_removed() {
        let mut doc =
            tomlutil::parse("version = 2\nimports = [\"/a/*.toml\"]\n", Path::new("c")).unwrap();
        add_import(&mut doc, "/etc/containerd/conf.d/*.toml", Path::new("c")).unwrap();
        add_import(&mut doc, "/etc/containerd/conf.d/*.toml", Path::new("c")).unwrap();
        assert_eq!(doc["imports"].as_array().map(|a| a.len()), Some(2));
        remove_import(&mut doc, "/etc/containerd/conf.d/*.toml", Path::new("c")).unwrap();
        assert_eq!(doc.to_string(), "version = 2\nimports = [\"/a/*.toml\"]\n");
    }
}
