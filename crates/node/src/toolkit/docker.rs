//! Docker `daemon.json` edits. The file is parsed with serde_json to decide *what* changes,
//! then edited as text so every byte we do not touch stays as the user wrote it.

use super::error::ToolkitError;
use super::jsonedit::{indent_unit, pretty, remove_path, set_path};
use serde_json::{Map, Value, json};
use std::path::Path;

/// What to register.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    pub runtime_name: String,
    pub binary_path: String,
    pub set_as_default: bool,
    pub enable_cdi: bool,
}

/// Parses `daemon.json`; an empty file is `{}`.
pub fn parse(text: &str, path: &Path) -> Result<Map<String, Value>, ToolkitError> {
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ToolkitError::config(
            path,
            "the top level must be a JSON object",
        )),
        Err(err) => {
            let (line, column) = (err.line(), err.column().max(1));
            let message = err.to_string();
            let message = message
                .split(" at line ")
                .next()
                .unwrap_or(&message)
                .to_string();
            Err(ToolkitError::Json {
                path: path.to_path_buf(),
                line,
                column,
                message,
            })
        }
    }
}

/// Returns the edited file text (the input itself when nothing needs to change).
pub fn configure(text: &str, opts: &Options, path: &Path) -> Result<String, ToolkitError> {
    let current = parse(text, path)?;
    let mut wanted = current.clone();
    let runtime = json!({ "args": [], "path": opts.binary_path });
    let mut edits: Vec<Edit> = Vec::new();
    if wanted.get("runtimes").is_some_and(|r| !r.is_object()) {
        return Err(ToolkitError::config(path, "`runtimes` must be an object"));
    }
    let runtimes = wanted.entry("runtimes").or_insert_with(|| json!({}));
    if runtimes.get(&opts.runtime_name) != Some(&runtime) {
        if let Some(r) = runtimes.as_object_mut() {
            r.insert(opts.runtime_name.clone(), runtime.clone());
        }
        edits.push(Edit::Set(
            vec!["runtimes".into(), opts.runtime_name.clone()],
            runtime,
        ));
    }
    let default = wanted
        .get("default-runtime")
        .and_then(Value::as_str)
        .map(str::to_string);
    if opts.set_as_default && default.as_deref() != Some(opts.runtime_name.as_str()) {
        let v = Value::from(opts.runtime_name.as_str());
        wanted.insert("default-runtime".into(), v.clone());
        edits.push(Edit::Set(vec!["default-runtime".into()], v));
    } else if !opts.set_as_default && default.as_deref() == Some(opts.runtime_name.as_str()) {
        wanted.remove("default-runtime");
        edits.push(Edit::Remove(vec!["default-runtime".into()]));
    }
    if opts.enable_cdi
        && wanted.get("features").and_then(|f| f.get("cdi")) != Some(&Value::Bool(true))
    {
        if wanted.get("features").is_some_and(|f| !f.is_object()) {
            return Err(ToolkitError::config(path, "`features` must be an object"));
        }
        let features = wanted.entry("features").or_insert_with(|| json!({}));
        if let Some(f) = features.as_object_mut() {
            f.insert("cdi".into(), Value::Bool(true));
        }
        edits.push(Edit::Set(
            vec!["features".into(), "cdi".into()],
            Value::Bool(true),
        ));
    }
    finish(text, &wanted, edits)
}

/// Removes what [`configure`] adds (`enable_cdi` stays: it may be the user's own setting).
pub fn unconfigure(text: &str, runtime_name: &str, path: &Path) -> Result<String, ToolkitError> {
    let mut wanted = parse(text, path)?;
    let mut edits = Vec::new();
    let mut emptied = false;
    if let Some(runtimes) = wanted.get_mut("runtimes").and_then(Value::as_object_mut)
        && runtimes.remove(runtime_name).is_some()
    {
        emptied = runtimes.is_empty();
        edits.push(Edit::Remove(vec!["runtimes".into(), runtime_name.into()]));
    }
    if emptied {
        wanted.remove("runtimes");
        edits.push(Edit::Remove(vec!["runtimes".into()]));
    }
    if wanted.get("default-runtime").and_then(Value::as_str) == Some(runtime_name) {
        wanted.remove("default-runtime");
        edits.push(Edit::Remove(vec!["default-runtime".into()]));
    }
    finish(text, &wanted, edits)
}

enum Edit {
    Set(Vec<String>, Value),
    Remove(Vec<String>),
}

fn finish(
    text: &str,
    wanted: &Map<String, Value>,
    edits: Vec<Edit>,
) -> Result<String, ToolkitError> {
    if edits.is_empty() {
        return Ok(text.to_string());
    }
    let base = if text.trim().is_empty() {
        "{}\n".to_string()
    } else {
        text.to_string()
    };
    let edited = edits.iter().try_fold(base, |acc, edit| match edit {
        Edit::Set(keys, v) => set_path(&acc, keys, v),
        Edit::Remove(keys) => remove_path(&acc, keys),
    });
    // The text edit must mean exactly what we decided; if the file's shape defeated it,
    // fall back to re-serialising the whole document.
    match edited {
        Some(out)
            if serde_json::from_str::<Value>(&out).ok().as_ref()
                == Some(&Value::Object(wanted.clone())) =>
        {
            Ok(out)
        }
        _ => {
            let unit = indent_unit(text);
            let mut out = pretty(&Value::Object(wanted.clone()), &unit);
            out.push('\n');
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(default: bool) -> Options {
        Options {
            runtime_name: "nvidia".into(),
            binary_path: "/t/nvidia-container-runtime".into(),
            set_as_default: default,
            enable_cdi: false,
        }
    }

    #[test]
    fn adds_runtime_keeping_other_bytes() {
        let src = "{\n  \"log-opts\": {\"max-size\": \"10m\"},\n  \"insecure-registries\": [\"a:5000\"]\n}\n";
        let out = configure(src, &opts(true), Path::new("d.json")).unwrap();
        assert!(out.starts_with("{\n  \"log-opts\": {\"max-size\": \"10m\"},\n  \"insecure-registries\": [\"a:5000\"],\n  \"runtimes\": {\n    \"nvidia\": {\n      \"args\": [],"), "{out}");
        assert!(
            out.ends_with("\"default-runtime\": \"nvidia\"\n}\n"),
            "{out}"
        );
        assert_eq!(
            configure(&out, &opts(true), Path::new("d.json")).unwrap(),
            out
        );
        assert_eq!(
            unconfigure(&out, "nvidia", Path::new("d.json")).unwrap(),
            src
        );
    }

    #[test]
    fn empty_and_compact_files() {
        let out = configure("", &opts(false), Path::new("d.json")).unwrap();
        assert_eq!(
            out,
            "{\n    \"runtimes\": {\n        \"nvidia\": {\n            \"args\": [],\n            \"path\": \"/t/nvidia-container-runtime\"\n        }\n    }\n}\n"
        );
        let compact = "{\"debug\":true}";
        let out = configure(compact, &opts(false), Path::new("d.json")).unwrap();
        assert!(out.starts_with("{\"debug\":true,"), "{out}");
        assert_eq!(
            unconfigure(&out, "nvidia", Path::new("d.json")).unwrap(),
            compact
        );
    }

    #[test]
    fn malformed_json_names_file_and_position() {
        let err = configure(
            "{\n  \"a\": 1,\n}\n",
            &opts(false),
            Path::new("/etc/docker/daemon.json"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("/etc/docker/daemon.json: invalid JSON at line 3, column 1"),
            "{err}"
        );
    }
}
