//! The short hashes that name revisions and pod templates.

/// A stable short hash (FNV-1a) in Kubernetes' SafeEncodeString alphabet (no vowels, no
/// look-alikes), as the revision and pod-template hashes are.
pub fn short_hash(s: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut out = String::new();
    for _ in 0..10 {
        out.push(ALPHABET[(h % ALPHABET.len() as u64) as usize] as char);
        h /= ALPHABET.len() as u64;
    }
    out
}
