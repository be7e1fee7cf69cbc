//! The kubelet's device manager state, pure: which plugin resources exist, their devices and
//! health, and which container holds which device. The gRPC edges feed it; node status and
//! PodResources read it.

use std::collections::{BTreeMap, BTreeSet};

/// One advertised device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    pub id: String,
    pub healthy: bool,
    pub numa_nodes: Vec<i64>,
}

/// A plugin resource (`nvidia.com/gpu`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resource {
    /// Every device of the last ListAndWatch message (capacity).
    pub devices: BTreeMap<String, Device>,
    /// A plugin stream is open. When it ends, devices stay (capacity) but none is allocatable.
    pub connected: bool,
    /// Bumped on every registration so a stale stream's end cannot clobber a newer one.
    pub generation: u64,
}

/// Devices one container holds, by resource.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerDevices {
    pub init: bool,
    pub devices: BTreeMap<String, Vec<String>>,
}

/// Who holds devices: pod uid → (name, namespace, containers).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodDevices {
    pub name: String,
    pub namespace: String,
    pub containers: BTreeMap<String, ContainerDevices>,
}

#[derive(Debug, Clone, Default)]
pub struct DeviceState {
    pub resources: BTreeMap<String, Resource>,
    pub pods: BTreeMap<String, PodDevices>,
}

impl DeviceState {
    /// A (re-)registration: a new stream will follow; devices stay until it reports.
    pub fn register(&mut self, resource: &str) -> u64 {
        let r = self.resources.entry(resource.to_string()).or_default();
        r.generation += 1;
        r.connected = true;
        r.generation
    }

    /// A full ListAndWatch message. Ignored when it comes from a replaced registration.
    pub fn update(&mut self, resource: &str, generation: u64, devices: Vec<Device>) -> bool {
        match self.resources.get_mut(resource) {
            Some(r) if r.generation == generation => {
                r.devices = devices.into_iter().map(|d| (d.id.clone(), d)).collect();
                true
            }
            _ => false,
        }
    }

    /// The plugin's stream ended: allocatable drops to 0, capacity stays.
    pub fn disconnect(&mut self, resource: &str, generation: u64) -> bool {
        match self.resources.get_mut(resource) {
            Some(r) if r.generation == generation && r.connected => {
                r.connected = false;
                true
            }
            _ => false,
        }
    }

    /// Kubelet restart: every registration is forgotten; resources show capacity 0 until
    /// their plugin registers again. Allocations of running pods are kept.
    pub fn forget_plugins(&mut self) {
        for r in self.resources.values_mut() {
            r.generation += 1;
            r.connected = false;
            r.devices.clear();
        }
    }

    /// Capacity per resource: every advertised device.
    pub fn capacity(&self) -> BTreeMap<String, u64> {
        self.resources
            .iter()
            .map(|(k, r)| (k.clone(), r.devices.len() as u64))
            .collect()
    }

    /// Allocatable per resource: healthy devices of a connected plugin.
    pub fn allocatable(&self) -> BTreeMap<String, u64> {
        self.resources
            .iter()
            .map(|(k, r)| {
                let n = if r.connected {
                    r.devices.values().filter(|d| d.healthy).count()
                } else {
                    0
                };
                (k.clone(), n as u64)
            })
            .collect()
    }

    pub fn is_plugin_resource(&self, resource: &str) -> bool {
        self.resources.contains_key(resource)
    }

    /// Devices a container of `pod_uid` may take: healthy, connected, and not held by another
    /// pod. Init containers may reuse their own pod's devices (they run one at a time, before
    /// the app containers); app containers may reuse devices of their pod's init containers.
    pub fn available(&self, resource: &str, pod_uid: &str, init: bool) -> Vec<String> {
        let Some(r) = self.resources.get(resource).filter(|r| r.connected) else {
            return Vec::new();
        };
        let mut taken = BTreeSet::new();
        for (uid, pod) in &self.pods {
            for c in pod.containers.values() {
                let reusable = uid == pod_uid && (init || c.init);
                if !reusable {
                    taken.extend(c.devices.get(resource).into_iter().flatten().cloned());
                }
            }
        }
        r.devices
            .values()
            .filter(|d| d.healthy && !taken.contains(&d.id))
            .map(|d| d.id.clone())
            .collect()
    }

    /// Track an admitted pod (PodResources lists pods without devices too).
    pub fn track(
        &mut self,
        pod_uid: &str,
        name: &str,
        namespace: &str,
        containers: &[(String, bool)],
    ) {
        let pod = self
            .pods
            .entry(pod_uid.to_string())
            .or_insert_with(|| PodDevices {
                name: name.to_string(),
                namespace: namespace.to_string(),
                containers: BTreeMap::new(),
            });
        for (c, init) in containers {
            pod.containers.entry(c.clone()).or_default().init = *init;
        }
    }

    #[allow(clippy::too_many_arguments)] // one call site; a struct would only rename the fields
    pub fn record(
        &mut self,
        pod_uid: &str,
        name: &str,
        namespace: &str,
        container: &str,
        init: bool,
        resource: &str,
        ids: Vec<String>,
    ) {
        let pod = self
            .pods
            .entry(pod_uid.to_string())
            .or_insert_with(|| PodDevices {
                name: name.to_string(),
                namespace: namespace.to_string(),
                containers: BTreeMap::new(),
            });
        let c = pod.containers.entry(container.to_string()).or_default();
        c.init = init;
        c.devices.insert(resource.to_string(), ids);
    }

