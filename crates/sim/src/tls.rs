//! The control plane's CA and serving certificate (for 127.0.0.1 and localhost),
//! generated at first start and kept in the data directory when there is one.

use crate::SimError;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use std::path::Path;
use std::sync::Arc;

/// PEM-encoded CA certificate and serving certificate + key.
#[derive(Clone)]
pub struct TlsMaterial {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

fn err(path: &str, e: impl std::fmt::Display) -> SimError {
    SimError::Tls {
        path: path.to_string(),
        message: e.to_string(),
    }
}

/// A fresh CA and a serving certificate signed by it.
pub fn generate() -> Result<TlsMaterial, SimError> {
    let e = |x: rcgen::Error| err("(generated)", x);
    let ca_key = KeyPair::generate().map_err(e)?;
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(e)?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "gantry-ca");
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca.self_signed(&ca_key).map_err(e)?;
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().map_err(e)?;
    let mut params = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
        .map_err(e)?;
    params
        .distinguished_name
        .push(DnType::CommonName, "gantry-apiserver");
    let cert = params.signed_by(&key, &issuer).map_err(e)?;
    Ok(TlsMaterial {
        ca_pem: ca_cert.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// Reads `ca.crt`, `server.crt`, `server.key` from `dir`, generating them on first start.
pub fn load_or_generate(dir: &Path) -> Result<TlsMaterial, SimError> {
    let files = [
        dir.join("ca.crt"),
        dir.join("server.crt"),
        dir.join("server.key"),
    ];
    if files.iter().all(|f| f.exists()) {
        let read = |p: &Path| {
            std::fs::read_to_string(p).map_err(|source| SimError::Io {
                what: "reading",
                path: p.display().to_string(),
                error: source,
            })
        };
        return Ok(TlsMaterial {
            ca_pem: read(&files[0])?,
            cert_pem: read(&files[1])?,
            key_pem: read(&files[2])?,
        });
    }
    let m = generate()?;
    for (path, data) in files.iter().zip([&m.ca_pem, &m.cert_pem, &m.key_pem]) {
        crate::kubeconfig::write_private(path, data)?;
    }
    Ok(m)
}

/// The rustls server configuration (HTTP/2 and HTTP/1.1 via ALPN).
pub fn server_config(m: &TlsMaterial) -> Result<Arc<rustls::ServerConfig>, SimError> {
    gantry_runtime::tls::server_config(&m.cert_pem, &m.key_pem).map_err(|e| {
        let file = match e.part {
            gantry_runtime::tls::Part::Certificate => "server.crt",
            gantry_runtime::tls::Part::Key => "server.key",
        };
        err(file, e)
    })
}

/// The CA certificate in DER, for building clients.
pub fn ca_der(m: &TlsMaterial) -> Result<Vec<u8>, SimError> {
    rustls_pemfile::certs(&mut m.ca_pem.as_bytes())
        .next()
        .ok_or_else(|| err("ca.crt", "no certificate found"))?
        .map(|c| c.to_vec())
        .map_err(|e| err("ca.crt", e))
}
