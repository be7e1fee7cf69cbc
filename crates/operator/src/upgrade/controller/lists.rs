//! What a round reads: the driver pods and the nodes, in pages, and the view the plan takes.

use super::*;
use gantry_api::lenient::Lenient;

/// The pods a round reads: the driver pods (the operator namespace, paged, kept only if a driver
/// DaemonSet owns them or they are orphaned driver pods) and every pod on a node that is mid
/// upgrade (the waits, deletions, drains and validation read those). Not every pod of the
/// cluster: at 1,000 nodes that list was tens of megabytes, every round.
pub(super) async fn list_pods(
    client: &kube::Client,
    namespace: &str,
    drivers: &[&DaemonSet],
    in_flight: &BTreeSet<&str>,
) -> Result<Vec<Pod>, UpgradeError> {
    let uids: Vec<&str> = drivers
        .iter()
        .filter_map(|d| d.metadata.uid.as_deref())
        .collect();
    let mut out: BTreeMap<(String, String), Pod> = BTreeMap::new();
    let mut keep = |mut p: Pod| {
        p.metadata.managed_fields = None;
        let key = (
            p.metadata.namespace.clone().unwrap_or_default(),
            p.metadata.name.clone().unwrap_or_default(),
        );
        out.insert(key, p);
    };
    // Lenient: one stored pod a typed client cannot decode must not fail every round.
    let in_ns = Api::<Lenient<Pod>>::namespaced(client.clone(), namespace);
    let fetch = |p: ListParams| {
        let api = in_ns.clone();
        async move { api.list(&p).await }
    };
    gantry_runtime::paged::each_page(ListParams::default(), PODS_PAGE, fetch, |items| {
        for p in items.into_iter().filter_map(Lenient::salvaged) {
            if uids.iter().any(|u| owned_by(&p, u)) || orphan_driver_pod(&p) {
                keep(p);
            }
        }
    })
    .await
    .map_err(list_err(format!("Pods in {namespace}")))?;
    if in_flight.is_empty() {
        return Ok(out.into_values().collect());
    }
    let all = Api::<Lenient<Pod>>::all(client.clone());
    let fetch = |p: ListParams| {
        let api = all.clone();
        async move { api.list(&p).await }
    };
    // A few nodes: one field-selected list each; many: one paged pass over every pod.
    let selectors: Vec<Option<String>> = if in_flight.len() <= PER_NODE_LISTS {
        in_flight
            .iter()
            .map(|n| Some(format!("spec.nodeName={n}")))
            .collect()
    } else {
        vec![None]
    };
    for sel in selectors {
        let params = match &sel {
            Some(f) => ListParams::default().fields(f),
            None => ListParams::default(),
        };
        gantry_runtime::paged::each_page(params, PODS_PAGE, &fetch, |items| {
            for p in items.into_iter().filter_map(Lenient::salvaged) {
                let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
                if node.is_some_and(|n| in_flight.contains(n)) {
                    keep(p);
                }
            }
        })
        .await
        .map_err(list_err("Pods on nodes mid upgrade"))?;
    }
    Ok(out.into_values().collect())
}

/// A driver pod no DaemonSet owns (its DaemonSet was deleted with orphan propagation).
pub(super) fn orphan_driver_pod(p: &Pod) -> bool {
    p.metadata
        .owner_references
        .as_ref()
        .is_none_or(Vec::is_empty)
        && is_driver_pod(p)
}

pub(super) fn is_driver_pod(p: &Pod) -> bool {
    let labels = p.metadata.labels.as_ref();
    label_is(labels, names::LABEL_APP, names::app::DRIVER)
        || label_is(
            labels,
            names::LABEL_APP_COMPONENT,
            names::COMPONENT_NVIDIA_DRIVER,
        )
}

pub(super) const PODS_PAGE: u32 = 500;
/// Up to this many nodes mid upgrade, their pods are listed node by node.
pub(super) const PER_NODE_LISTS: usize = 8;

