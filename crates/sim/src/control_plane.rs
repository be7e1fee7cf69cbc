//! The embedded control plane: the API server on 127.0.0.1 over HTTPS, the garbage
//! collector, a kubeconfig. `gantry up` runs one in the foreground; tests start one
//! in-process and talk to it with kube-rs or kubectl.

use crate::apiserver::ApiServer;
use crate::store::{SqliteBackend, Store};
use crate::{SimError, gc, kubeconfig, tls};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How to start a control plane.
#[derive(Debug, Clone)]
pub struct ControlPlaneOptions {
    /// Keep state (SQLite), certificates and the token here; None keeps all in memory.
    pub data_dir: Option<PathBuf>,
    /// Port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// Where to write the kubeconfig; None writes `kubeconfig` into the data dir, or a
    /// temporary directory owned by the control plane.
    pub kubeconfig: Option<PathBuf>,
    /// Events kept for watches resuming from an older resourceVersion (default 100,000;
    /// `GANTRY_SIM_WATCH_HISTORY` overrides it, e.g. to measure what the history costs).
    pub watch_history: usize,
    /// Bytes of packed (JSON) objects the history keeps beyond its newest events (default
    /// [`crate::store::HISTORY_BYTES`]; `GANTRY_SIM_WATCH_HISTORY_BYTES` overrides it).
    pub watch_history_bytes: usize,
    /// Connections served at once; None: from the open-file limit
    /// ([`crate::serve::connection_limit`]).
    pub max_connections: Option<usize>,
}

impl Default for ControlPlaneOptions {
    fn default() -> Self {
        Self {
            data_dir: None,
            port: 0,
            kubeconfig: None,
            watch_history: env_or("GANTRY_SIM_WATCH_HISTORY", 100_000),
            watch_history_bytes: env_or(
                "GANTRY_SIM_WATCH_HISTORY_BYTES",
                crate::store::HISTORY_BYTES,
            ),
            max_connections: None,
        }
    }
}

/// A number from the environment variable `name`, else `default`.
fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A running control plane. Dropping it stops the server.
pub struct ControlPlane {
    api: Arc<ApiServer>,
    addr: SocketAddr,
    kubeconfig: PathBuf,
    tls: tls::TlsMaterial,
    token: String,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    _tmp: Option<tempfile::TempDir>,
}

impl ControlPlane {
    /// Starts the API server and controllers and writes the kubeconfig.
    // A plain fn returning a boxed future: the body compiles once, here, not again in
    // every crate that awaits it (docs/benchmarks.md, "Build time").
    pub fn start(
        opts: ControlPlaneOptions,
    ) -> futures::future::BoxFuture<'static, Result<Self, SimError>> {
        Box::pin(Self::start_inner(opts))
    }

    async fn start_inner(opts: ControlPlaneOptions) -> Result<Self, SimError> {
        let (store, material, token, tmp) = match &opts.data_dir {
            Some(dir) => {
                let backend = SqliteBackend::open(dir)?;
                let store = Store::open_with(
                    Box::new(backend),
                    opts.watch_history,
                    opts.watch_history_bytes,
                )?;
                (
                    store,
                    tls::load_or_generate(dir)?,
                    kubeconfig::load_or_create_token(dir)?,
                    None,
                )
            }
            None => {
                let tmp = tempfile::tempdir().map_err(|source| SimError::Io {
                    what: "creating temporary directory",
                    path: "$TMPDIR".into(),
                    error: source,
                })?;
                let memory = Box::new(crate::store::MemoryBackend);
                (
                    Store::open_with(memory, opts.watch_history, opts.watch_history_bytes)?,
                    tls::generate()?,
                    kubeconfig::new_token(),
                    Some(tmp),
                )
            }
        };
        let kubeconfig_path = match (&opts.kubeconfig, &opts.data_dir, &tmp) {
            (Some(p), _, _) => p.clone(),
            (None, Some(d), _) => d.join("kubeconfig"),
            (None, None, Some(t)) => t.path().join("kubeconfig"),
            (None, None, None) => PathBuf::from("gantry.kubeconfig"),
        };
        let listener = TcpListener::bind(("127.0.0.1", opts.port))
            .await
            .map_err(|source| SimError::Bind {
                port: opts.port,
                error: source,
            })?;
        let addr = listener.local_addr().map_err(|source| SimError::Bind {
            port: opts.port,
            error: source,
        })?;
        let api = ApiServer::new(store, Some(token.clone()));
        api.set_address(addr.to_string());
        let url = format!("https://{addr}");
        kubeconfig::write_private(
            &kubeconfig_path,
            &kubeconfig::render(&url, &material.ca_pem, &token),
        )?;
        let (stop, stop_rx) = watch::channel(false);
        let acceptor = tokio_rustls::TlsAcceptor::from(tls::server_config(&material)?);
        let serve = tokio::spawn(crate::serve::serve(
            listener,
            acceptor,
            api.clone(),
            stop_rx.clone(),
            opts.max_connections
                .unwrap_or_else(crate::serve::connection_limit),
        ));
        let collector = tokio::spawn(gc::run(api.clone(), stop_rx));
        Ok(Self {
            api,
            addr,
            kubeconfig: kubeconfig_path,
            tls: material,
            token,
            stop,
            tasks: vec![serve, collector],
            _tmp: tmp,
        })
    }

    /// `https://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("https://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// The bearer token clients must send.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The CA certificate (PEM) that signed the serving certificate.
    pub fn ca_pem(&self) -> &str {
        &self.tls.ca_pem
    }

    /// The in-process API server (store, registry and verbs), for controllers and tests.
    pub fn api(&self) -> &Arc<ApiServer> {
        &self.api
    }

    /// The kube-rs configuration for this control plane (default namespace `default`).
    pub fn kube_config(&self) -> Result<kube::Config, SimError> {
        let url = self.base_url();
        let uri: http::Uri = url
            .parse()
            .map_err(|e: http::uri::InvalidUri| SimError::Client {
                url: url.clone(),
                message: e.to_string(),
            })?;
        let mut cfg = kube::Config::new(uri);
        cfg.root_cert = Some(vec![tls::ca_der(&self.tls)?]);
        cfg.auth_info.token = Some(self.token.clone().into());
        cfg.default_namespace = "default".into();
        Ok(cfg)
    }

    /// A kube-rs client talking HTTPS to this control plane.
    pub fn client(&self) -> Result<kube::Client, SimError> {
        let url = self.base_url();
        kube::Client::try_from(self.kube_config()?).map_err(|e| SimError::Client {
            url,
            message: e.to_string(),
        })
    }

    /// Stops serving and waits for the server and controllers to end.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        for t in self.tasks.drain(..) {
            let _ = t.await;
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        for t in &self.tasks {
            t.abort();
        }
    }
}
