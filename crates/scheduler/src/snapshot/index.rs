//! The build's name indexes: a small fast hasher, and the pod -> group table.

use super::model::GroupId;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A small multiply-rotate hasher for the build's indexes: the keys are names from our own
/// cache, so SipHash's flooding resistance buys nothing and costs a large share of the build.
#[derive(Clone, Copy, Default)]
pub struct FastHasher(u64);

impl FastHasher {
    #[inline]
    fn mix(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.mix(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.mix(u64::from_le_bytes(w));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.mix(u64::from(i));
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.mix(u64::from(i));
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.mix(i);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.mix(i as u64);
    }
    fn finish(&self) -> u64 {
        // Fold the high bits down: the table indexes by the low ones.
        let h = (self.0 ^ (self.0 >> 32)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^ (h >> 29)
    }
}

/// `HashMap` with [`FastHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

pub(super) fn fast_map<K, V>(capacity: usize) -> FastMap<K, V> {
    FastMap::with_capacity_and_hasher(capacity, BuildHasherDefault::default())
}

/// Index from a pod group's (namespace, name) to its id: open addressing with linear
/// probing over (hash tag, id) pairs, 8 bytes a slot. A `HashMap` keyed by the two names took
/// 48 bytes a slot, and at 140k groups its fresh pages cost more than its lookups.
pub(super) struct GroupIndex {
    slots: Vec<(u32, GroupId)>,
    mask: usize,
}

const EMPTY: GroupId = GroupId::MAX;

impl GroupIndex {
    pub(super) fn with_capacity(n: usize) -> GroupIndex {
        // At most 3/4 full.
        let len = (n + n / 3 + 1).next_power_of_two().max(16);
        GroupIndex {
            slots: vec![(0, EMPTY); len],
            mask: len - 1,
        }
    }

    #[inline]
    pub(super) fn hash(namespace: &str, name: &str) -> u64 {
        let mut h = FastHasher::default();
        h.write(namespace.as_bytes());
        h.write_u8(0xff);
        h.write(name.as_bytes());
        h.finish()
    }

    /// The id under `hash` that `is_key` confirms, or else the free slot for it.
    pub(super) fn find(
        &self,
        hash: u64,
        is_key: impl Fn(GroupId) -> bool,
    ) -> Result<GroupId, usize> {
        let tag = (hash >> 32) as u32;
        let mut i = hash as usize & self.mask;
        loop {
            let (t, id) = self.slots[i];
            if id == EMPTY {
                return Err(i);
            }
            if t == tag && is_key(id) {
                return Ok(id);
            }
            i = (i + 1) & self.mask;
        }
    }

    #[inline]
    pub(super) fn insert_at(&mut self, slot: usize, hash: u64, id: GroupId) {
        self.slots[slot] = ((hash >> 32) as u32, id);
    }
}
