//! The one way Gantry's processes build an API client.

use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(
        "no kubeconfig given, and neither in-cluster config nor KUBECONFIG / ~/.kube/config worked: {0}"
    )]
    NoConfig(String),
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig { path: String, message: String },
}

/// A client from `kubeconfig`; without one, in-cluster config, else `KUBECONFIG` /
/// `~/.kube/config`.
pub async fn client(kubeconfig: Option<&Path>) -> Result<kube::Client, ClientError> {
    let Some(p) = kubeconfig else {
        return kube::Client::try_default()
            .await
            .map_err(|e| ClientError::NoConfig(e.to_string()));
    };
    let bad = |message: String| ClientError::Kubeconfig {
        path: p.display().to_string(),
        message,
    };
    let kc = kube::config::Kubeconfig::read_from(p).map_err(|e| bad(e.to_string()))?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .map_err(|e| bad(e.to_string()))?;
    kube::Client::try_from(cfg).map_err(|e| bad(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_missing_kubeconfig_is_named() {
        let Err(e) = client(Some(Path::new("/nonexistent/kubeconfig"))).await else {
            panic!("a client from a missing kubeconfig");
        };
        assert!(
            e.to_string()
                .starts_with("kubeconfig /nonexistent/kubeconfig: "),
            "{e}"
        );
    }
}
