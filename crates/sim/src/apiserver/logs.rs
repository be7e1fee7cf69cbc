//! `GET /api/v1/namespaces/{ns}/pods/{name}/log`: a container's output (see
//! [`crate::logs`]), with the real server's checks and messages (container name, waiting
//! containers, `previous`), `tailLines`, `limitBytes`, `sinceSeconds`, `timestamps` and
//! `follow`.

use super::server::ApiServer;
use super::status::ApiError;
use super::target::Target;
use crate::logs::{self, Line};
use axum::body::{Body, Bytes};
use axum::response::{IntoResponse, Response};
use http::{StatusCode, header};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// What the client asked for (`PodLogOptions`).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct LogOptions {
    pub container: Option<String>,
    pub follow: bool,
    pub previous: bool,
    pub timestamps: bool,
    pub tail_lines: Option<usize>,
    pub limit_bytes: Option<usize>,
    pub since_seconds: Option<i64>,
}

impl LogOptions {
    pub fn parse(q: &HashMap<String, String>) -> Result<Self, ApiError> {
        let flag = |k: &str| q.get(k).is_some_and(|v| v == "true" || v == "1");
        let num = |k: &str| -> Result<Option<i64>, ApiError> {
            q.get(k)
                .filter(|v| !v.is_empty())
                .map(|v| {
                    v.parse::<i64>().map_err(|_| {
                        ApiError::bad_request(format!("{k}: {v:?} is not a whole number"))
                    })
                })
                .transpose()
        };
        let positive = |k: &str, v: Option<i64>| match v {
            Some(n) if n < 1 => Err(ApiError::bad_request(format!(
                "{k}: must be greater than 0"
            ))),
            v => Ok(v),
        };
        // A negative tailLines means "all", as upstream treats it.
        let tail_lines = num("tailLines")?.and_then(|n| usize::try_from(n).ok());
        Ok(Self {
            container: q.get("container").filter(|c| !c.is_empty()).cloned(),
            follow: flag("follow"),
            previous: flag("previous"),
            timestamps: flag("timestamps"),
            tail_lines,
            limit_bytes: positive("limitBytes", num("limitBytes")?)?.map(|n| n as usize),
            since_seconds: positive("sinceSeconds", num("sinceSeconds")?)?,
        })
    }
}

fn names(spec: &Value, key: &str) -> Vec<String> {
    spec.get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("name").and_then(Value::as_str).map(str::to_string))
        .collect()
}

/// Upstream's `validateContainer`: the container named, or the only one.
pub fn pick_container(
    pod: &Value,
    pod_name: &str,
    asked: Option<&str>,
) -> Result<String, ApiError> {
    let spec = pod.get("spec").cloned().unwrap_or_default();
    let main = names(&spec, "containers");
    let mut all = main.clone();
    all.extend(names(&spec, "initContainers"));
    all.extend(names(&spec, "ephemeralContainers"));
    match asked {
        Some(c) if all.iter().any(|n| n == c) => Ok(c.to_string()),
        Some(c) => Err(ApiError::bad_request(format!(
            "container {c} is not valid for pod {pod_name}"
        ))),
        None if main.len() == 1 => Ok(main[0].clone()),
        None if main.is_empty() => Err(ApiError::bad_request(format!(
            "a container name must be specified for pod {pod_name}"
        ))),
        None => Err(ApiError::bad_request(format!(
            "a container name must be specified for pod {pod_name}, choose one of: [{}]",
            all.join(" ")
        ))),
    }
}

