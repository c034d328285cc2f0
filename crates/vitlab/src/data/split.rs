//! Held-out validation splits.

use std::collections::BTreeMap;

use super::loader::Rng;

/// Carves a stratified validation set of `n_val` images out of `labels`:
/// each class gives its share (`n_val * class_count / len`, the remainders
/// going to the classes with the largest fractional parts, ties to the lower
/// label), drawn at random with `seed`. Returns `(train_indices,
/// val_indices)`, each sorted; together they cover `0..labels.len()` once.
///
/// `n_val` larger than the set is clamped to its size (then every image is a
/// validation image); callers that want an error check `n_val < labels.len()`.
pub fn stratified_split(labels: &[u32], n_val: usize, seed: u64) -> (Vec<usize>, Vec<usize>) {
    let n = labels.len();
    let n_val = n_val.min(n);
    let mut by_class: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, &l) in labels.iter().enumerate() {
        by_class.entry(l).or_default().push(i);
    }
    // Largest-remainder apportionment of n_val over the classes.
    let mut quotas: Vec<(u32, usize, u128)> = by_class
        .iter()
        .map(|(&l, idx)| {
            let exact = n_val as u128 * idx.len() as u128;
            (l, (exact / n as u128) as usize, exact % n as u128)
        })
        .collect();
    let assigned: usize = quotas.iter().map(|q| q.1).sum();
    let mut order: Vec<usize> = (0..quotas.len()).collect();
    order.sort_by(|&a, &b| quotas[b].2.cmp(&quotas[a].2).then(quotas[a].0.cmp(&quotas[b].0)));
    for &k in order.iter().take(n_val - assigned) {
        quotas[k].1 += 1;
    }
    let mut train = Vec::with_capacity(n - n_val);
    let mut val = Vec::with_capacity(n_val);
    for (label, quota, _) in quotas {
        let mut idx = by_class.remove(&label).unwrap_or_default();
        Rng::keyed(&[seed, label as u64, 0x5641_4C53]).shuffle(&mut idx);
        val.extend_from_slice(&idx[..quota]);
        train.extend_from_slice(&idx[quota..]);
    }
    train.sort_unstable();
    val.sort_unstable();
    (train, val)
}
