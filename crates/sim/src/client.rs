//! A kube client that speaks HTTP/2 to the API server, as client-go does: every request and
//! watch of a process multiplexed on one connection.
//!
//! kube-rs speaks HTTP/1.1 only, where each watch holds a connection of its own and each
//! concurrent request opens another. A process running a share of a large simulated cluster
//! (`gantry sim kubelets`) has a few watches per node (the feature discovery agent watches
//! its Node and its ConfigMap): at 2,000 nodes that was ~5,700 TLS connections, each with its
//! buffers on both sides.

use std::sync::Arc;

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::{Body, ClientBuilder, ConfigExt};

/// Receive windows: a watch the process is slow to read holds at most this much, and the
/// connection's window is large enough that thousands of quiet watches cannot fill it.
const STREAM_WINDOW: u32 = 1 << 20;
const CONNECTION_WINDOW: u32 = 64 << 20;

/// A client for `config` over HTTP/2 (with the config's TLS, credentials and headers).
pub fn http2_client(config: kube::Config) -> Result<kube::Client, kube::Error> {
    let mut tls = config.rustls_client_config()?;
    tls.alpn_protocols = vec![b"h2".to_vec()];
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(config.connect_timeout);
    let https = hyper_rustls::HttpsConnector::from((http, Arc::new(tls)));
    let hyper = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .http2_only(true)
        .http2_initial_stream_window_size(STREAM_WINDOW)
        .http2_initial_connection_window_size(CONNECTION_WINDOW)
        .build::<_, Body>(https);
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(tower::BoxError::from)
        .service(hyper);
    Ok(ClientBuilder::new(service, config.default_namespace).build())
}
