//! Attention maps of one image, on the host: the attention the pooled output
//! reads per block and head, and attention rollout (Abnar & Zuidema 2020).
//!
//! The pooled output reads the class token's row when the model has one; GAP
//! and MAP models have none, so their query is the mean of all tokens' rows
//! (every token's attention, averaged: what the mean pooling reads, and the
//! nearest thing to a MAP head's input, whose own probe attends after the last
//! block). `tools/make_attention_fixtures.py` computes the same in PyTorch.

/// How rollout fuses the heads of one block into one matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fusion {
    Mean,
    Max,
    Min,
}

impl Fusion {
    pub fn parse(s: &str) -> Option<Fusion> {
        match s {
            "mean" => Some(Fusion::Mean),
            "max" => Some(Fusion::Max),
            "min" => Some(Fusion::Min),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Fusion::Mean => "mean",
            Fusion::Max => "max",
            Fusion::Min => "min",
        }
    }
}

/// The softmax attention of every block and head for one image.
#[derive(Clone, Debug, PartialEq)]
pub struct AttentionMaps {
    pub blocks: usize,
    pub heads: usize,
    /// Tokens per block: the class token (when `has_cls`) and the patches.
    pub tokens: usize,
    pub has_cls: bool,
    /// `[blocks, heads, tokens, tokens]`, row t the attention of token t.
    pub attention: Vec<f32>,
}

impl AttentionMaps {
    /// Patches (the tokens a map is drawn over).
    pub fn patches(&self) -> usize {
        self.tokens - usize::from(self.has_cls)
    }

    fn head(&self, block: usize, head: usize) -> &[f32] {
        let tt = self.tokens * self.tokens;
        let start = (block * self.heads + head) * tt;
        &self.attention[start..start + tt]
    }

    /// The row the pooled output reads: the class token's, or the mean of all rows.
    fn query_row(&self, m: &[f64]) -> Vec<f64> {
        let t = self.tokens;
        if self.has_cls {
            return m[..t].to_vec();
        }
        let mut q = vec![0.0; t];
        for row in m.chunks(t) {
            for (a, v) in q.iter_mut().zip(row) {
                *a += v / t as f64;
            }
        }
        q
    }

    /// `[blocks, heads, patches]`: per block and head, the attention the pooled
    /// output reads over the patches.
    pub fn query(&self) -> Vec<f32> {
        let skip = usize::from(self.has_cls);
        let mut out = Vec::with_capacity(self.blocks * self.heads * self.patches());
        for l in 0..self.blocks {
            for h in 0..self.heads {
                let m: Vec<f64> = self.head(l, h).iter().map(|&v| v as f64).collect();
                out.extend(self.query_row(&m)[skip..].iter().map(|&v| v as f32));
            }
        }
        out
    }

    /// Attention rollout over the patches: per block, the heads fused by `fusion`,
    /// the lowest `discard_ratio` of the fused matrix's entries set to 0 (never
    /// the class token's attention to itself), the residual added as
    /// `(A + I) / 2` (the same `x + f(x)` form for the serial and the parallel
    /// ViT-22B blocks: both add the attention branch to the block's input),
    /// rows renormalised to 1, and the product through the blocks, first block
    /// rightmost; the row of the pooled query. As jacobgil/vit-explain, but with
    /// rows renormalised (vit-explain divides by a sum without `keepdim`).
    pub fn rollout(&self, fusion: Fusion, discard_ratio: f64) -> Vec<f64> {
        let t = self.tokens;
        let mut result = identity(t);
        for l in 0..self.blocks {
            let mut fused = vec![0.0f64; t * t];
            for h in 0..self.heads {
                for (f, &v) in fused.iter_mut().zip(self.head(l, h)) {
                    let v = v as f64;
                    *f = match fusion {
                        Fusion::Mean => *f + v / self.heads as f64,
                        Fusion::Max if h == 0 => v,
                        Fusion::Max => f.max(v),
                        Fusion::Min if h == 0 => v,
                        Fusion::Min => f.min(v),
                    };
                }
            }
            discard_lowest(&mut fused, discard_ratio, self.has_cls);
            for i in 0..t {
                let row = &mut fused[i * t..(i + 1) * t];
                row[i] += 1.0;
                let sum: f64 = row.iter().map(|v| v / 2.0).sum();
                row.iter_mut().for_each(|v| *v = *v / 2.0 / sum);
            }
            result = matmul(&fused, &result, t);
        }
        let row = self.query_row(&result);
        row[usize::from(self.has_cls)..].to_vec()
    }
}

