//! Server-side printing, as the real API server does it for `kubectl get`: a request whose
//! `Accept` asks for `application/json;as=Table;g=meta.k8s.io;v=v1` (or `v1beta1`) gets a
//! `meta.k8s.io` `Table` instead of the object or list. Built-in kinds get the columns of
//! Kubernetes' own printers (`pkg/printers/internalversion`), custom resources their CRD's
//! `additionalPrinterColumns` (else an `Age` column), always after `Name`. Ages are rendered
//! by the server as `kubectl` shows them (`5m`, `3h12m`), as the real server does.

mod builtin;
mod cells;
mod jsonpath;

/// A pod's STATUS as `kubectl get pods` prints it (`Running`, `ContainerCreating`,
/// `CrashLoopBackOff`, `Init:0/1` …), for views that show a pod's state in one word.
pub fn pod_status(pod: &Value) -> String {
    builtin::cells("", "pods", pod, Utc::now())
        .and_then(|c| c.get(2).and_then(Value::as_str).map(str::to_string))
        .unwrap_or_default()
}

use super::target::Target;
use cells::{Column, age_of, human_duration, name_of};
use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};

/// What each row carries besides its cells (`includeObject`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Include {
    None,
    Metadata,
    Object,
}

impl Include {
    pub fn parse(v: Option<&str>) -> Include {
        match v {
            Some("None") => Include::None,
            Some("Object") => Include::Object,
            _ => Include::Metadata,
        }
    }
}

/// Converts a GET answer (one object or a list) into a Table. `crd` is the custom resource's
/// definition, when `t` is one.
pub fn convert(
    t: &Target,
    crd: Option<&Value>,
    body: &Value,
    api_version: &str,
    include: Include,
    now: DateTime<Utc>,
) -> Value {
    // A CRD's printer columns are read once per answer, not once per row.
    let printer = crd.map(|c| printer_columns(c, &t.version));
    let columns = columns_for(t, printer.as_deref());
    let items: Vec<&Value> = match body.get("items").and_then(Value::as_array) {
        Some(items) => items.iter().collect(),
        None => vec![body],
    };
    let rows: Vec<Value> = items
        .into_iter()
        .map(|o| {
            let cells = cells_for(t, printer.as_deref(), o, now);
            let mut row = Map::new();
            row.insert("cells".into(), Value::Array(cells));
            match include {
                Include::None => {}
                Include::Object => {
                    row.insert("object".into(), o.clone());
                }
                Include::Metadata => {
                    row.insert(
                        "object".into(),
                        json!({
                            "kind": "PartialObjectMetadata",
                            "apiVersion": "meta.k8s.io/v1",
                            "metadata": o.get("metadata").cloned().unwrap_or(json!({})),
                        }),
                    );
                }
            }
            Value::Object(row)
        })
        .collect();
    let mut meta = Map::new();
    if let Some(lm) = body.get("metadata").filter(|_| body.get("items").is_some()) {
        for k in ["resourceVersion", "continue", "remainingItemCount"] {
            if let Some(v) = lm.get(k) {
                meta.insert(k.into(), v.clone());
            }
        }
    } else if let Some(rv) = body.pointer("/metadata/resourceVersion") {
        meta.insert("resourceVersion".into(), rv.clone());
    }
    json!({
        "kind": "Table",
        "apiVersion": api_version,
        "metadata": meta,
        "columnDefinitions": columns.iter().map(Column::json).collect::<Vec<_>>(),
        "rows": rows,
    })
}

fn columns_for(t: &Target, printer: Option<&[(Column, String)]>) -> Vec<Column> {
    if let Some(p) = printer {
        let mut name = Column::new("Name", "string", 0);
        name.description = "Name must be unique within a namespace.".into();
        return std::iter::once(name)
            .chain(p.iter().map(|(c, _)| c.clone()))
            .collect();
    }
    builtin::columns(&t.info.group, &t.info.plural)
        .unwrap_or_else(|| vec![Column::new("Name", "string", 0), age_column()])
}

fn cells_for(
    t: &Target,
    printer: Option<&[(Column, String)]>,
    o: &Value,
    now: DateTime<Utc>,
) -> Vec<Value> {
    if let Some(p) = printer {
        return std::iter::once(name_of(o))
            .chain(p.iter().map(|(col, path)| crd_cell(col, path, o, now)))
            .collect();
    }
    builtin::cells(&t.info.group, &t.info.plural, o, now)
        .unwrap_or_else(|| vec![name_of(o), age_of(o, now)])
}

fn age_column() -> Column {
    let mut c = Column::new("Age", "string", 0);
    c.description = "CreationTimestamp is a timestamp representing the server time when this object was created.".into();
    c
}

/// The served version's `additionalPrinterColumns`, as `(column, jsonPath)`.
fn printer_columns(crd: &Value, version: &str) -> Vec<(Column, String)> {
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let Some(v) = versions
        .iter()
        .find(|v| v.get("name").and_then(Value::as_str) == Some(version))
    else {
        return Vec::new();
    };
    let Some(cols) = v.get("additionalPrinterColumns").and_then(Value::as_array) else {
        let mut age = age_column();
        age.kind = "date";
        return vec![(age, ".metadata.creationTimestamp".into())];
    };
    cols.iter()
        .filter_map(|c| {
            let name = c.get("name")?.as_str()?;
            let path = c.get("jsonPath")?.as_str()?;
            let kind = match c.get("type").and_then(Value::as_str).unwrap_or("string") {
                "integer" => "integer",
                "number" => "number",
                "boolean" => "boolean",
                "date" => "date",
                _ => "string",
            };
            let mut col = Column::new(
                name,
                kind,
                c.get("priority").and_then(Value::as_i64).unwrap_or(0),
            );
            col.description = c
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            Some((col, path.to_string()))
        })
        .collect()
}

/// One CRD cell: the first value the path finds, typed as the column says; `null` (kubectl
/// prints `<none>`) when nothing is there.
fn crd_cell(col: &Column, path: &str, o: &Value, now: DateTime<Utc>) -> Value {
    let found = jsonpath::find(o, path);
    let Some(v) = found.first() else {
        return Value::Null;
    };
    match col.kind {
        "date" => v
            .as_str()
            .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
            .map(|t| Value::String(human_duration(now - t.with_timezone(&Utc))))
            .unwrap_or(Value::Null),
        "integer" => v
            .as_i64()
            .map(Value::from)
            .or_else(|| {
                v.as_str()
                    .and_then(|s| s.parse::<i64>().ok())
                    .map(Value::from)
            })
            .unwrap_or(Value::Null),
        "number" => v.as_f64().map(Value::from).unwrap_or(Value::Null),
        "boolean" => v.as_bool().map(Value::from).unwrap_or(Value::Null),
        // Lists and maps print as their JSON, values found more than once joined by commas.
        _ => Value::String(
            found
                .iter()
                .map(|v| match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect::<Vec<_>>()
                .join(","),
        ),
    }
}
