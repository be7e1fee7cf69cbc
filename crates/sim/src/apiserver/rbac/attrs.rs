//! A request's authorization attributes, as the API server's `RequestInfoFactory` derives
//! them from the method, path and query: verb, API group, resource, subresource, namespace,
//! name — or, for paths outside `/api/v1/…` and `/apis/G/V/…`, a non-resource URL.

/// What a request asks to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attributes {
    /// `get list watch create update patch delete deletecollection` (resource requests) or
    /// the lower-cased HTTP method (non-resource requests).
    pub verb: String,
    /// `None`: a non-resource request (discovery, `/version`, `/metrics`).
    pub resource: Option<ResourceAttrs>,
    pub path: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResourceAttrs {
    pub group: String,
    pub resource: String,
    pub subresource: String,
    /// Empty for cluster-scoped objects and requests across all namespaces.
    pub namespace: String,
    /// Empty for collections (list, watch, create, deletecollection).
    pub name: String,
}

impl ResourceAttrs {
    /// `pods/binding`, or just `pods`.
    pub fn combined(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }
}

fn truthy(v: &str) -> bool {
    v == "true" || v == "1"
}

/// The attributes of `method path?query`.
pub fn parse(method: &str, path: &str, query: &str) -> Attributes {
    let parts: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let non_resource = || Attributes {
        verb: method.to_ascii_lowercase(),
        resource: None,
        path: path.to_string(),
    };
    // /api/v1/<rest> or /apis/<group>/<version>/<rest>
    let (group, rest) = match parts.as_slice() {
        ["api", _version, rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => return non_resource(),
    };
    if rest.is_empty() {
        return non_resource();
    }
    let mut rest = rest.to_vec();
    let mut watch = query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .any(|(k, v)| k == "watch" && truthy(v));
    if rest.first() == Some(&"watch") {
        watch = true;
        rest.remove(0);
    }
    let mut a = ResourceAttrs {
        group: group.to_string(),
        ..Default::default()
    };
    // /namespaces/{ns}/{resource}/…; /namespaces/{ns} and its status/finalize are the
    // namespace itself (whose namespace is its own name, as upstream).
    if rest.first() == Some(&"namespaces") && rest.len() > 1 {
        a.namespace = rest[1].to_string();
        if rest.len() > 2 && !matches!(rest[2], "status" | "finalize") {
            rest.drain(..2);
        }
    }
    a.resource = rest.first().map(|s| s.to_string()).unwrap_or_default();
    a.name = rest.get(1).map(|s| s.to_string()).unwrap_or_default();
    a.subresource = rest.get(2).map(|s| s.to_string()).unwrap_or_default();
    let verb = match method {
        "GET" | "HEAD" if watch => "watch",
        "GET" | "HEAD" if a.name.is_empty() => "list",
        "GET" | "HEAD" => "get",
        "POST" => "create",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" if a.name.is_empty() => "deletecollection",
        "DELETE" => "delete",
        other => {
            return Attributes {
                verb: other.to_ascii_lowercase(),
                resource: Some(a),
                path: path.to_string(),
            };
        }
    };
    Attributes {
        verb: verb.to_string(),
        resource: Some(a),
        path: path.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(method: &str, path: &str, query: &str) -> (String, ResourceAttrs) {
        let a = parse(method, path, query);
        (a.verb, a.resource.expect("resource request"))
    }

    #[test]
    fn resource_requests() {
        let (v, a) = r("GET", "/api/v1/namespaces/x/pods", "");
        assert_eq!(
            (v.as_str(), a.resource.as_str(), a.namespace.as_str()),
            ("list", "pods", "x")
        );
        let (v, a) = r("GET", "/api/v1/pods", "watch=true&resourceVersion=1");
        assert_eq!((v.as_str(), a.namespace.as_str()), ("watch", ""));
        let (v, a) = r("GET", "/api/v1/watch/namespaces/x/pods/p", "");
        assert_eq!((v.as_str(), a.name.as_str()), ("watch", "p"));
        let (v, a) = r("POST", "/api/v1/namespaces/x/pods/p/binding", "");
        assert_eq!(
            (v.as_str(), a.combined().as_str(), a.name.as_str()),
            ("create", "pods/binding", "p")
        );
        let (v, a) = r("PATCH", "/apis/scheduling.run.ai/v2/queues/q/status", "");
        assert_eq!(
            (
                v.as_str(),
                a.group.as_str(),
                a.combined().as_str(),
                a.namespace.as_str()
            ),
            ("patch", "scheduling.run.ai", "queues/status", "")
        );
        let (v, _) = r("DELETE", "/apis/apps/v1/namespaces/x/deployments", "");
        assert_eq!(v, "deletecollection");
        let (v, a) = r("GET", "/api/v1/namespaces/x", "");
        assert_eq!(
            (
                v.as_str(),
                a.resource.as_str(),
                a.name.as_str(),
                a.namespace.as_str()
            ),
            ("get", "namespaces", "x", "x")
        );
        let (_, a) = r("PUT", "/api/v1/namespaces/x/finalize", "");
        assert_eq!(
            (a.resource.as_str(), a.subresource.as_str()),
            ("namespaces", "finalize")
        );
    }

    #[test]
    fn non_resource_requests() {
        for p in [
            "/api",
            "/apis",
            "/api/v1",
            "/apis/apps/v1",
            "/version",
            "/metrics",
            "/openapi/v3",
        ] {
            let a = parse("GET", p, "");
            assert_eq!((a.verb.as_str(), a.resource), ("get", None), "{p}");
        }
    }
}
