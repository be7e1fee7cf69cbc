//! Go's `math/rand` (the Go 1 generator), bit for bit: the FGD authors' simulator draws its
//! shuffle, its workload samples and its node permutation from Go's global generator seeded
//! with the tuning seed, so replaying the paper's seeds 42–51 means replaying this stream.
//! Only what the simulator calls: `Int`, `Intn`, `Shuffle`, `Perm`.

use super::gorand_table::COOKED;

const LEN: usize = 607;
const TAP: usize = 273;
const MASK: i64 = i64::MAX;
const INT32_MAX: i64 = (1 << 31) - 1;

/// Go's additive lagged Fibonacci source with the `Rand` methods on top of it.
#[derive(Clone)]
pub struct GoRand {
    tap: usize,
    feed: usize,
    vec: [i64; LEN],
}

/// Park–Miller step, x' = 48271 · x mod (2³¹ − 1), in Schrage's form as Go writes it.
fn seedrand(x: i32) -> i32 {
    const A: i32 = 48271;
    const Q: i32 = 44488;
    const R: i32 = 3399;
    let (hi, lo) = (x / Q, x % Q);
    let x = A * lo - R * hi;
    if x < 0 { x + INT32_MAX as i32 } else { x }
}

impl GoRand {
    /// The state `rand.Seed(seed)` leaves.
    pub fn new(seed: i64) -> Self {
        let mut seed = seed % INT32_MAX;
        if seed < 0 {
            seed += INT32_MAX;
        }
        if seed == 0 {
            seed = 89_482_311;
        }
        let mut x = seed as i32;
        let mut vec = [0i64; LEN];
        for i in -20..LEN as i64 {
            x = seedrand(x);
            if i >= 0 {
                let mut u = i64::from(x) << 40;
                x = seedrand(x);
                u ^= i64::from(x) << 20;
                x = seedrand(x);
                u ^= i64::from(x);
                u ^= COOKED[i as usize];
                vec[i as usize] = u & MASK;
            }
        }
        GoRand {
            tap: 0,
            feed: LEN - TAP,
            vec,
        }
    }

    /// `Int63`: the next 63 bits.
    pub fn int63(&mut self) -> i64 {
        self.tap = (self.tap + LEN - 1) % LEN;
        self.feed = (self.feed + LEN - 1) % LEN;
        let x = self.vec[self.feed].wrapping_add(self.vec[self.tap]) & MASK;
        self.vec[self.feed] = x;
        x
    }

    /// `Int`: one draw, as a non-negative int (64-bit platforms).
    pub fn int(&mut self) -> i64 {
        self.int63()
    }

    fn int31(&mut self) -> i32 {
        (self.int63() >> 32) as i32
    }

    fn uint32(&mut self) -> u32 {
        (self.int63() >> 31) as u32
    }

    /// `Int31n`: rejection sampling, a mask for powers of two.
    fn int31n(&mut self, n: i32) -> i32 {
        debug_assert!(n > 0);
        if n & (n - 1) == 0 {
            return self.int31() & (n - 1);
        }
        let max = (INT32_MAX - (1i64 << 31) % i64::from(n)) as i32;
        let mut v = self.int31();
        while v > max {
            v = self.int31();
        }
        v % n
    }

    /// `Intn` for n below 2³¹ (every use here): `Int31n`.
    pub fn intn(&mut self, n: usize) -> usize {
        assert!(n > 0 && n <= INT32_MAX as usize, "Intn({n}) out of range");
        self.int31n(n as i32) as usize
    }

    /// The unexported `int31n` `Shuffle` uses: Lemire's multiply-shift with rejection.
    fn int31n_lemire(&mut self, n: u32) -> u32 {
        let mut prod = u64::from(self.uint32()) * u64::from(n);
        let mut low = prod as u32;
        if low < n {
            let thresh = n.wrapping_neg() % n;
            while low < thresh {
                prod = u64::from(self.uint32()) * u64::from(n);
                low = prod as u32;
            }
        }
        (prod >> 32) as u32
    }

    /// `Shuffle`: Fisher–Yates from the back.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        assert!(
            items.len() <= INT32_MAX as usize,
            "Shuffle of {} items",
            items.len()
        );
        for i in (1..items.len()).rev() {
            let j = self.int31n_lemire(i as u32 + 1) as usize;
            items.swap(i, j);
        }
    }

    /// `Perm`: a permutation of 0..n, drawing `Intn(i + 1)` for every i from 0 (the first
    /// draw is useless but Go keeps it for compatibility, so the stream depends on it).
    pub fn perm(&mut self, n: usize) -> Vec<usize> {
        let mut m = vec![0usize; n];
        for i in 0..n {
            let j = self.intn(i + 1);
            m[i] = m[j];
            m[j] = i;
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Outputs every Go programmer has seen: the global generator before Go 1.20 started as
    // `Seed(1)`, so `rand.Int()` printed 5577006791947779410 and `rand.Intn(100)` 81, 87, ...
    #[test]
    fn seed_one_gives_gos_well_known_first_outputs() {
        let mut r = GoRand::new(1);
        assert_eq!(r.int(), 5_577_006_791_947_779_410);
        assert_eq!(r.int(), 8_674_665_223_082_153_551);
        let mut r = GoRand::new(1);
        let got: Vec<usize> = (0..10).map(|_| r.intn(100)).collect();
        assert_eq!(got, [81, 87, 47, 59, 81, 18, 25, 40, 56, 0]);
        // The Go tour's "My favorite number is 1": rand.Intn(10) on seed 1.
        assert_eq!(GoRand::new(1).intn(10), 1);
    }

    #[test]
    fn seeds_fold_like_go() {
        // Seeds are taken mod 2³¹ − 1, and zero maps to a fixed seed.
        assert_eq!(GoRand::new(5).int(), GoRand::new(5 + INT32_MAX).int());
        assert_eq!(GoRand::new(0).int(), GoRand::new(89_482_311).int());
        assert_eq!(GoRand::new(-7).int(), GoRand::new(INT32_MAX - 7).int());
    }

    #[test]
    fn perm_and_shuffle_are_permutations_and_repeatable() {
        let p = GoRand::new(42).perm(1213);
        let mut s = p.clone();
        s.sort_unstable();
        assert_eq!(s, (0..1213).collect::<Vec<_>>());
        assert_eq!(p, GoRand::new(42).perm(1213));
        assert_ne!(p, GoRand::new(43).perm(1213));
        let mut v: Vec<u32> = (0..500).collect();
        GoRand::new(7).shuffle(&mut v);
        assert_ne!(v, (0..500).collect::<Vec<_>>());
        v.sort_unstable();
        assert_eq!(v, (0..500).collect::<Vec<_>>());
        // Perm draws once per element, the useless first draw included.
        let mut a = GoRand::new(9);
        let _ = a.perm(10);
        let mut b = GoRand::new(9);
        for i in 0..10 {
            b.intn(i + 1);
        }
        assert_eq!(a.int(), b.int());
    }
}