    /// Free everything a pod holds; returns whether it held anything.
    pub fn release(&mut self, pod_uid: &str) -> bool {
        self.pods.remove(pod_uid).is_some()
    }

    /// Device IDs held by any pod, per resource.
    pub fn in_use(&self, resource: &str) -> BTreeSet<String> {
        self.pods
            .values()
            .flat_map(|p| p.containers.values())
            .flat_map(|c| c.devices.get(resource).into_iter().flatten().cloned())
            .collect()
    }
}

/// Pick `n` devices: the plugin's preference when it is valid (right size, all available),
/// otherwise the first `n` available in ID order. `None` when not enough are available.
pub fn pick(available: &[String], n: usize, preferred: Option<&[String]>) -> Option<Vec<String>> {
    if available.len() < n {
        return None;
    }
    if let Some(p) = preferred {
        let set: BTreeSet<&String> = available.iter().collect();
        let unique: BTreeSet<&String> = p.iter().collect();
        if p.len() == n && unique.len() == n && p.iter().all(|id| set.contains(id)) {
            return Some(p.to_vec());
        }
    }
    Some(available.iter().take(n).cloned().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn devs(ids: &[&str], healthy: bool) -> Vec<Device> {
        ids.iter()
            .map(|id| Device {
                id: id.to_string(),
                healthy,
                numa_nodes: vec![],
            })
            .collect()
    }

    #[test]
    fn capacity_allocatable_and_stream_end() {
        let mut s = DeviceState::default();
        let g = s.register("nvidia.com/gpu");
        let mut d = devs(&["a", "b", "c"], true);
        d[2].healthy = false;
        assert!(s.update("nvidia.com/gpu", g, d));
        assert_eq!(s.capacity()["nvidia.com/gpu"], 3);
        assert_eq!(s.allocatable()["nvidia.com/gpu"], 2);
        assert!(s.disconnect("nvidia.com/gpu", g));
        assert_eq!(s.capacity()["nvidia.com/gpu"], 3);
        assert_eq!(s.allocatable()["nvidia.com/gpu"], 0);
        assert!(s.available("nvidia.com/gpu", "p", false).is_empty());
    }

    #[test]
    fn stale_stream_cannot_clobber_new_registration() {
        let mut s = DeviceState::default();
        let old = s.register("r/x");
        let new = s.register("r/x");
        assert!(!s.update("r/x", old, devs(&["a"], true)));
        assert!(s.update("r/x", new, devs(&["a", "b"], true)));
        assert!(!s.disconnect("r/x", old));
        assert_eq!(s.allocatable()["r/x"], 2);
    }

    #[test]
    fn kubelet_restart_forgets_plugins_keeps_allocations() {
        let mut s = DeviceState::default();
        let g = s.register("r/x");
        s.update("r/x", g, devs(&["a", "b"], true));
        s.record("u1", "p", "ns", "c", false, "r/x", vec!["a".into()]);
        s.forget_plugins();
        assert_eq!(s.capacity()["r/x"], 0);
        assert_eq!(s.allocatable()["r/x"], 0);
        assert_eq!(s.in_use("r/x").len(), 1);
    }

    #[test]
    fn availability_respects_other_pods_and_init_reuse() {
        let mut s = DeviceState::default();
        let g = s.register("r/x");
        s.update("r/x", g, devs(&["a", "b", "c", "d"], true));
        s.record("u1", "p1", "ns", "init", true, "r/x", vec!["a".into()]);
        s.record("u1", "p1", "ns", "main", false, "r/x", vec!["b".into()]);
        // another pod sees neither
        assert_eq!(s.available("r/x", "u2", false), ["c", "d"]);
        // an app container of u1 may reuse the init container's device, not its sibling's
        assert_eq!(s.available("r/x", "u1", false), ["a", "c", "d"]);
        // an init container of u1 may reuse anything of u1
        assert_eq!(s.available("r/x", "u1", true), ["a", "b", "c", "d"]);
        assert!(s.release("u1"));
        assert_eq!(s.available("r/x", "u2", false).len(), 4);
        assert!(!s.release("u1"));
    }

    #[test]
    fn pick_uses_valid_preference_only() {
        let avail: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        assert_eq!(pick(&avail, 4, None), None);
        assert_eq!(pick(&avail, 2, None).unwrap(), ["a", "b"]);
        let pref = vec!["c".to_string(), "a".to_string()];
        assert_eq!(pick(&avail, 2, Some(&pref)).unwrap(), ["c", "a"]);
        let bad = vec!["c".to_string(), "z".to_string()];
        assert_eq!(pick(&avail, 2, Some(&bad)).unwrap(), ["a", "b"]);
        let dup = vec!["c".to_string(), "c".to_string()];
        assert_eq!(pick(&avail, 2, Some(&dup)).unwrap(), ["a", "b"]);
    }
}