/// The kubelet's `validateContainerLogStatus`: is there a log to read?
pub fn check_status(
    pod: &Value,
    pod_name: &str,
    container: &str,
    previous: bool,
) -> Result<(), ApiError> {
    let status = [
        "containerStatuses",
        "initContainerStatuses",
        "ephemeralContainerStatuses",
    ]
    .iter()
    .filter_map(|k| {
        pod.pointer(&format!("/status/{k}"))
            .and_then(Value::as_array)
    })
    .flatten()
    .find(|s| s.get("name").and_then(Value::as_str) == Some(container));
    let Some(status) = status else {
        return Err(ApiError::bad_request(format!(
            "container {container:?} in pod {pod_name:?} is not available"
        )));
    };
    let terminated_before = status.pointer("/lastState/terminated").is_some();
    if previous {
        if !terminated_before {
            return Err(ApiError::bad_request(format!(
                "previous terminated container {container:?} in pod {pod_name:?} not found"
            )));
        }
        return Ok(());
    }
    if let Some(w) = status.pointer("/state/waiting")
        && !terminated_before
    {
        let reason = w
            .get("reason")
            .and_then(Value::as_str)
            .unwrap_or("ContainerCreating");
        return Err(ApiError::bad_request(format!(
            "container {container:?} in pod {pod_name:?} is waiting to start: {reason}"
        )));
    }
    Ok(())
}

/// Lines as the client asked: since, tail, timestamps; then cut at `limit_bytes`.
pub fn render(lines: &[Line], o: &LogOptions, now: chrono::DateTime<chrono::Utc>) -> String {
    let since = o.since_seconds.map(|s| now - chrono::Duration::seconds(s));
    let kept: Vec<&Line> = lines
        .iter()
        .filter(|l| since.is_none_or(|t| l.time >= t))
        .collect();
    let from = o.tail_lines.map_or(0, |n| kept.len().saturating_sub(n));
    let mut out = String::new();
    for l in &kept[from..] {
        if o.timestamps {
            out.push_str(&l.time.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true));
            out.push(' ');
        }
        out.push_str(&l.text);
        out.push('\n');
    }
    if let Some(n) = o.limit_bytes
        && out.len() > n
    {
        let mut cut = n;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
    }
    out
}

