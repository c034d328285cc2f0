//! Classification metrics on host-side logits: top-k accuracy, macro one-vs-rest
//! AUROC (as torchmetrics' `multiclass` AUROC with `average="macro"`), per-class
//! accuracy, and the cross-entropy loss. [`fid`]: the Fréchet distance of two
//! feature sets (the statistics half of FID); [`kid`]: the Kernel Inception
//! Distance; [`features`]: Inception features of images (the network half).

use serde::{Deserialize, Serialize};

pub mod features;
pub mod fid;
pub mod kid;

/// Logits `[n, k]` row-major, with the true labels.
pub struct Predictions<'a> {
    pub logits: &'a [f32],
    pub labels: &'a [u32],
    pub classes: usize,
}

/// The metrics `vitlab eval` and results.json report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClassificationMetrics {
    pub count: usize,
    pub loss: f64,
    pub top1: f64,
    pub top5: f64,
    /// Macro one-vs-rest AUROC; `None` when no class has both positives and negatives.
    pub auroc: Option<f64>,
    pub per_class_accuracy: Vec<f64>,
}

impl Predictions<'_> {
    fn row(&self, i: usize) -> &[f32] {
        &self.logits[i * self.classes..(i + 1) * self.classes]
    }

    /// Fraction of rows whose label is among the `k` largest logits (ties broken
    /// in favour of the lower class index, as a stable sort would).
    pub fn top_k(&self, k: usize) -> f64 {
        let n = self.labels.len();
        if n == 0 {
            return 0.0;
        }
        let hits = (0..n)
            .filter(|&i| {
                let row = self.row(i);
                let y = self.labels[i] as usize;
                let target = row[y];
                // Rank of the true class: how many classes beat it.
                let better = row.iter().enumerate().filter(|&(j, &v)| v > target || (v == target && j < y)).count();
                better < k
            })
            .count();
        hits as f64 / n as f64
    }

    /// Mean cross-entropy (natural log).
    pub fn cross_entropy(&self) -> f64 {
        let n = self.labels.len();
        let total: f64 = (0..n)
            .map(|i| {
                let row = self.row(i);
                let m = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
                let lse = m + row.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln();
                lse - row[self.labels[i] as usize] as f64
            })
            .sum();
        total / n.max(1) as f64
    }

    /// Softmax probabilities of row `i`.
    fn probs(&self, i: usize) -> Vec<f64> {
        softmax(self.row(i))
    }

    /// Macro average over classes of the one-vs-rest AUROC of the softmax scores.
    /// Classes without positives or without negatives are left out of the average.
    pub fn macro_auroc(&self) -> Option<f64> {
        let n = self.labels.len();
        let probs: Vec<Vec<f64>> = (0..n).map(|i| self.probs(i)).collect();
        let mut sum = 0.0;
        let mut counted = 0;
        for c in 0..self.classes {
            let scores: Vec<f64> = probs.iter().map(|p| p[c]).collect();
            let positive: Vec<bool> = self.labels.iter().map(|&y| y as usize == c).collect();
            if let Some(a) = binary_auroc(&scores, &positive) {
                sum += a;
                counted += 1;
            }
        }
        (counted > 0).then(|| sum / counted as f64)
    }

    pub fn per_class_accuracy(&self) -> Vec<f64> {
        let mut correct = vec![0usize; self.classes];
        let mut total = vec![0usize; self.classes];
        for (i, &y) in self.labels.iter().enumerate() {
            let row = self.row(i);
            let pred = argmax(row);
            total[y as usize] += 1;
            if pred == y as usize {
                correct[y as usize] += 1;
            }
        }
        correct.iter().zip(&total).map(|(&c, &t)| if t == 0 { f64::NAN } else { c as f64 / t as f64 }).collect()
    }

    pub fn summary(&self) -> ClassificationMetrics {
        ClassificationMetrics {
            count: self.labels.len(),
            loss: self.cross_entropy(),
            top1: self.top_k(1),
            top5: self.top_k(5.min(self.classes)),
            auroc: self.macro_auroc(),
            per_class_accuracy: self.per_class_accuracy(),
        }
    }
}

/// Index of the largest value (first one on ties).
pub fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (j, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = j;
        }
    }
    best
}

/// Area under the ROC curve of `scores` for the binary labels `positive`: the
/// Mann-Whitney statistic with tied scores counted one half. `None` if either
/// class is empty.
pub fn binary_auroc(scores: &[f64], positive: &[bool]) -> Option<f64> {
    let n_pos = positive.iter().filter(|&&p| p).count();
    let n_neg = positive.len() - n_pos;
    if n_pos == 0 || n_neg == 0 {
        return None;
    }
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
    // Average ranks (1-based) over ties.
    let mut rank_sum_pos = 0.0;
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && scores[order[j + 1]] == scores[order[i]] {
            j += 1;
        }
        let avg_rank = (i + j) as f64 / 2.0 + 1.0;
        for &k in &order[i..=j] {
            if positive[k] {
                rank_sum_pos += avg_rank;
            }
        }
        i = j + 1;
    }
    let u = rank_sum_pos - (n_pos * (n_pos + 1)) as f64 / 2.0;
    Some(u / (n_pos * n_neg) as f64)
}

