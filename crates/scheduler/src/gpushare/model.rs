//! Plain values for GPU-sharing placement: what a node has left, what a pod asks for, and
//! where on the node it goes. Units: milli-CPU, MiB, milli-GPU per device (1000 = one GPU).

use std::collections::BTreeMap;

pub const MILLI: u16 = 1000;
/// Most devices one node may have (a `u16` mask names the devices a pod takes).
pub const MAX_GPUS: usize = 16;
/// Model id of a node without GPUs.
pub const NO_MODEL: u8 = u8::MAX;

/// GPU models by name, each given a small id (a bit in [`ModelSet`]).
#[derive(Clone, Debug, Default)]
pub struct Models {
    ids: BTreeMap<String, u8>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ModelError {
    #[error("more than 64 distinct GPU models (at {0:?})")]
    TooMany(String),
}

impl Models {
    /// The id of a model seen on a node; `None` for an empty name (a node without GPUs).
    pub fn intern(&mut self, name: &str) -> Result<u8, ModelError> {
        if name.is_empty() {
            return Ok(NO_MODEL);
        }
        if let Some(&id) = self.ids.get(name) {
            return Ok(id);
        }
        if self.ids.len() >= 64 {
            return Err(ModelError::TooMany(name.to_string()));
        }
        let id = self.ids.len() as u8;
        self.ids.insert(name.to_string(), id);
        Ok(id)
    }

    /// The set of models a pod may run on. Names no node carries match nothing; an empty
    /// list means any model.
    pub fn set_of<S: AsRef<str>>(&self, names: &[S]) -> ModelSet {
        let mut bits = 0u64;
        let mut constrained = false;
        for n in names.iter().map(AsRef::as_ref).filter(|n| !n.is_empty()) {
            constrained = true;
            if let Some(&id) = self.ids.get(n) {
                bits |= 1 << id;
            }
        }
        if constrained {
            ModelSet::Only(bits)
        } else {
            ModelSet::Any
        }
    }
}

/// GPU models a pod accepts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ModelSet {
    #[default]
    Any,
    Only(u64),
}

impl ModelSet {
    pub fn allows(self, model: u8) -> bool {
        match self {
            ModelSet::Any => true,
            ModelSet::Only(bits) => model != NO_MODEL && model < 64 && bits & (1 << model) != 0,
        }
    }
}

/// One pod's request. `milli` is per device: a shared pod has `num_gpu` 1 and `milli` < 1000;
/// a whole-GPU pod has `milli` 1000; a CPU-only pod has both 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodShape {
    pub cpu: i64,
    pub mem: i64,
    pub num_gpu: u8,
    pub milli: u16,
    pub models: ModelSet,
    /// Rank of the pod's GPU-model request as written (`gpu_spec`) among the workload's, 0
    /// for none. It only groups and orders task types the way the paper's simulator does
    /// (its key is the request string): `models` is what placement reads.
    pub spec: u16,
}

impl PodShape {
    pub fn gpu_total(&self) -> i64 {
        i64::from(self.num_gpu) * i64::from(self.milli)
    }
    pub fn wants_gpu(&self) -> bool {
        self.num_gpu > 0 && self.milli > 0
    }
    pub fn is_share(&self) -> bool {
        self.num_gpu == 1 && self.milli > 0 && self.milli < MILLI
    }
}

/// What a node has left. Devices keep their index order (`gpu[..n]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NodeFree {
    pub cpu: i64,
    pub mem: i64,
    pub model: u8,
    pub n: u8,
    pub gpu: [u16; MAX_GPUS],
}

