//! Content negotiation for reads: which form of the objects a get, list or watch answers
//! with, by the client's `Accept`: the objects themselves, a `meta.k8s.io` `Table`
//! (`table`, `kubectl get`'s server-side printing) or `PartialObjectMetadata` (`partial`).

use http::{HeaderMap, header};

/// How the client asked for the objects, by its first acceptable media type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// The objects themselves.
    Object,
    /// A `Table` of this `meta.k8s.io` version.
    Table(&'static str),
    /// `PartialObjectMetadata` of this `meta.k8s.io` version.
    Metadata(&'static str),
}

/// The form of the first media type in `Accept` that this server offers.
pub fn requested(headers: &HeaderMap) -> Form {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return Form::Object;
    };
    for media in accept.split(',') {
        let mut parts = media.split(';').map(str::trim);
        let base = parts.next().unwrap_or_default();
        if base != "application/json" && base != "*/*" {
            continue;
        }
        let params: Vec<(&str, &str)> = parts.filter_map(|p| p.split_once('=')).collect();
        let param = |k: &str| params.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
        let version = match (param("g"), param("v")) {
            (Some("meta.k8s.io"), Some("v1")) => "meta.k8s.io/v1",
            (Some("meta.k8s.io"), Some("v1beta1")) => "meta.k8s.io/v1beta1",
            _ if param("as").is_none() => return Form::Object,
            // A form this server does not offer: try the client's next choice.
            _ => continue,
        };
        match param("as") {
            None => return Form::Object,
            Some("Table") => return Form::Table(version),
            Some("PartialObjectMetadata" | "PartialObjectMetadataList") => {
                return Form::Metadata(version);
            }
            _ => continue,
        }
    }
    Form::Object
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, v.parse().unwrap());
        h
    }

    #[test]
    fn the_first_offered_media_type_decides() {
        assert_eq!(requested(&HeaderMap::new()), Form::Object);
        assert_eq!(requested(&accept("application/json")), Form::Object);
        assert_eq!(
            requested(&accept(
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
            )),
            Form::Metadata("meta.k8s.io/v1")
        );
        assert_eq!(
            requested(&accept(
                "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1, application/json"
            )),
            Form::Metadata("meta.k8s.io/v1beta1")
        );
        // kubectl's Accept: a Table first, then the object.
        assert_eq!(
            requested(&accept(
                "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
            )),
            Form::Table("meta.k8s.io/v1")
        );
        // An unknown form or version is passed over for the next.
        assert_eq!(
            requested(&accept(
                "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v2,application/json;as=Table;v=v1;g=meta.k8s.io"
            )),
            Form::Table("meta.k8s.io/v1")
        );
        assert_eq!(
            requested(&accept(
                "application/yaml, application/json;as=Other;g=x;v=v1"
            )),
            Form::Object
        );
    }

    #[test]
    fn accept_negotiation_follows_the_clients_order() {
        let mut h = HeaderMap::new();
        h.insert(
            header::ACCEPT,
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
                .parse()
                .unwrap(),
        );
        assert_eq!(requested(&h), Form::Table("meta.k8s.io/v1"));
        h.insert(
            header::ACCEPT,
            "application/json;as=Table;v=v2;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io"
                .parse()
                .unwrap(),
        );
        assert_eq!(requested(&h), Form::Table("meta.k8s.io/v1beta1"));
        h.insert(header::ACCEPT, "application/json".parse().unwrap());
        assert_eq!(requested(&h), Form::Object);
        h.insert(
            header::ACCEPT,
            "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"
                .parse()
                .unwrap(),
        );
        assert_eq!(requested(&h), Form::Metadata("meta.k8s.io/v1"));
    }
}
