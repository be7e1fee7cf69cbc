//! The sim's control socket, `<sim dir>/sim-control.sock` (`<data-dir>/sim` for `gantry up`): one JSON request per line
//! (`{"node":"h100-80gb-0","fault":{"kind":"xid","gpu":3,"xid":79}}`), one JSON reply per line
//! (`{"ok":true,"message":"…"}` or `{"ok":false,"error":"…"}`). `gantry sim fault` is its client.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::task::JoinHandle;

use super::error::ClusterError;
use super::faults::{Fault, apply_fault};
use crate::kubelet::NodeShared;

pub const SOCKET_NAME: &str = "sim-control.sock";

pub fn socket_path(root: &Path) -> PathBuf {
    root.join(SOCKET_NAME)
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    pub node: String,
    pub fault: Fault,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

async fn handle(nodes: &BTreeMap<String, Arc<NodeShared>>, line: &str) -> Reply {
    let result = match serde_json::from_str::<Request>(line) {
        Err(e) => Err(format!("bad request: {e}")),
        Ok(req) => match nodes.get(&req.node) {
            None => Err(format!(
                "no simulated node named {:?} (nodes: {})",
                req.node,
                nodes
                    .keys()
                    .take(10)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            Some(n) => apply_fault(n, &req.fault).await.map_err(|e| e.to_string()),
        },
    };
    match result {
        Ok(m) => Reply {
            ok: true,
            message: Some(m),
            error: None,
        },
        Err(e) => Reply {
            ok: false,
            message: None,
            error: Some(e),
        },
    }
}

async fn connection(nodes: Arc<BTreeMap<String, Arc<NodeShared>>>, stream: UnixStream) {
    let (r, mut w) = stream.into_split();
    let mut lines = BufReader::new(r).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let reply = handle(&nodes, &line).await;
        let mut out = serde_json::to_string(&reply).unwrap_or_else(|_| "{\"ok\":false}".into());
        out.push('\n');
        if w.write_all(out.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// Serve the control socket (replacing a stale one).
pub async fn serve(
    root: &Path,
    nodes: Arc<BTreeMap<String, Arc<NodeShared>>>,
) -> Result<JoinHandle<()>, ClusterError> {
    let path = socket_path(root);
    let err = |e: std::io::Error| ClusterError::Control {
        path: path.clone(),
        reason: e.to_string(),
    };
    tokio::fs::create_dir_all(root).await.map_err(err)?;
    let _ = tokio::fs::remove_file(&path).await;
    let listener = UnixListener::bind(&path).map_err(err)?;
    Ok(tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(connection(nodes.clone(), stream));
        }
    }))
}

/// Client side: send one request to a running sim and return its message.
pub async fn send(root: &Path, req: &Request) -> Result<String, ClusterError> {
    let path = socket_path(root);
    let err = |reason: String| ClusterError::Control {
        path: path.clone(),
        reason,
    };
    let stream = UnixStream::connect(&path)
        .await
        .map_err(|e| err(format!("{e} (is `gantry up` running with this data dir?)")))?;
    let (r, mut w) = stream.into_split();
    let mut body = serde_json::to_string(req).map_err(|e| err(e.to_string()))?;
    body.push('\n');
    w.write_all(body.as_bytes())
        .await
        .map_err(|e| err(e.to_string()))?;
    let line = BufReader::new(r)
        .lines()
        .next_line()
        .await
        .map_err(|e| err(e.to_string()))?
        .ok_or_else(|| err("the sim closed the connection without answering".into()))?;
    let reply: Reply = serde_json::from_str(&line).map_err(|e| err(format!("bad reply: {e}")))?;
    if reply.ok {
        Ok(reply.message.unwrap_or_default())
    } else {
        Err(ClusterError::Fault {
            node: req.node.clone(),
            reason: reply.error.unwrap_or_else(|| "refused".into()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_wire_format() {
        let r = Request {
            node: "n".into(),
            fault: Fault::Xid { gpu: 3, xid: 79 },
        };
        let s = serde_json::to_string(&r).unwrap();
        assert_eq!(s, r#"{"node":"n","fault":{"kind":"xid","gpu":3,"xid":79}}"#);
        let p: Request =
            serde_json::from_str(r#"{"node":"n","fault":{"kind":"power-off"}}"#).unwrap();
        assert_eq!(p.fault, Fault::PowerOff);
        let e: Request =
            serde_json::from_str(r#"{"node":"n","fault":{"kind":"ecc-dbe","gpu":1}}"#).unwrap();
        assert_eq!(e.fault, Fault::EccDbe { gpu: 1 });
    }
}
