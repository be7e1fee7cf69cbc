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

/// Creates `dir` and its missing parents readable only by their owner (0700).
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(0o700);
    }
    b.create(dir)
}

/// Opens `path` for writing, creating it readable only by its owner (0600) if missing.
pub fn open_private(path: &Path, create_new: bool) -> std::io::Result<std::fs::File> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true);
    if create_new {
        o.create_new(true);
    } else {
        o.create(true);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    o.open(path)
}

/// Writes a file readable only by its owner (it carries a credential or a key): the data
/// goes to a new 0600 file beside it, which then replaces `path` (never chmod-ed after,
/// so there is no moment at which another user could open it).
pub fn write_private(path: &Path, data: &str) -> Result<(), SimError> {
    use std::io::Write;
    let io = |source| SimError::Io {
        what: "writing",
        path: path.display().to_string(),
        error: source,
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty())
        && !parent.exists()
    {
        create_private_dir(parent).map_err(io)?;
    }
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".into());
    let tmp = path.with_file_name(format!(
        ".{file_name}.{}.tmp",
        uuid::Uuid::new_v4().simple()
    ));
    let written = open_private(&tmp, true).and_then(|mut f| {
        f.write_all(data.as_bytes())?;
        f.sync_all()
    });
    if let Err(e) = written.and_then(|_| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(e));
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