/// The nodes as the plan sees them, and their uids (for Events). Without auto-upgrade the round
/// only clears labels, so the shared metadata cache is enough, and only the nodes labelled
/// with an upgrade state are returned; a walk also reads
/// `spec.unschedulable` and the `Ready` condition: listed in pages, each page reduced to views
/// before the next is asked for.
pub(super) async fn list_nodes(
    client: &kube::Client,
    full: bool,
    node_watch: &NodeWatch,
) -> Result<(Vec<view::NodeView>, BTreeMap<String, String>), UpgradeError> {
    let mut views = Vec::new();
    let mut uids = BTreeMap::new();
    let mut take = |node: &Node| {
        if let Some(v) = view::node_view(node) {
            if let Some(uid) = &node.metadata.uid {
                uids.insert(v.name.clone(), uid.clone());
            }
            views.push(v);
        }
    };
    if !full {
        if !node_watch.ready().await {
            return Err(UpgradeError::NodeWatchStopped);
        }
        // Labels and annotations only: what clearing the upgrade labels reads. Only nodes
        // with an upgrade state have anything to clear (or are in flight); the others are not
        // copied, so a round on a large cluster mid rollout does not copy every node's labels.
        for m in node_watch.store().state() {
            let Some(name) = &m.metadata.name else {
                continue;
            };
            let labels = m.metadata.labels.as_ref();
            if !labels.is_some_and(|l| l.contains_key(names::LABEL_UPGRADE_STATE)) {
                continue;
            }
            if let Some(uid) = &m.metadata.uid {
                uids.insert(name.clone(), uid.clone());
            }
            views.push(view::NodeView {
                name: name.clone(),
                labels: m.metadata.labels.clone().unwrap_or_default(),
                annotations: m.metadata.annotations.clone().unwrap_or_default(),
                unschedulable: false,
                ready: false,
            });
        }
        return Ok((views, uids));
    }
    let api = Api::<Node>::all(client.clone());
    let fetch = |p: ListParams| {
        let api = api.clone();
        async move { api.list(&p).await }
    };
    gantry_runtime::paged::each_page(
        ListParams::default(),
        NODES_PAGE,
        fetch,
        |items: Vec<Node>| items.iter().for_each(&mut take),
    )
    .await
    .map_err(list_err("Nodes"))?;
    Ok((views, uids))
}

pub(super) const NODES_PAGE: u32 = 500;

/// Build the core's view from listed objects.
pub fn build_view(
    nodes: Vec<view::NodeView>,
    drivers: &[&DaemonSet],
    revisions: &[ControllerRevision],
    pods: &[Pod],
    validator_expected: bool,
    namespace: &str,
    (now, min_ready_s): (i64, i64),
) -> ClusterView {
    let mut driver_pods = Vec::new();
    let mut complete = true;
    for ds in drivers {
        let uid = ds.metadata.uid.clone().unwrap_or_default();
        let owned: Vec<&Pod> = pods.iter().filter(|p| owned_by(p, &uid)).collect();
        let desired = ds
            .status
            .as_ref()
            .map(|s| s.desired_number_scheduled)
            .unwrap_or(0);
        if i32::try_from(owned.len()).unwrap_or(i32::MAX) != desired {
            complete = false;
        }
        let rev = view::current_revision(ds, revisions, &owned);
        driver_pods.extend(
            owned
                .iter()
                .filter_map(|p| view::driver_pod(p, Some(&rev), now, min_ready_s)),
        );
    }
    // Orphaned driver pods (their DaemonSet was deleted with orphan propagation) need upgrading.
    for p in pods {
        if p.metadata.namespace.as_deref() == Some(namespace) && orphan_driver_pod(p) {
            driver_pods.extend(view::driver_pod(p, None, now, min_ready_s));
        }
    }
    let driver_keys: HashSet<(String, String)> = driver_pods
        .iter()
        .map(|d| (d.key.namespace.clone(), d.key.name.clone()))
        .collect();
    let others = pods
        .iter()
        .filter(|p| {
            !driver_keys.contains(&(
                p.metadata.namespace.clone().unwrap_or_default(),
                p.metadata.name.clone().unwrap_or_default(),
            ))
        })
        .filter_map(view::pod_view)
        .collect();
    ClusterView {
        nodes,
        driver_pods,
        pods: others,
        driver_pods_complete: complete,
        validator_expected,
    }
}