fn text(body: Body) -> Response {
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/plain")
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// The `log` subresource of pod `name`.
pub fn pod_log(
    srv: &ApiServer,
    t: &Target,
    name: &str,
    q: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let o = LogOptions::parse(q)?;
    let pod = srv.get(t, name)?;
    let container = pick_container(&pod, name, o.container.as_deref())?;
    // A pod not yet on a node has no log anywhere: upstream answers an empty one.
    if pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .is_empty()
    {
        return Ok(text(Body::empty()));
    }
    check_status(&pod, name, &container, o.previous)?;
    let uid = pod
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let Some(log) = logs::get(uid, &container) else {
        return Ok(text(Body::empty()));
    };
    let Some(snap) = log.snapshot(o.previous) else {
        return Ok(text(Body::empty()));
    };
    let first = render(&snap.lines, &o, chrono::Utc::now());
    if !o.follow || o.previous {
        return Ok(text(Body::from(first)));
    }
    Ok(text(Body::from_stream(follow(
        log,
        snap.generation,
        snap.next,
        first,
        o,
    ))))
}

/// Where a follower is: the run it reads, the next line, bytes sent so far.
struct Follow {
    log: Arc<logs::ContainerLog>,
    rx: tokio::sync::watch::Receiver<u64>,
    generation: u64,
    next: u64,
    sent: usize,
    pending: Option<String>,
    ended: bool,
}

/// The first chunk, then each new batch of lines until the run ends or the pod goes.
fn follow(
    log: Arc<logs::ContainerLog>,
    generation: u64,
    next: u64,
    first: String,
    o: LogOptions,
) -> impl futures::Stream<Item = Result<Bytes, std::convert::Infallible>> {
    let state = Follow {
        rx: log.subscribe(),
        log,
        generation,
        next,
        sent: first.len(),
        pending: Some(first),
        ended: false,
    };
    let limit = o.limit_bytes;
    let each = LogOptions {
        tail_lines: None,
        since_seconds: None,
        limit_bytes: None,
        ..o
    };
    futures::stream::unfold(state, move |mut f| {
        let each = each.clone();
        async move {
            if let Some(chunk) = f.pending.take() {
                return Some((Ok(Bytes::from(chunk)), f));
            }
            loop {
                if f.ended || limit.is_some_and(|l| f.sent >= l) {
                    return None;
                }
                f.rx.borrow_and_update();
                let (lines, next, ended) = f.log.since(f.generation, f.next);
                f.next = next;
                f.ended = ended;
                if !lines.is_empty() {
                    let mut chunk = render(&lines, &each, chrono::Utc::now());
                    if let Some(l) = limit {
                        let mut cut = l.saturating_sub(f.sent).min(chunk.len());
                        while !chunk.is_char_boundary(cut) {
                            cut -= 1;
                        }
                        chunk.truncate(cut);
                    }
                    f.sent += chunk.len();
                    return Some((Ok(Bytes::from(chunk)), f));
                }
                if ended || f.rx.changed().await.is_err() {
                    return None;
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn q(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn containers_are_picked_and_checked_like_upstream() {
        let pod = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}], "initContainers": [{"name": "i"}]}});
        let err = pick_container(&pod, "p", None).unwrap_err();
        assert_eq!(err.code, 400);
        assert!(
            err.message.contains("choose one of: [a b i]"),
            "{}",
            err.message
        );
        assert_eq!(pick_container(&pod, "p", Some("i")).unwrap(), "i");
        assert_eq!(
            pick_container(&pod, "p", Some("zz")).unwrap_err().message,
            "container zz is not valid for pod p"
        );
        let one = json!({"spec": {"containers": [{"name": "only"}]}});
        assert_eq!(pick_container(&one, "p", None).unwrap(), "only");

        let waiting = json!({"status": {"containerStatuses": [{"name": "a", "state": {"waiting": {"reason": "ContainerCreating"}}}]}});
        assert_eq!(
            check_status(&waiting, "p", "a", false).unwrap_err().message,
            "container \"a\" in pod \"p\" is waiting to start: ContainerCreating"
        );
        assert!(
            check_status(&waiting, "p", "a", true)
                .unwrap_err()
                .message
                .contains("previous terminated")
        );
        assert!(
            check_status(&waiting, "p", "b", false)
                .unwrap_err()
                .message
                .contains("is not available")
        );
        // Crash-looping: waiting, but the last run's log is what kubectl shows.
        let looping = json!({"status": {"containerStatuses": [{"name": "a", "state": {"waiting": {"reason": "CrashLoopBackOff"}}, "lastState": {"terminated": {"exitCode": 1}}}]}});
        assert!(check_status(&looping, "p", "a", false).is_ok());
        assert!(check_status(&looping, "p", "a", true).is_ok());
    }

    #[test]
    fn renders_tail_since_timestamps_and_limits() {
        let now = chrono::Utc::now();
        let line = |ago: i64, t: &str| Line {
            time: now - chrono::Duration::seconds(ago),
            text: t.into(),
        };
        let lines = vec![line(100, "one"), line(10, "two"), line(1, "three")];
        let o = LogOptions::parse(&q(&[("tailLines", "2")])).unwrap();
        assert_eq!(render(&lines, &o, now), "two\nthree\n");
        let o = LogOptions::parse(&q(&[("sinceSeconds", "50")])).unwrap();
        assert_eq!(render(&lines, &o, now), "two\nthree\n");
        let o = LogOptions::parse(&q(&[("limitBytes", "6")])).unwrap();
        assert_eq!(render(&lines, &o, now), "one\ntw");
        let o = LogOptions::parse(&q(&[("timestamps", "true"), ("tailLines", "1")])).unwrap();
        let out = render(&lines, &o, now);
        assert!(out.ends_with("Z three\n") && out.len() > 30, "{out}");
        let o = LogOptions::parse(&q(&[("tailLines", "-1")])).unwrap();
        assert_eq!(render(&lines, &o, now).lines().count(), 3);
        assert!(LogOptions::parse(&q(&[("limitBytes", "0")])).is_err());
        assert!(LogOptions::parse(&q(&[("tailLines", "x")])).is_err());
    }
}
