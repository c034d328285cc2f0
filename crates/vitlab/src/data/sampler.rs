//! Epoch orders for the DeiT/timm "strong recipe", as plain index lists drawn
//! only from [`Rng`] (deterministic given its state):
//!
//! - Repeated augmentation: [`ra_order`] / [`ra_layout`] (with
//!   [`ra_num_selected`]) as DeiT's `RASampler`.
//! - [`concat_permutations`], the epoch of Lee et al.'s `RASampler`.
//!
//! DeiT's layouts for given permutations (`ra.json`) come from
//! `tools/make_mix_fixtures.py`.

use crate::util::rng::Rng;

/// How many positions one rank takes per epoch: DeiT's `floor(N // 256 * 256
/// / num_replicas)`. DeiT gives 0 (an empty epoch) for N < 256; there this
/// takes `ceil(N / num_replicas)`, the formula DeiT's own code has commented
/// out next to it. Never more than the rank's share, `ceil(N * r / R)`.
pub fn ra_num_selected(n: usize, num_repeats: usize, num_replicas: usize) -> usize {
    assert!(num_repeats >= 1 && num_replicas >= 1, "repeated augmentation: num_repeats and num_replicas must be >= 1");
    let deit = n / 256 * 256 / num_replicas;
    let selected = if deit > 0 { deit } else { n.div_ceil(num_replicas) };
    selected.min((n * num_repeats).div_ceil(num_replicas))
}

/// DeiT's `RASampler` layout for a given permutation `perm` of the dataset:
/// each entry repeated `num_repeats` times in a row, the list wrapped round to
/// a multiple of `num_replicas`, rank `rank` taking every `num_replicas`-th
/// entry from `rank` on, truncated to [`ra_num_selected`]. With one replica an
/// epoch is the first `N // 256 * 256` entries: about N / r distinct images,
/// each r times in a row (so in the same batch). With `R = r` replicas the r
/// copies of an image land on r different ranks, which is the design.
pub fn ra_layout(perm: &[usize], num_repeats: usize, num_replicas: usize, rank: usize) -> Vec<usize> {
    assert!(rank < num_replicas, "repeated augmentation: rank {rank} >= num_replicas {num_replicas}");
    let len = perm.len() * num_repeats;
    let take = ra_num_selected(perm.len(), num_repeats, num_replicas);
    // entry q of the padded list is entry q mod len of the repeated list
    (0..take).map(|k| perm[((rank + k * num_replicas) % len) / num_repeats]).collect()
}

/// One epoch of DeiT's repeated augmentation: a permutation of `0..n` drawn
/// from `rng`, laid out by [`ra_layout`]. All ranks must pass generators in the
/// same state (e.g. `Rng::keyed(&[seed, epoch])`) so they share the permutation.
pub fn ra_order(n: usize, num_repeats: usize, num_replicas: usize, rank: usize, rng: &mut Rng) -> Vec<usize> {
    let mut perm: Vec<usize> = (0..n).collect();
    rng.shuffle(&mut perm);
    ra_layout(&perm, num_repeats, num_replicas, rank)
}

/// The epoch of Lee et al.'s `RASampler(len, batch, repetitions=1,
/// len_factor=factor)`: `int(n * factor)` indices from fresh permutations of
/// `0..n` laid end to end (each block of `n` a permutation; no repetition
/// inside a batch). Their loader then drops the last partial batch.
pub fn concat_permutations(n: usize, factor: f64, rng: &mut Rng) -> Vec<usize> {
    let total = (n as f64 * factor) as usize;
    let mut out = Vec::with_capacity(total + n);
    while out.len() < total {
        let mut p: Vec<usize> = (0..n).collect();
        rng.shuffle(&mut p);
        out.extend(p);
    }
    out.truncate(total);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::mix::tests::{fixture, usizes};

    #[test]
    fn fixture_deit_ra_layout() {
        for c in fixture("ra.json") {
            let get = |key: &str| c[key].as_u64().unwrap() as usize;
            let (n, r, world) = (get("n"), get("num_repeats"), get("num_replicas"));
            let perm = usizes(&c["perm"]);
            for (rank, order) in c["orders"].as_array().unwrap().iter().enumerate() {
                let ours = ra_layout(&perm, r, world, rank);
                if order.as_array().unwrap().is_empty() {
                    // DeiT's empty epoch for N < 256: our fallback
                    assert!(n < 256 && ours.len() == n.div_ceil(world));
                } else {
                    assert_eq!(ours, usizes(order), "n {n} rank {rank}/{world}");
                }
            }
        }
    }

    #[test]
    fn repeated_augmentation_layout() {
        // one process: the first N // 256 * 256 entries, each image 3 times in a row
        let order = ra_order(1000, 3, 1, 0, &mut Rng::new(8));
        assert_eq!(order.len(), 768);
        let runs: Vec<usize> = order
            .chunks(3)
            .map(|r| {
                assert!(r.iter().all(|&v| v == r[0]));
                r[0]
            })
            .collect();
        let mut distinct = runs.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), 256);
        // without repeats, ranks split the permutation: disjoint and covering
        let mut all: Vec<usize> = (0..2).flat_map(|rank| ra_order(512, 1, 2, rank, &mut Rng::new(9))).collect();
        all.sort();
        assert_eq!(all, (0..512).collect::<Vec<_>>());
        // R = r: each rank sees every selected image once, the copies on different ranks
        let ranks: Vec<Vec<usize>> = (0..3).map(|rank| ra_order(768, 3, 3, rank, &mut Rng::new(10))).collect();
        assert!(ranks.iter().all(|o| o == &ranks[0] && o.len() == 256));
        // the ranks' full shares interleave back into the padded repeated list
        let perm: Vec<usize> = (0..7).map(|i| i * 10).collect();
        assert_eq!(ra_num_selected(7, 2, 3), 3); // fallback ceil(7 / 3); DeiT: 0
        let shares: Vec<Vec<usize>> = (0..3).map(|r| ra_layout(&perm, 2, 3, r)).collect();
        let inter: Vec<usize> = (0..9).map(|q| shares[q % 3][q / 3]).collect();
        assert_eq!(inter, [0, 0, 10, 10, 20, 20, 30, 30, 40]);
        assert_eq!(ra_num_selected(300, 3, 4), 64);
        assert_eq!(ra_layout(&[], 3, 1, 0), Vec::<usize>::new());
    }

    #[test]
    fn concatenated_permutations() {
        let mut r = Rng::new(11);
        let o = concat_permutations(37, 3.0, &mut r);
        assert_eq!(o.len(), 111);
        for block in o.chunks(37) {
            let mut b = block.to_vec();
            b.sort();
            assert_eq!(b, (0..37).collect::<Vec<_>>());
        }
        let o = concat_permutations(10, 2.55, &mut r);
        assert_eq!(o.len(), 25);
        let mut tail = o[20..].to_vec();
        tail.sort();
        tail.dedup();
        assert_eq!(tail.len(), 5);
    }
}
