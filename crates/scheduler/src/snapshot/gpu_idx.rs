//! Device indices of one placement, held inline: every running pod has a placement in the
//! cycle's state, so a heap list per pod was 130k allocations (and frees) per cycle at scale.

use std::cmp::Ordering;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

/// Inline room; nodes rarely have more GPUs, and longer lists spill to the heap.
const INLINE: usize = 14;

/// A list of GPU indices on one node that behaves as a `[u8]` (same order, equality,
/// ordering and hash as the `Vec<u8>` it replaces).
#[derive(Clone)]
pub enum GpuIdx {
    Inline { len: u8, buf: [u8; INLINE] },
    Heap(Box<[u8]>),
}

impl GpuIdx {
    pub fn as_slice(&self) -> &[u8] {
        match self {
            GpuIdx::Inline { len, buf } => &buf[..*len as usize],
            GpuIdx::Heap(v) => v,
        }
    }
}

impl Default for GpuIdx {
    fn default() -> Self {
        GpuIdx::Inline {
            len: 0,
            buf: [0; INLINE],
        }
    }
}

impl Deref for GpuIdx {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl<'a> IntoIterator for &'a GpuIdx {
    type Item = &'a u8;
    type IntoIter = std::slice::Iter<'a, u8>;
    fn into_iter(self) -> Self::IntoIter {
        self.as_slice().iter()
    }
}

impl FromIterator<u8> for GpuIdx {
    fn from_iter<I: IntoIterator<Item = u8>>(iter: I) -> Self {
        let mut buf = [0u8; INLINE];
        let mut it = iter.into_iter();
        for len in 0..INLINE {
            match it.next() {
                Some(i) => buf[len] = i,
                None => {
                    return GpuIdx::Inline {
                        len: len as u8,
                        buf,
                    };
                }
            }
        }
        match it.next() {
            None => GpuIdx::Inline {
                len: INLINE as u8,
                buf,
            },
            Some(next) => {
                let mut v = buf.to_vec();
                v.push(next);
                v.extend(it);
                GpuIdx::Heap(v.into_boxed_slice())
            }
        }
    }
}

impl From<Vec<u8>> for GpuIdx {
    fn from(v: Vec<u8>) -> Self {
        v.into_iter().collect()
    }
}

impl std::fmt::Debug for GpuIdx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_slice().fmt(f)
    }
}

impl PartialEq for GpuIdx {
    fn eq(&self, o: &Self) -> bool {
        self.as_slice() == o.as_slice()
    }
}
impl Eq for GpuIdx {}

impl PartialOrd for GpuIdx {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for GpuIdx {
    fn cmp(&self, o: &Self) -> Ordering {
        self.as_slice().cmp(o.as_slice())
    }
}

impl Hash for GpuIdx {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.as_slice().hash(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Behaves as the `Vec<u8>` it replaces, inline or spilled.
        #[test]
        fn same_as_vec(a in proptest::collection::vec(any::<u8>(), 0..40),
                       b in proptest::collection::vec(any::<u8>(), 0..40)) {
            let (x, y): (GpuIdx, GpuIdx) = (a.clone().into(), b.clone().into());
            prop_assert_eq!(&*x, a.as_slice());
            prop_assert_eq!(x.cmp(&y), a.cmp(&b));
            prop_assert_eq!(x == y, a == b);
            let h = |v: &dyn Fn(&mut std::collections::hash_map::DefaultHasher)| {
                let mut s = std::collections::hash_map::DefaultHasher::new();
                v(&mut s);
                s.finish()
            };
            prop_assert_eq!(h(&|s| x.hash(s)), h(&|s| a.hash(s)));
            prop_assert_eq!(format!("{x:?}"), format!("{a:?}"));
        }
    }
}