impl NodeFree {
    pub fn new(cpu: i64, mem: i64, model: u8, gpus: u8) -> NodeFree {
        let mut gpu = [0u16; MAX_GPUS];
        for g in gpu.iter_mut().take(usize::from(gpus)) {
            *g = MILLI;
        }
        NodeFree {
            cpu,
            mem,
            model: if gpus == 0 { NO_MODEL } else { model },
            n: gpus,
            gpu,
        }
    }
    pub fn gpus(&self) -> &[u16] {
        &self.gpu[..usize::from(self.n)]
    }
    pub fn gpu_free(&self) -> i64 {
        self.gpus().iter().map(|&g| i64::from(g)).sum()
    }
    pub fn idle(&self) -> usize {
        self.gpus().iter().filter(|&&g| g == MILLI).count()
    }
    /// Devices with at least `milli` free.
    pub fn fitting(&self, milli: u16) -> usize {
        self.gpus().iter().filter(|&&g| g >= milli).count()
    }
    /// Whether the pod fits at all: CPU, memory, model, and enough devices.
    pub fn fits(&self, p: &PodShape) -> bool {
        if self.cpu < p.cpu || self.mem < p.mem {
            return false;
        }
        if !p.wants_gpu() {
            return true;
        }
        p.models.allows(self.model) && self.fitting(p.milli) >= usize::from(p.num_gpu)
    }
    /// The node after the pod takes the devices in `mask`.
    pub fn after(&self, p: &PodShape, mask: u16) -> NodeFree {
        let mut out = *self;
        out.cpu -= p.cpu;
        out.mem -= p.mem;
        for (i, g) in out.gpu.iter_mut().enumerate().take(usize::from(self.n)) {
            if mask & (1 << i) != 0 {
                *g -= p.milli;
            }
        }
        out
    }
    /// The lowest-index fully free devices a multi-device (or whole) pod takes.
    pub fn exclusive_mask(&self, k: u8) -> Option<u16> {
        let mut mask = 0u16;
        let mut left = k;
        for (i, &g) in self.gpus().iter().enumerate() {
            if left == 0 {
                break;
            }
            if g == MILLI {
                mask |= 1 << i;
                left -= 1;
            }
        }
        (left == 0).then_some(mask)
    }
    /// The same node with its devices sorted: nodes equal under this key score alike.
    pub fn canonical(&self) -> NodeFree {
        let mut out = *self;
        out.gpu[..usize::from(self.n)].sort_unstable();
        out
    }
}

/// One node's static facts.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeSpec {
    pub name: String,
    pub cpu: i64,
    pub mem: i64,
    pub gpus: u8,
    pub model: u8,
}

impl NodeSpec {
    pub fn empty(&self) -> NodeFree {
        NodeFree::new(self.cpu, self.mem, self.model, self.gpus)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(milli: u16) -> PodShape {
        PodShape {
            cpu: 1000,
            mem: 1024,
            num_gpu: 1,
            milli,
            models: ModelSet::Any,
            spec: 0,
        }
    }

    #[test]
    fn fit_checks_every_dimension() {
        let mut m = Models::default();
        let t4 = m.intern("T4").unwrap();
        let v100 = m.intern("V100").unwrap();
        let n = NodeFree::new(2000, 4096, t4, 2);
        assert!(n.fits(&share(500)));
        assert!(!n.fits(&PodShape {
            cpu: 3000,
            ..share(500)
        }));
        assert!(!n.fits(&PodShape {
            mem: 5000,
            ..share(500)
        }));
        assert!(!n.fits(&PodShape {
            num_gpu: 3,
            milli: 1000,
            ..share(500)
        }));
        let only_v100 = m.set_of(&["V100"]);
        assert!(only_v100.allows(v100) && !only_v100.allows(t4));
        assert!(!n.fits(&PodShape {
            models: only_v100,
            spec: 0,
            ..share(500)
        }));
        // Unknown names match nothing; empty names mean any.
        assert_eq!(m.set_of(&["A100"]), ModelSet::Only(0));
        assert_eq!(m.set_of::<&str>(&[]), ModelSet::Any);
    }

    #[test]
    fn exclusive_devices_are_the_lowest_idle_ones() {
        let mut n = NodeFree::new(0, 0, 0, 4);
        n.gpu[0] = 300;
        assert_eq!(n.exclusive_mask(2), Some(0b0110));
        assert_eq!(n.exclusive_mask(4), None);
        let p = PodShape {
            cpu: 0,
            mem: 0,
            num_gpu: 2,
            milli: 1000,
            models: ModelSet::Any,
            spec: 0,
        };
        let after = n.after(&p, 0b0110);
        assert_eq!(after.gpus(), &[300, 0, 0, 1000]);
        assert_eq!(after.canonical().gpus(), &[0, 0, 300, 1000]);
    }
}
