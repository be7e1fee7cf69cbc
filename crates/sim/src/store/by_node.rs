//! Pods by the node they are bound to (`spec.nodeName`), as kube-apiserver's watch cache
//! indexes them: every kubelet watches and lists its own node's pods
//! (`fieldSelector=spec.nodeName=<node>`), and with thousands of nodes neither a list nor
//! an event may cost a look at every pod or every kubelet's watch.

use super::event::Event;
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use tokio::sync::broadcast;

/// The resource indexed by node.
pub const PODS: &str = "/pods";

/// The node an object is bound to: its `spec.nodeName`, if set.
pub fn node_of(v: &Value) -> Option<&str> {
    v.get("spec")?
        .get("nodeName")?
        .as_str()
        .filter(|n| !n.is_empty())
}

#[derive(Default)]
pub(super) struct NodeIndex {
    /// The keys (namespace, name) of the current pods on each node.
    pods: HashMap<String, BTreeSet<(String, String)>>,
    /// Rings of the watches of one node's pods, by node.
    rings: super::rings::Rings,
}

impl NodeIndex {
    /// Moves `key` from the node it was on (`was`) to the one it is on now (`now`).
    pub(super) fn update(&mut self, key: &(String, String), was: Option<&str>, now: Option<&str>) {
        if was == now {
            return;
        }
        if let Some(w) = was
            && let Some(set) = self.pods.get_mut(w)
        {
            set.remove(key);
            if set.is_empty() {
                self.pods.remove(w);
            }
        }
        if let Some(n) = now {
            self.pods
                .entry(n.to_string())
                .or_default()
                .insert(key.clone());
        }
    }

    /// The keys of the pods on `node`, in order.
    pub(super) fn keys(&self, node: &str) -> impl Iterator<Item = &(String, String)> {
        self.pods.get(node).into_iter().flatten()
    }

    /// Sends a pod's event to the watchers of the node it was on and of the one it is on.
    pub(super) fn send(&mut self, ev: &Arc<Event>) {
        let now = node_of(&ev.object);
        let was = ev.prev.as_deref().and_then(node_of);
        for node in [now, was.filter(|w| Some(*w) != now)].into_iter().flatten() {
            self.rings.send(node, ev);
        }
    }

    /// A receiver of the events of `node`'s pods.
    pub(super) fn subscribe(&mut self, node: &str) -> broadcast::Receiver<Arc<Event>> {
        self.rings.subscribe(node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(n: &str) -> (String, String) {
        ("default".into(), n.into())
    }

    #[test]
    fn a_pod_moves_between_nodes_and_leaves_none_behind() {
        let mut ix = NodeIndex::default();
        ix.update(&key("a"), None, Some("n1"));
        ix.update(&key("b"), None, Some("n1"));
        ix.update(&key("a"), Some("n1"), Some("n2"));
        assert_eq!(ix.keys("n1").collect::<Vec<_>>(), vec![&key("b")]);
        assert_eq!(ix.keys("n2").collect::<Vec<_>>(), vec![&key("a")]);
        ix.update(&key("b"), Some("n1"), None);
        assert_eq!(ix.keys("n1").count(), 0);
        assert!(!ix.pods.contains_key("n1"));
    }

    fn write(store: &super::super::Store, name: &str, node: Option<&str>, delete: bool) {
        use super::super::{Mutation, ObjKey, StoreError};
        let key = ObjKey {
            gr: PODS.into(),
            namespace: "default".into(),
            name: name.into(),
        };
        let obj = json!({"metadata": {"name": name, "namespace": "default"},
                         "spec": {"nodeName": node, "containers": [{"name": "c"}]}});
        let m = if delete {
            Mutation::Delete(obj)
        } else {
            Mutation::Put(obj)
        };
        store
            .mutate::<StoreError>(&key, |_, _| Ok(m))
            .expect("written");
    }

    fn names(events: &[Arc<Event>]) -> Vec<String> {
        events
            .iter()
            .map(|e| format!("{} {}", e.kind.as_str(), e.key.name))
            .collect()
    }

    #[test]
    fn a_watch_of_one_nodes_pods_sees_theirs_only_live_and_from_the_history() {
        let store = super::super::Store::memory(10_000);
        write(&store, "a", None, false);
        write(&store, "b", Some("n2"), false);
        let from = store.current_rv();
        let (backlog, mut rx) = store.watch_node_from(from, "n1").expect("kept");
        assert!(backlog.is_empty());
        // Bound to n1 (its prev was on no node), changed on n2, deleted from n1.
        write(&store, "a", Some("n1"), false);
        write(&store, "b", Some("n2"), false);
        write(&store, "a", Some("n1"), true);
        let mut live = Vec::new();
        while let Ok(ev) = rx.try_recv() {
            live.push(ev);
        }
        assert_eq!(names(&live), vec!["MODIFIED a", "DELETED a"]);
        // Enough other events that those two are packed, then the same from the history.
        for i in 0..600 {
            write(&store, &format!("x{i}"), Some("n2"), false);
        }
        let (backlog, _) = store.watch_node_from(from, "n1").expect("kept");
        let kept: Vec<Arc<Event>> = backlog.iter().filter_map(|k| k.event()).collect();
        assert!(matches!(backlog[0], super::super::Kept::Packed { .. }));
        assert_eq!(names(&kept), vec!["MODIFIED a", "DELETED a"]);
        // Lists read the index.
        assert_eq!(store.listed_on_node("n1", None, None).0.len(), 0);
        assert_eq!(store.listed_on_node("n2", None, None).0.len(), 601);
        // A later page: the keys after the last one given, in order.
        let after = ("default".to_string(), "x5".to_string());
        let page = store.listed_on_node("n2", Some("default"), Some(&after)).0;
        let page: Vec<String> = page
            .iter()
            .filter_map(|l| l.stub()["metadata"]["name"].as_str().map(String::from))
            .collect();
        assert_eq!(page.first().map(String::as_str), Some("x50"));
        assert!(page.windows(2).all(|w| w[0] < w[1]) && page.iter().all(|n| n.as_str() > "x5"));
        // Not x0, x1…x4 with their 110 longer names each, nor x5 itself.
        assert_eq!(page.len(), 600 - (1 + 4 * 111 + 1));
    }

    #[test]
    fn the_node_is_the_spec_node_name_when_set() {
        assert_eq!(node_of(&json!({"spec": {"nodeName": "n"}})), Some("n"));
        assert_eq!(node_of(&json!({"spec": {"nodeName": ""}})), None);
        assert_eq!(node_of(&json!({"spec": {}})), None);
        assert_eq!(node_of(&json!({"spec": "odd"})), None);
    }
}
