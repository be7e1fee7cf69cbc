//! ServiceAccount tokens: issued by the TokenRequest API, opaque (256 random bits), kept in
//! memory, and valid while their ServiceAccount (same uid), the pod they are bound to and
//! their expiry last — what upstream's bound service account tokens guarantee.

use std::collections::HashMap;
use std::sync::Mutex;

use base64::Engine;
use chrono::{DateTime, Duration, Utc};
use rand::RngCore;
use serde_json::{Value, json};

use super::super::status::ApiError;
use super::rules::User;
use crate::store::Store;

/// Upstream's default and minimum `expirationSeconds`.
const DEFAULT_EXPIRATION: i64 = 3600;
const MIN_EXPIRATION: i64 = 600;

struct Issued {
    namespace: String,
    name: String,
    uid: String,
    /// (name, uid) of the pod the token is bound to.
    pod: Option<(String, String)>,
    expires: DateTime<Utc>,
}

#[derive(Default)]
pub(super) struct Tokens {
    issued: Mutex<HashMap<String, Issued>>,
}

fn uid_of(v: &Value) -> &str {
    v.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

impl Tokens {
    /// The ServiceAccount a token stands for, while it is valid.
    pub(super) fn resolve(&self, store: &Store, token: &str) -> Option<User> {
        let mut issued = self.issued.lock().unwrap_or_else(|e| e.into_inner());
        let t = issued.get(token)?;
        let sa_ok = store
            .get("/serviceaccounts", &t.namespace, &t.name)
            .is_some_and(|sa| uid_of(&sa) == t.uid);
        let pod_ok = t.pod.as_ref().is_none_or(|(name, uid)| {
            store
                .get("/pods", &t.namespace, name)
                .is_some_and(|p| uid.is_empty() || uid_of(&p) == uid)
        });
        if sa_ok && pod_ok && Utc::now() < t.expires {
            return Some(User::service_account(&t.namespace, &t.name));
        }
        issued.remove(token);
        None
    }
}

/// `POST /api/v1/namespaces/NS/serviceaccounts/NAME/token`: a TokenRequest answered with its
/// `status.token` and `status.expirationTimestamp`.
pub(super) fn request(
    store: &Store,
    tokens: &Tokens,
    ns: &str,
    name: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> Result<Value, ApiError> {
    let sa = store
        .get("/serviceaccounts", ns, name)
        .ok_or_else(|| ApiError::not_found("serviceaccounts", "", name))?;
    let mut req: Value = if body.is_empty() {
        json!({})
    } else {
        let format = super::super::decode::Format::from_content_type(content_type)?;
        super::super::decode::body(body, format, "create")?
    };
    let spec = req.get("spec").cloned().unwrap_or_else(|| json!({}));
    let secs = spec
        .get("expirationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(DEFAULT_EXPIRATION);
    if secs < MIN_EXPIRATION {
        return Err(ApiError::invalid(
            "TokenRequest",
            name,
            "spec.expirationSeconds",
            &format!("may not specify a duration less than {MIN_EXPIRATION} seconds"),
        ));
    }
    let pod = match spec.get("boundObjectRef") {
        Some(r) if r.get("kind").and_then(Value::as_str) == Some("Pod") => {
            let pname = r.get("name").and_then(Value::as_str).unwrap_or_default();
            let puid = r.get("uid").and_then(Value::as_str).unwrap_or_default();
            let found = store
                .get("/pods", ns, pname)
                .ok_or_else(|| ApiError::not_found("pods", "", pname))?;
            if !puid.is_empty() && uid_of(&found) != puid {
                return Err(ApiError::conflict(
                    "pods",
                    "",
                    pname,
                    "the uid in boundObjectRef does not match",
                ));
            }
            Some((pname.to_string(), puid.to_string()))
        }
        Some(r) => {
            return Err(ApiError::bad_request(format!(
                "TokenRequest for serviceaccount {name:?}: boundObjectRef kind {} is not supported (Pod is)",
                r.get("kind").unwrap_or(&Value::Null)
            )));
        }
        None => None,
    };
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let token = format!(
        "gantry-sa.{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    );
    let expires = Utc::now() + Duration::seconds(secs);
    tokens
        .issued
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(
            token.clone(),
            Issued {
                namespace: ns.to_string(),
                name: name.to_string(),
                uid: uid_of(&sa).to_string(),
                pod,
                expires,
            },
        );
    req["apiVersion"] = json!("authentication.k8s.io/v1");
    req["kind"] = json!("TokenRequest");
    req["metadata"] =
        json!({"name": name, "namespace": ns, "creationTimestamp": super::super::meta::now()});
    req["spec"]["expirationSeconds"] = json!(secs);
    req["status"] = json!({
        "token": token,
        "expirationTimestamp": expires.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
    });
    Ok(req)
}