/// Softmax probabilities of one row of logits, in f64 (max subtracted first).
pub(crate) fn softmax(row: &[f32]) -> Vec<f64> {
    let m = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
    let e: Vec<f64> = row.iter().map(|&v| (v as f64 - m).exp()).collect();
    let s: f64 = e.iter().sum();
    e.into_iter().map(|v| v / s).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_counts_the_label_among_the_k_largest() {
        // 3 samples, 4 classes.
        let logits = [
            0.1, 0.9, 0.3, 0.2, // pred 1, order 1,2,3,0
            0.5, 0.1, 0.2, 0.4, // pred 0, order 0,3,2,1
            0.0, 0.0, 1.0, 2.0, // pred 3, order 3,2,0,1 (tie 0/1: 0 first)
        ];
        let labels = [2, 0, 1];
        let p = Predictions { logits: &logits, labels: &labels, classes: 4 };
        assert_eq!(p.top_k(1), 1.0 / 3.0);
        assert_eq!(p.top_k(2), 2.0 / 3.0);
        assert_eq!(p.top_k(3), 2.0 / 3.0); // class 1 of sample 3 ranks 4th (tie with class 0 lost)
        assert_eq!(p.top_k(4), 1.0);
        let per_class = p.per_class_accuracy();
        assert_eq!(&per_class[..3], &[1.0, 0.0, 0.0]);
        assert!(per_class[3].is_nan(), "a class without samples has no accuracy");
    }

    #[test]
    fn binary_auroc_matches_hand_computed_values() {
        // Perfect separation.
        assert_eq!(binary_auroc(&[0.1, 0.2, 0.8, 0.9], &[false, false, true, true]), Some(1.0));
        // Inverted.
        assert_eq!(binary_auroc(&[0.9, 0.8, 0.2, 0.1], &[false, false, true, true]), Some(0.0));
        // Pairs (pos, neg): scores pos {0.35, 0.8}, neg {0.1, 0.4}:
        // 0.35>0.1 yes, 0.35>0.4 no, 0.8>0.1 yes, 0.8>0.4 yes -> 3/4.
        assert_eq!(binary_auroc(&[0.1, 0.4, 0.35, 0.8], &[false, false, true, true]), Some(0.75));
        // A tie between a positive and a negative counts one half: pos {0.5}, neg {0.5, 0.1} -> (0.5 + 1)/2.
        assert_eq!(binary_auroc(&[0.5, 0.5, 0.1], &[true, false, false]), Some(0.75));
        assert_eq!(binary_auroc(&[0.5, 0.1], &[true, true]), None);
    }

    #[test]
    fn macro_auroc_averages_one_vs_rest_over_classes() {
        // 4 samples, 3 classes; logits chosen so the softmax order equals the logit order per column.
        let logits = [
            2.0, 0.0, 0.0, // y=0
            0.0, 2.0, 0.0, // y=1
            0.0, 0.0, 2.0, // y=2
            1.0, 0.0, 0.5, // y=2: class 0 scores it above sample 2 -> class 0 AUROC 1, class 2 AUROC < 1
        ];
        let labels = [0, 1, 2, 2];
        let p = Predictions { logits: &logits, labels: &labels, classes: 3 };
        let probs: Vec<Vec<f64>> = (0..4).map(|i| p.probs(i)).collect();
        let per_class: Vec<f64> = (0..3)
            .map(|c| {
                let s: Vec<f64> = probs.iter().map(|r| r[c]).collect();
                let pos: Vec<bool> = labels.iter().map(|&y| y as usize == c).collect();
                binary_auroc(&s, &pos).unwrap()
            })
            .collect();
        // class 0: pos {s0}, negs {s1, s2, s3}: s0 is the largest -> 1.
        assert_eq!(per_class[0], 1.0);
        // class 1: pos {s1} is the largest column-1 score -> 1.
        assert_eq!(per_class[1], 1.0);
        // class 2: pos {s2 (high), s3 (mid)}, negs {s0, s1} (low, equal) -> 1.
        assert_eq!(per_class[2], 1.0);
        assert_eq!(p.macro_auroc(), Some(1.0));
        // Make class 2 imperfect: sample 3's class-2 score below sample 0's.
        let logits2 = [0.0, 0.0, 1.0, 0.0, 2.0, 0.0, 0.0, 0.0, 2.0, 3.0, 0.0, 0.0];
        let p2 = Predictions { logits: &logits2, labels: &labels, classes: 3 };
        // class 2 scores: s0=e/(2+e)=0.576, s1=1/(2+e^2)=0.106, s2=0.787, s3=1/(e^3+2)=0.045.
        // pos {0.787, 0.045} vs neg {0.576, 0.106}: pairs won 2 of 4 -> 0.5.
        // class 0 scores: s0=0.212, s1=0.106, s2=0.106, s3=0.909; pos {s0} vs neg {0.106, 0.106, 0.909}: 2/3.
        // class 1: s1 = e^2/(2+e^2) is the largest -> 1.
        let expected = (2.0 / 3.0 + 1.0 + 0.5) / 3.0;
        assert!((p2.macro_auroc().unwrap() - expected).abs() < 1e-12);
    }

    #[test]
    fn cross_entropy_of_uniform_logits_is_log_k() {
        let logits = [0.0f32; 8];
        let labels = [0, 3];
        let p = Predictions { logits: &logits, labels: &labels, classes: 4 };
        assert!((p.cross_entropy() - 4f64.ln()).abs() < 1e-12);
    }
}
