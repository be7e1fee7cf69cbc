//! The kubeconfig `gantry up` writes: the server URL, the CA and a bearer token.

use crate::SimError;
use base64::Engine;
use std::path::Path;

/// Renders a kubeconfig for `url` trusting `ca_pem` and authenticating with `token`.
pub fn render(url: &str, ca_pem: &str, token: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: gantry
  cluster:
    server: {url}
    certificate-authority-data: {ca}
users:
- name: gantry-admin
  user:
    token: {token}
contexts:
- name: gantry
  context:
    cluster: gantry
    user: gantry-admin
    namespace: default
current-context: gantry
preferences: {{}}
"
    )
}

/// Writes a file readable only by its owner (it carries a credential or a key).
pub fn write_private(path: &Path, data: &str) -> Result<(), SimError> {
    let io = |source| SimError::Io {
        what: "writing",
        path: path.display().to_string(),
        source,
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    std::fs::write(path, data).map_err(io)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
    }
    Ok(())
}

/// A new random bearer token.
pub fn new_token() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..32)
        .map(|_| format!("{:x}", rng.random_range(0..16u8)))
        .collect()
}

/// The token kept in `dir/token`, created on first start.
pub fn load_or_create_token(dir: &Path) -> Result<String, SimError> {
    let path = dir.join("token");
    match std::fs::read_to_string(&path) {
        Ok(t) if !t.trim().is_empty() => Ok(t.trim().to_string()),
        _ => {
            let t = new_token();
            write_private(&path, &t)?;
            Ok(t)
        }
    }
}
