//! The Fréchet distance between two sets of feature vectors (SPEC §6): the
//! statistics half of FID, independent of the network that makes the features.
//!
//! `FID = |mu1 - mu2|^2 + Tr(S1) + Tr(S2) - 2 Tr((S1 S2)^(1/2))`, means and
//! unbiased covariances accumulated in f64 as the reference implementations do.
//! The trace of the matrix square root is computed without a general `sqrtm`:
//! with `R = S1^(1/2)` (symmetric, from S1's eigendecomposition), `S1 S2` is
//! similar to the symmetric positive semi-definite `R S2 R`, so
//! `Tr((S1 S2)^(1/2)) = sum_i sqrt(lambda_i(R S2 R))`.

use crate::{Error, Result};

/// Streams feature vectors into the sums that give their mean and covariance.
#[derive(Clone, Debug)]
pub struct FeatureAccumulator {
    /// The set's name in errors ("real test A").
    name: String,
    dim: usize,
    count: usize,
    sum: Vec<f64>,
    /// Upper triangle (i <= j) of sum x x^T, row-major `dim x dim`.
    outer: Vec<f64>,
}

impl FeatureAccumulator {
    pub fn new(name: impl Into<String>, dim: usize) -> Self {
        FeatureAccumulator { name: name.into(), dim, count: 0, sum: vec![0.0; dim], outer: vec![0.0; dim * dim] }
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    pub fn count(&self) -> usize {
        self.count
    }

    /// Adds a batch of feature vectors, `rows x dim` row-major.
    pub fn add(&mut self, rows: &[f32]) -> Result<()> {
        let d = self.dim;
        if d == 0 || !rows.len().is_multiple_of(d) {
            return Err(Error::Metric {
                what: format!("FID features of {}", self.name),
                message: format!("a batch of {} values is not a whole number of {d}-dimensional vectors", rows.len()),
            });
        }
        if let Some(bad) = rows.iter().find(|v| !v.is_finite()) {
            return Err(Error::Metric {
                what: format!("FID features of {}", self.name),
                message: format!("a feature value is {bad}; every value must be finite"),
            });
        }
        let n = rows.len() / d;
        // Column-major f64 copy of the batch, so each (i, j) sum runs over contiguous memory.
        let mut cols = vec![0f64; n * d];
        for (r, row) in rows.chunks_exact(d).enumerate() {
            for (i, &v) in row.iter().enumerate() {
                cols[i * n + r] = v as f64;
            }
        }
        for i in 0..d {
            let ci = &cols[i * n..(i + 1) * n];
            self.sum[i] += ci.iter().sum::<f64>();
            for j in i..d {
                let cj = &cols[j * n..(j + 1) * n];
                self.outer[i * d + j] += ci.iter().zip(cj).map(|(a, b)| a * b).sum::<f64>();
            }
        }
        self.count += n;
        Ok(())
    }

    /// Mean and unbiased covariance.
    pub fn finish(&self) -> Result<FeatureStats> {
        let (n, d) = (self.count, self.dim);
        if n < 2 {
            return Err(Error::Metric {
                what: format!("FID features of {}", self.name),
                message: format!("{n} feature vector(s); a covariance needs at least 2"),
            });
        }
        let mean: Vec<f64> = self.sum.iter().map(|s| s / n as f64).collect();
        let mut cov = vec![0f64; d * d];
        for i in 0..d {
            for j in i..d {
                let c = (self.outer[i * d + j] - n as f64 * mean[i] * mean[j]) / (n - 1) as f64;
                cov[i * d + j] = c;
                cov[j * d + i] = c;
            }
        }
        Ok(FeatureStats { count: n, dim: d, mean, cov })
    }
}

/// The mean and unbiased covariance of a set of feature vectors.
#[derive(Clone, Debug, PartialEq)]
pub struct FeatureStats {
    pub count: usize,
    pub dim: usize,
    pub mean: Vec<f64>,
    /// `dim x dim`, row-major.
    pub cov: Vec<f64>,
}

impl FeatureStats {
    /// Statistics of `rows x dim` row-major features; `name` names the set in errors.
    pub fn from_features(features: &[f32], dim: usize, name: &str) -> Result<Self> {
        let mut acc = FeatureAccumulator::new(name, dim);
        acc.add(features)?;
        acc.finish()
    }
}

/// The Fréchet distance between two feature distributions (FID when the
/// features are InceptionV3's). Each set needs more samples than feature
/// dimensions: with fewer, its covariance is singular and the distance
/// meaningless, which is an error naming the set rather than a number.
pub fn frechet_distance(a: &FeatureStats, a_name: &str, b: &FeatureStats, b_name: &str) -> Result<f64> {
    if a.dim != b.dim {
        return Err(Error::Metric {
            what: "FID".into(),
            message: format!("{a_name} has {}-dimensional features, {b_name} {}", a.dim, b.dim),
        });
    }
    for (s, name) in [(a, a_name), (b, b_name)] {
        if s.mean.iter().chain(&s.cov).any(|v| !v.is_finite()) {
            return Err(Error::Metric {
                what: format!("FID of {name}"),
                message: "its feature statistics are not finite".into(),
            });
        }
        if s.count <= s.dim {
            return Err(Error::Metric {
                what: format!("FID of {name}"),
                message: format!(
                    "{} samples for {} feature dimensions: the covariance is singular; FID needs more samples \
                     than dimensions (use more images, or lower-dimensional features)",
                    s.count, s.dim
                ),
            });
        }
    }
    let d = a.dim;
    let mean_term: f64 = a.mean.iter().zip(&b.mean).map(|(x, y)| (x - y) * (x - y)).sum();
    let trace = |m: &[f64]| (0..d).map(|i| m[i * d + i]).sum::<f64>();
    let (vals, vecs) = symmetric_eigen(&a.cov, d, true);
    let vecs = vecs.expect("requested");
    // R = V diag(sqrt(max(l, 0))) V^T
    let roots: Vec<f64> = vals.iter().map(|&l| l.max(0.0).sqrt()).collect();
    let mut r = vec![0f64; d * d];
    for (k, &root) in roots.iter().enumerate() {
        if root == 0.0 {
            continue;
        }
        let v = &vecs[k * d..(k + 1) * d];
        for i in 0..d {
            let scaled = root * v[i];
            for (x, &vj) in r[i * d..(i + 1) * d].iter_mut().zip(v) {
                *x += scaled * vj;
            }
        }
    }
    let mut m = matmul(&matmul(&r, &b.cov, d), &r, d);
    // Symmetrise away rounding before the eigenvalues.
    for i in 0..d {
        for j in i + 1..d {
            let v = 0.5 * (m[i * d + j] + m[j * d + i]);
            m[i * d + j] = v;
            m[j * d + i] = v;
        }
    }
    let (mvals, _) = symmetric_eigen(&m, d, false);
    let tr_sqrt: f64 = mvals.iter().map(|&l| l.max(0.0).sqrt()).sum();
    Ok(mean_term + trace(&a.cov) + trace(&b.cov) - 2.0 * tr_sqrt)
}

/// `a x b`, both `d x d` row-major.
fn matmul(a: &[f64], b: &[f64], d: usize) -> Vec<f64> {
    let mut out = vec![0f64; d * d];
    for i in 0..d {
        let row = &mut out[i * d..(i + 1) * d];
        for k in 0..d {
            let aik = a[i * d + k];
            if aik == 0.0 {
                continue;
            }
            for (o, &bkj) in row.iter_mut().zip(&b[k * d..(k + 1) * d]) {
                *o += aik * bkj;
            }
        }
    }
    out
}

/// Eigenvalues (ascending) and, if asked, eigenvectors of a symmetric `d x d`
/// matrix: Householder reduction to tridiagonal form, then the implicit QL
/// algorithm (the EISPACK `tred2`/`tql2` pair). Eigenvector k is row k of the
/// returned `d x d` matrix.
pub fn symmetric_eigen(a: &[f64], d: usize, vectors: bool) -> (Vec<f64>, Option<Vec<f64>>) {
    if d == 0 {
        return (Vec::new(), vectors.then(Vec::new));
    }
    // tred2 works on the transpose of its matrix V (a symmetric input is its own
    // transpose), so that its column sweeps and tql2's column rotations run along
    // contiguous rows; it leaves V^T, the orthogonal reduction, in `vt`.
    let mut vt = a.to_vec();
    let mut diag = vec![0f64; d];
    let mut off = vec![0f64; d];
    tred2(&mut vt, d, &mut diag, &mut off, vectors);
    tql2(&mut vt, d, &mut diag, &mut off, vectors);
    let mut order: Vec<usize> = (0..d).collect();
    order.sort_by(|&x, &y| diag[x].total_cmp(&diag[y]));
    let vals = order.iter().map(|&k| diag[k]).collect();
    let vecs = vectors.then(|| order.iter().flat_map(|&k| vt[k * d..(k + 1) * d].to_vec()).collect());
    (vals, vecs)
}

/// Householder tridiagonalisation of a symmetric matrix V (its lower triangle
/// used), stored transposed in `vt` (element (i, j) of V at `vt[j * n + i]`): on
/// return `diag`/`off` hold the tridiagonal matrix (`off[i]` couples i-1 and i)
/// and, with `vectors`, `vt` the transpose of the accumulated orthogonal transformation.
fn tred2(vt: &mut [f64], n: usize, diag: &mut [f64], off: &mut [f64], vectors: bool) {
    let v = vt;
    let at = |i: usize, j: usize| j * n + i;
    for j in 0..n {
        diag[j] = v[at(n - 1, j)];
    }
    for i in (1..n).rev() {
        let scale: f64 = diag[..i].iter().map(|x| x.abs()).sum();
        let mut h = 0.0;
        if scale == 0.0 {
            off[i] = diag[i - 1];
            for j in 0..i {
                diag[j] = v[at(i - 1, j)];
                v[at(i, j)] = 0.0;
                v[at(j, i)] = 0.0;
            }
        } else {
            for x in &mut diag[..i] {
                *x /= scale;
                h += *x * *x;
            }
            let mut f = diag[i - 1];
            let mut g = if f > 0.0 { -h.sqrt() } else { h.sqrt() };
            off[i] = scale * g;
            h -= f * g;
            diag[i - 1] = f - g;
            off[..i].fill(0.0);
            for j in 0..i {
                f = diag[j];
                v[at(j, i)] = f;
                g = off[j] + v[at(j, j)] * f;
                for k in j + 1..i {
                    g += v[at(k, j)] * diag[k];
                    off[k] += v[at(k, j)] * f;
                }
                off[j] = g;
            }
            f = 0.0;
            for j in 0..i {
                off[j] /= h;
                f += off[j] * diag[j];
            }
            let hh = f / (h + h);
            for j in 0..i {
                off[j] -= hh * diag[j];
            }
            for j in 0..i {
                f = diag[j];
                g = off[j];
                for k in j..i {
                    v[at(k, j)] -= f * off[k] + g * diag[k];
                }
                diag[j] = v[at(i - 1, j)];
                v[at(i, j)] = 0.0;
            }
        }
        diag[i] = h;
    }
    off[0] = 0.0;
    if !vectors {
        // The tridiagonal's diagonal is left on V's diagonal.
        for (j, x) in diag.iter_mut().enumerate() {
            *x = v[at(j, j)];
        }
        return;
    }
    // Accumulate the transformations.
    for i in 0..n - 1 {
        v[at(n - 1, i)] = v[at(i, i)];
        v[at(i, i)] = 1.0;
        let h = diag[i + 1];
        if h != 0.0 {
            for k in 0..=i {
                diag[k] = v[at(k, i + 1)] / h;
            }
            for j in 0..=i {
                let g: f64 = (0..=i).map(|k| v[at(k, i + 1)] * v[at(k, j)]).sum();
                for k in 0..=i {
                    v[at(k, j)] -= g * diag[k];
                }
            }
        }
        for k in 0..=i {
            v[at(k, i + 1)] = 0.0;
        }
    }
    for j in 0..n {
        diag[j] = v[at(n - 1, j)];
        v[at(n - 1, j)] = 0.0;
    }
    v[at(n - 1, n - 1)] = 1.0;
}

/// Implicit QL on the tridiagonal (`diag`, `off`) from [`tred2`]; the
/// eigenvalues end in `diag`. With `vectors`, `vt` (the transpose of tred2's
/// transformation) is rotated along, and its row k becomes eigenvector k.
fn tql2(vt: &mut [f64], n: usize, diag: &mut [f64], off: &mut [f64], vectors: bool) {
    for i in 1..n {
        off[i - 1] = off[i];
    }
    off[n - 1] = 0.0;
    let mut f = 0.0;
    let mut tst1: f64 = 0.0;
    let eps = f64::EPSILON;
    // QL converges in a few iterations per eigenvalue; the cap only stops a
    // non-finite input from looping forever (its eigenvalues are then NaN).
    let mut budget = 30 * n + 30;
    for l in 0..n {
        tst1 = tst1.max(diag[l].abs() + off[l].abs());
        let mut m = l;
        while m < n - 1 && off[m].abs() > eps * tst1 {
            m += 1;
        }
        if m > l {
            loop {
                let g = diag[l];
                let mut p = (diag[l + 1] - g) / (2.0 * off[l]);
                let mut r = p.hypot(1.0);
                if p < 0.0 {
                    r = -r;
                }
                diag[l] = off[l] / (p + r);
                diag[l + 1] = off[l] * (p + r);
                let dl1 = diag[l + 1];
                let mut h = g - diag[l];
                for x in &mut diag[l + 2..n] {
                    *x -= h;
                }
                f += h;
                p = diag[m];
                let (mut c, mut c2, mut c3) = (1.0, 1.0, 1.0);
                let el1 = off[l + 1];
                let (mut s, mut s2) = (0.0, 0.0);
                for i in (l..m).rev() {
                    c3 = c2;
                    c2 = c;
                    s2 = s;
                    let g = c * off[i];
                    h = c * p;
                    r = p.hypot(off[i]);
                    off[i + 1] = s * r;
                    s = off[i] / r;
                    c = p / r;
                    p = c * diag[i] - s * g;
                    diag[i + 1] = h + s * (c * g + s * diag[i]);
                    if vectors {
                        let (lo, hi) = vt.split_at_mut((i + 1) * n);
                        let (row_i, row_i1) = (&mut lo[i * n..], &mut hi[..n]);
                        for (a, b) in row_i.iter_mut().zip(row_i1.iter_mut()) {
                            let t = *b;
                            *b = s * *a + c * t;
                            *a = c * *a - s * t;
                        }
                    }
                }
                p = -s * s2 * c3 * el1 * off[l] / dl1;
                off[l] = s * p;
                diag[l] = c * p;
                budget = budget.saturating_sub(1);
                if !(off[l].abs() > eps * tst1) {
                    break;
                }
                if budget == 0 {
                    diag.fill(f64::NAN);
                    return;
                }
            }
        }
        diag[l] += f;
        off[l] = 0.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random_symmetric(d: usize, seed: u64) -> Vec<f64> {
        let mut state = seed;
        let mut next = || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((state >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        };
        let mut a = vec![0f64; d * d];
        for i in 0..d {
            for j in i..d {
                let x = next();
                a[i * d + j] = x;
                a[j * d + i] = x;
            }
        }
        a
    }

    /// A V^T = V^T diag(l) and V V^T = I, for sizes that exercise every branch
    /// (1x1, a zero row that skips a Householder step, general matrices).
    #[test]
    fn eigendecomposition_reconstructs_the_matrix() {
        let mut cases: Vec<(usize, Vec<f64>)> = [1, 2, 3, 7, 40].iter().map(|&d| (d, random_symmetric(d, d as u64))).collect();
        // The last row's off-diagonal part zero: tred2's first Householder step is skipped, the others are not.
        let mut zero_row = random_symmetric(5, 9);
        for k in 0..4 {
            zero_row[4 * 5 + k] = 0.0;
            zero_row[k * 5 + 4] = 0.0;
        }
        cases.push((5, zero_row));
        cases.push((4, vec![2.0, 0.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 2.0]));
        for (d, a) in cases {
            let (vals, vecs) = symmetric_eigen(&a, d, true);
            let v = vecs.unwrap();
            assert!(vals.windows(2).all(|w| w[0] <= w[1]), "ascending");
            for k in 0..d {
                for i in 0..d {
                    let av: f64 = (0..d).map(|j| a[i * d + j] * v[k * d + j]).sum();
                    assert!((av - vals[k] * v[k * d + i]).abs() < 1e-10, "d {d}, vector {k}, row {i}");
                }
                for l in 0..d {
                    let dot: f64 = (0..d).map(|j| v[k * d + j] * v[l * d + j]).sum();
                    assert!((dot - f64::from(u8::from(k == l))).abs() < 1e-10, "d {d}: orthonormal {k} {l}");
                }
            }
            let (only, none) = symmetric_eigen(&a, d, false);
            assert!(none.is_none());
            assert!(only.iter().zip(&vals).all(|(x, y)| (x - y).abs() < 1e-12));
        }
    }

    /// A non-finite matrix ends (with NaN eigenvalues) instead of iterating forever.
    #[test]
    fn a_non_finite_matrix_does_not_hang_the_solver() {
        for a in [vec![f64::NAN, 1.0, 1.0, 0.0], vec![1.0, f64::INFINITY, f64::INFINITY, 2.0]] {
            let (vals, _) = symmetric_eigen(&a, 2, true);
            assert!(vals.iter().any(|v| !v.is_finite()), "{vals:?}");
        }
    }

    fn fixture() -> (crate::tensor_file::TensorMap, std::collections::HashMap<String, String>) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fid.safetensors");
        crate::tensor_file::read_safetensors(&path).unwrap()
    }

    /// Against pytorch-fid's formula (scipy's general `sqrtm`) on the same float32
    /// features (tools/make_fixtures.py), including a 64-d case with 80 samples.
    #[test]
    fn fid_equals_the_scipy_reference() {
        let (tensors, meta) = fixture();
        for case in ["small", "near_singular"] {
            let stats = |set: &str| {
                let t = &tensors[&format!("{case}.{set}")];
                FeatureStats::from_features(&t.data, t.shape[1], set).unwrap()
            };
            let got = frechet_distance(&stats("a"), "a", &stats("b"), "b").unwrap();
            let expected: f64 = meta[&format!("{case}.fid")].parse().unwrap();
            assert!((got - expected).abs() <= 1e-6 * expected, "{case}: {got} vs scipy {expected}");
        }
    }

    /// Streaming in batches gives the statistics of the whole set; a set against
    /// itself is at distance 0.
    #[test]
    fn batches_accumulate_to_the_whole_set_and_a_set_is_at_distance_zero() {
        let (tensors, _) = fixture();
        let t = &tensors["small.a"];
        let d = t.shape[1];
        let whole = FeatureStats::from_features(&t.data, d, "a").unwrap();
        let mut acc = FeatureAccumulator::new("a", d);
        for batch in t.data.chunks(7 * d) {
            acc.add(batch).unwrap();
        }
        let streamed = acc.finish().unwrap();
        assert_eq!(streamed.count, 300);
        for (x, y) in whole.cov.iter().zip(&streamed.cov).chain(whole.mean.iter().zip(&streamed.mean)) {
            assert!((x - y).abs() < 1e-9 * (1.0 + x.abs()));
        }
        let self_distance = frechet_distance(&whole, "a", &whole, "a").unwrap();
        assert!(self_distance.abs() < 1e-8, "{self_distance}");
    }

    /// Diagonal covariances have the closed form |mu1 - mu2|^2 + sum (sqrt(a_i) - sqrt(b_i))^2.
    #[test]
    fn diagonal_covariances_give_the_closed_form() {
        let d = 3;
        let diag = |v: [f64; 3]| {
            let mut m = vec![0f64; 9];
            for i in 0..3 {
                m[i * 3 + i] = v[i];
            }
            m
        };
        let a = FeatureStats { count: 10, dim: d, mean: vec![0.0, 1.0, 2.0], cov: diag([1.0, 4.0, 9.0]) };
        let b = FeatureStats { count: 10, dim: d, mean: vec![1.0, 1.0, 0.0], cov: diag([4.0, 1.0, 0.25]) };
        let expected = 1.0 + 4.0 + (1.0f64 - 2.0).powi(2) + (2.0f64 - 1.0).powi(2) + (3.0f64 - 0.5).powi(2);
        let got = frechet_distance(&a, "a", &b, "b").unwrap();
        assert!((got - expected).abs() < 1e-12, "{got} vs {expected}");
    }

    /// Too few samples for the dimension is an error that names the set.
    #[test]
    fn a_singular_covariance_is_an_error_naming_the_set() {
        let (tensors, _) = fixture();
        let t = &tensors["near_singular.a"];
        let d = t.shape[1];
        let full = FeatureStats::from_features(&t.data, d, "real A").unwrap();
        let few = FeatureStats::from_features(&t.data[..40 * d], d, "G_BA(test B)").unwrap();
        let msg = frechet_distance(&full, "real test A", &few, "G_BA(test B)").unwrap_err().to_string();
        assert!(msg.contains("G_BA(test B)") && msg.contains("40 samples for 64") && msg.contains("singular"), "{msg}");
        let msg = FeatureStats::from_features(&t.data[..d], d, "real A").unwrap_err().to_string();
        assert!(msg.contains("real A") && msg.contains("at least 2"), "{msg}");
        let msg = FeatureAccumulator::new("real A", d).add(&t.data[..d + 1]).unwrap_err().to_string();
        assert!(msg.contains("real A") && msg.contains("not a whole number of 64-dimensional"), "{msg}");
        let mut bad = t.data[..2 * d].to_vec();
        bad[5] = f32::NAN;
        let msg = FeatureAccumulator::new("G_AB(test A)", d).add(&bad).unwrap_err().to_string();
        assert!(msg.contains("G_AB(test A)") && msg.contains("NaN"), "{msg}");
    }
}
