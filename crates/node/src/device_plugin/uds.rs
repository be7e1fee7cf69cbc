//! gRPC over unix sockets: serving a plugin socket and dialing the kubelet (or a plugin).

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::{Channel, Endpoint, Server};

use super::error::DevicePluginError;
use super::server::PluginService;
use crate::proto::deviceplugin as pb;
use crate::proto::deviceplugin::device_plugin_server::DevicePluginServer;
use crate::proto::deviceplugin::registration_client::RegistrationClient;

/// Dials a unix socket as a gRPC channel (the URI is a placeholder the connector ignores).
pub async fn connect(path: &Path, timeout: Duration) -> Result<Channel, tonic::transport::Error> {
    let path: PathBuf = path.to_path_buf();
    Endpoint::from_static("http://[::]:0")
        .connect_timeout(timeout)
        .connect_with_connector(tower::service_fn(move |_: http_uri::Uri| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
        }))
        .await
}

mod http_uri {
    pub use tonic::codegen::http::Uri;
}

/// Binds `socket` (removing a stale file first) and serves `service` until `stop` turns
/// true; the socket file is removed on the way out.
pub fn serve(
    resource: &str,
    socket: &Path,
    service: PluginService,
    mut stop: watch::Receiver<bool>,
) -> Result<tokio::task::JoinHandle<()>, DevicePluginError> {
    let serve_err = |message: String| DevicePluginError::Serve {
        resource: resource.to_string(),
        socket: socket.to_path_buf(),
        message,
    };
    match std::fs::remove_file(socket) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(serve_err(format!("removing stale socket: {e}"))),
    }
    let listener = UnixListener::bind(socket).map_err(|e| serve_err(e.to_string()))?;
    let socket = socket.to_path_buf();
    let resource = resource.to_string();
    Ok(tokio::spawn(async move {
        let result = Server::builder()
            .add_service(DevicePluginServer::new(service))
            .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .await;
        if let Err(e) = result {
            tracing::error!(%resource, socket = %socket.display(), error = %e, "device plugin server failed");
        }
        // Only remove the file if it is still ours (a restart may have re-created it).
        let _ = std::fs::remove_file(&socket);
    }))
}

/// Registers one resource with the kubelet.
pub async fn register(
    kubelet_socket: &Path,
    endpoint: &str,
    resource: &str,
) -> Result<(), DevicePluginError> {
    let err = |message: String| DevicePluginError::Register {
        resource: resource.to_string(),
        socket: kubelet_socket.to_path_buf(),
        message,
    };
    let channel = connect(kubelet_socket, Duration::from_secs(5))
        .await
        .map_err(|e| err(e.to_string()))?;
    let mut client = RegistrationClient::new(channel);
    client
        .register(pb::RegisterRequest {
            version: pb::VERSION.to_string(),
            endpoint: endpoint.to_string(),
            resource_name: resource.to_string(),
            options: Some(super::server::plugin_options()),
        })
        .await
        .map_err(|status| err(status.message().to_string()))?;
    Ok(())
}
