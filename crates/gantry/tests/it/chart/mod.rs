//! The Helm chart `deploy/helm/gantry`: its CRDs are the generated ones, `helm lint` passes,
//! `helm template` with the default and other values renders the objects and RBAC the values
//! ask for (the ClusterPolicy and Queues pass Gantry's own validation), and the chart installs
//! on the embedded cluster and uninstalls again.
//!
//! helm comes from `GANTRY_HELM`, else the cache `scripts/tools.sh` fills (it is run when the
//! cache is empty). Tests that need helm skip with the reason only when it cannot be had.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

type Result<T = ()> = anyhow::Result<T>;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub(crate) fn chart() -> PathBuf {
    repo().join("deploy/helm/gantry")
}

/// helm's path, or why there is none.
pub(crate) fn helm() -> std::result::Result<&'static Path, &'static str> {
    static HELM: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    let found = HELM.get_or_init(|| {
        if let Some(p) = std::env::var_os("GANTRY_HELM").filter(|p| !p.is_empty()) {
            let p = PathBuf::from(p);
            return if p.is_file() {
                Ok(p)
            } else {
                Err(format!("GANTRY_HELM={} is not a file", p.display()))
            };
        }
        let out = Command::new("bash")
            .arg(repo().join("scripts/tools.sh"))
            .output()
            .map_err(|e| format!("cannot run scripts/tools.sh: {e}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let path = stdout.lines().last().unwrap_or_default().trim();
        if out.status.success() && Path::new(path).is_file() {
            Ok(PathBuf::from(path))
        } else {
            Err(format!(
                "scripts/tools.sh could not provide helm: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    });
    match found {
        Ok(p) => Ok(p.as_path()),
        Err(why) => Err(why.as_str()),
    }
}

macro_rules! helm_or_skip {
    () => {
        match helm() {
            Ok(p) => p,
            Err(why) => {
                eprintln!("skipping: {why}");
                return Ok(());
            }
        }
    };
}

/// Runs helm with a private HOME (no user repositories or plugins); fails with its stderr.
pub(crate) fn run_helm(helm: &Path, args: &[&str], env: &[(&str, &Path)]) -> Result<String> {
    let home = tempfile::tempdir()?;
    let mut cmd = Command::new(helm);
    cmd.args(args)
        .env("HOME", home.path())
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .env("HELM_DATA_HOME", home.path().join("data"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    gantry_testkit::stdout_of("helm", args, &cmd.output()?)
}

/// `helm template <release> <chart> -n <ns> <extra...>` parsed into its documents.
pub(crate) fn render(helm: &Path, release: &str, ns: &str, extra: &[&str]) -> Result<Vec<Value>> {
    let chart = chart();
    let chart = chart.to_string_lossy();
    let mut args = vec!["template", release, chart.as_ref(), "-n", ns];
    args.extend_from_slice(extra);
    let text = run_helm(helm, &args, &[])?;
    let (docs, problem) = gantry_api::validate::parse_documents(&text);
    anyhow::ensure!(problem.is_none(), "rendered YAML: {problem:?}\n{text}");
    Ok(docs)
}

fn kind_name(d: &Value) -> (String, String) {
    (
        d["kind"].as_str().unwrap_or_default().to_string(),
        d["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

pub(crate) fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    docs.iter()
        .find(|d| kind_name(d) == (kind.to_string(), name.to_string()))
}

pub(crate) fn get<'a>(docs: &'a [Value], kind: &str, name: &str) -> Result<&'a Value> {
    find(docs, kind, name).ok_or_else(|| anyhow::anyhow!("no {kind} {name} rendered"))
}

/// A Role's or ClusterRole's rules as (group/resource, verb) pairs.
fn grants(role: &Value) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    let strs = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    for rule in role["rules"].as_array().into_iter().flatten() {
        for g in strs(&rule["apiGroups"]) {
            for r in strs(&rule["resources"]) {
                for v in strs(&rule["verbs"]) {
                    out.insert((format!("{g}/{r}"), v));
                }
            }
        }
    }
    out
}

fn expand(list: &[(&str, &[&str])]) -> BTreeSet<(String, String)> {
    list.iter()
        .flat_map(|(res, verbs)| verbs.iter().map(move |v| (res.to_string(), v.to_string())))
        .collect()
}

const CRUD: &[&str] = &[
    "get", "list", "watch", "create", "update", "patch", "delete",
];
const READ: &[&str] = &["get", "list", "watch"];

mod install;
mod rbac;
mod schema;
mod values;
