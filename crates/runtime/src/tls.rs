//! A rustls server configuration from PEM text: the one place that reads a serving
//! certificate and key (the embedded API server's, the admission webhook's).

use std::sync::Arc;

/// Which input was wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Certificate,
    Key,
}

#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct TlsError {
    pub part: Part,
    pub message: String,
}

/// TLS 1.2/1.3 with the ring provider, HTTP/2 and HTTP/1.1 offered via ALPN.
pub fn server_config(cert_pem: &str, key_pem: &str) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let err = |part, message: String| TlsError { part, message };
    let certs: Vec<_> = rustls_pemfile::certs(&mut cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| err(Part::Certificate, e.to_string()))?;
    if certs.is_empty() {
        return Err(err(Part::Certificate, "no certificate found".into()));
    }
    let key = rustls_pemfile::private_key(&mut key_pem.as_bytes())
        .map_err(|e| err(Part::Key, e.to_string()))?
        .ok_or_else(|| err(Part::Key, "no private key found".into()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| err(Part::Certificate, e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| err(Part::Certificate, e.to_string()))?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_parts_are_named() {
        assert_eq!(server_config("", "").unwrap_err().part, Part::Certificate);
    }
}