/// Sets the `floor(len * ratio)` smallest entries to 0, except entry 0 (the
/// class token's attention to itself) when there is a class token.
fn discard_lowest(m: &mut [f64], ratio: f64, has_cls: bool) {
    let k = (m.len() as f64 * ratio) as usize;
    if k == 0 {
        return;
    }
    let mut order: Vec<usize> = (0..m.len()).collect();
    order.sort_by(|&a, &b| m[a].total_cmp(&m[b]).then(a.cmp(&b)));
    for &i in &order[..k] {
        if !(has_cls && i == 0) {
            m[i] = 0.0;
        }
    }
}

fn identity(t: usize) -> Vec<f64> {
    let mut m = vec![0.0; t * t];
    (0..t).for_each(|i| m[i * t + i] = 1.0);
    m
}

/// `a @ b` of two `t x t` row-major matrices.
fn matmul(a: &[f64], b: &[f64], t: usize) -> Vec<f64> {
    let mut out = vec![0.0; t * t];
    for i in 0..t {
        for k in 0..t {
            let aik = a[i * t + k];
            if aik != 0.0 {
                let (row, brow) = (&mut out[i * t..(i + 1) * t], &b[k * t..(k + 1) * t]);
                row.iter_mut().zip(brow).for_each(|(o, v)| *o += aik * v);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn maps(attention: Vec<f32>, blocks: usize, heads: usize, has_cls: bool) -> AttentionMaps {
        let tokens = ((attention.len() / (blocks * heads)) as f64).sqrt() as usize;
        AttentionMaps { blocks, heads, tokens, has_cls, attention }
    }

    #[test]
    fn uniform_attention_rolls_out_to_uniform_patches() {
        // Every token attends to every token equally: after (A + I) / 2 the class
        // token keeps half of itself plus a sixth of each, the patches a sixth each.
        let m = maps(vec![1.0 / 3.0; 9], 1, 1, true);
        let r = m.rollout(Fusion::Mean, 0.0);
        assert_eq!(r.len(), 2);
        for v in r {
            // 1/3 is an f32 (the maps are), hence the tolerance.
            assert!((v - 1.0 / 6.0).abs() < 1e-7, "{v}");
        }
    }

    #[test]
    fn query_is_the_class_row_or_the_mean_row() {
        let a = vec![0.5, 0.25, 0.25, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0];
        assert_eq!(maps(a.clone(), 1, 1, true).query(), vec![0.25, 0.25]);
        let q = maps(a, 1, 1, false).query();
        let expected = [0.5 / 3.0, 1.25 / 3.0, 1.25 / 3.0];
        assert!(q.iter().zip(expected).all(|(a, b)| (*a as f64 - b).abs() < 1e-6), "{q:?}");
    }

    #[test]
    fn discarding_keeps_the_class_token_on_itself() {
        let mut m = vec![0.0, 0.3, 0.2, 0.1];
        discard_lowest(&mut m, 0.5, true);
        assert_eq!(m, vec![0.0, 0.3, 0.2, 0.0]);
        let mut m = vec![0.05, 0.3, 0.2, 0.1];
        discard_lowest(&mut m, 0.5, true);
        assert_eq!(m, vec![0.05, 0.3, 0.2, 0.0], "entry 0 is among the lowest but kept");
    }

    #[test]
    fn rollout_rows_stay_distributions() {
        // Two blocks, two heads, 4 tokens of random rows: the rollout of every
        // fusion and ratio sums to at most 1 over the patches and is non-negative.
        let mut rng = crate::util::Rng::new(3);
        let mut att = Vec::new();
        for _ in 0..2 * 2 * 4 {
            let row: Vec<f32> = (0..4).map(|_| rng.uniform_f64() as f32 + 0.01).collect();
            let s: f32 = row.iter().sum();
            att.extend(row.iter().map(|v| v / s));
        }
        for has_cls in [true, false] {
            let m = maps(att.clone(), 2, 2, has_cls);
            for fusion in [Fusion::Mean, Fusion::Max, Fusion::Min] {
                for ratio in [0.0, 0.5, 0.9] {
                    let r = m.rollout(fusion, ratio);
                    let s: f64 = r.iter().sum();
                    assert!(r.iter().all(|&v| v >= 0.0) && s <= 1.0 + 1e-12, "{fusion:?} {ratio}: {r:?}");
                    if !has_cls {
                        assert!((s - 1.0).abs() < 1e-12, "without a class token the patches hold it all: {s}");
                    }
                }
            }
        }
    }
}
