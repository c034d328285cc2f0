//! Summary statistics for comparing runs over seeds: mean, unbiased standard
//! deviation, percentiles, and Welch's unequal-variance t-test with its
//! two-sided p-value from the Student t distribution.
//!
//! Everything works on `f64` slices; non-finite values are the caller's
//! business (filter them first). Results that are undefined (the std of one
//! value, a t-test with fewer than two values in a group) are `NaN` / `None`
//! rather than panics, so a report can print "n/a".

/// Arithmetic mean; `NaN` for an empty slice.
pub fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.iter().sum::<f64>() / xs.len() as f64
}

/// Unbiased sample variance (divides by n - 1); `NaN` for fewer than two values.
pub fn variance(xs: &[f64]) -> f64 {
    if xs.len() < 2 {
        return f64::NAN;
    }
    let m = mean(xs);
    xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (xs.len() - 1) as f64
}

/// Unbiased sample standard deviation (`numpy.std(ddof=1)`); `NaN` for fewer than two values.
pub fn std_dev(xs: &[f64]) -> f64 {
    variance(xs).sqrt()
}

/// The `q`-th percentile (`q` in [0, 100]) with linear interpolation between
/// order statistics (numpy's default `linear` method); `NaN` for an empty slice.
pub fn percentile(xs: &[f64], q: f64) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let pos = (q.clamp(0.0, 100.0) / 100.0) * (v.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

/// The median (50th percentile).
pub fn median(xs: &[f64]) -> f64 {
    percentile(xs, 50.0)
}

/// Result of [`welch_t_test`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TTest {
    /// `(mean(a) - mean(b)) / sqrt(var(a)/n_a + var(b)/n_b)`.
    pub t: f64,
    /// Welch–Satterthwaite degrees of freedom.
    pub df: f64,
    /// Two-sided p-value, `2 * P(T_df > |t|)`.
    pub p: f64,
}

/// Welch's two-sample t-test (unequal variances), as
/// `scipy.stats.ttest_ind(a, b, equal_var=False)`. `None` when a group has
/// fewer than two values or both groups have zero variance (the statistic is
/// undefined; scipy returns NaN there).
pub fn welch_t_test(a: &[f64], b: &[f64]) -> Option<TTest> {
    if a.len() < 2 || b.len() < 2 {
        return None;
    }
    let (na, nb) = (a.len() as f64, b.len() as f64);
    let (va, vb) = (variance(a) / na, variance(b) / nb);
    let se2 = va + vb;
    if !(se2 > 0.0) {
        return None;
    }
    let t = (mean(a) - mean(b)) / se2.sqrt();
    let df = se2 * se2 / (va * va / (na - 1.0) + vb * vb / (nb - 1.0));
    Some(TTest { t, df, p: student_t_two_sided(t, df) })
}

/// Two-sided tail probability `P(|T| > |t|)` of Student's t with `df` degrees
/// of freedom: `I_{df / (df + t^2)}(df / 2, 1 / 2)`.
pub fn student_t_two_sided(t: f64, df: f64) -> f64 {
    if t.is_nan() || !(df > 0.0) {
        return f64::NAN;
    }
    if t.is_infinite() {
        return 0.0;
    }
    regularized_incomplete_beta(df / (df + t * t), 0.5 * df, 0.5).clamp(0.0, 1.0)
}

/// Cumulative distribution function of Student's t with `df` degrees of freedom.
pub fn student_t_cdf(t: f64, df: f64) -> f64 {
    let tail = 0.5 * student_t_two_sided(t, df);
    if t > 0.0 {
        1.0 - tail
    } else {
        tail
    }
}

/// `ln Γ(x)` for `x > 0` (Lanczos approximation, g = 7, 9 terms; relative
/// error below 1e-15 over the range used here).
pub fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Γ(x) Γ(1 - x) = π / sin(πx).
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).abs().ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + G + 0.5;
    for (i, c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// The regularized incomplete beta function `I_x(a, b)` for `a, b > 0`,
/// `x` in [0, 1], by its continued fraction (modified Lentz's method),
/// using the symmetry `I_x(a, b) = 1 - I_{1-x}(b, a)` where that converges faster.
pub fn regularized_incomplete_beta(x: f64, a: f64, b: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln();
    if x < (a + 1.0) / (a + b + 2.0) {
        ln_front.exp() * beta_continued_fraction(x, a, b) / a
    } else {
        1.0 - ln_front.exp() * beta_continued_fraction(1.0 - x, b, a) / b
    }
}

fn beta_continued_fraction(x: f64, a: f64, b: f64) -> f64 {
    const TINY: f64 = 1e-300;
    const EPS: f64 = 1e-15;
    let guard = |v: f64| if v.abs() < TINY { TINY } else { v };
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 / guard(1.0 - qab * x / qap);
    let mut h = d;
    for m in 1..=10_000 {
        let m = m as f64;
        let m2 = 2.0 * m;
        // Even step.
        let aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1.0 / guard(1.0 + aa * d);
        c = guard(1.0 + aa / c);
        h *= d * c;
        // Odd step.
        let aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1.0 / guard(1.0 + aa * d);
        c = guard(1.0 + aa / c);
        let delta = d * c;
        h *= delta;
        if (delta - 1.0).abs() < EPS {
            break;
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs().max(1e-300)
    }

    // Reference values below come from SciPy 1.17.1 / NumPy (Python):
    // scipy.stats.ttest_ind(a, b, equal_var=False) -> statistic, pvalue, df;
    // numpy.mean, numpy.std(ddof=1), numpy.percentile; scipy.stats.t.cdf / t.sf.

    #[test]
    fn mean_and_unbiased_std() {
        let a = [27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7, 21.4];
        assert!(close(mean(&a), 20.819999999999997, 1e-14));
        assert!(close(std_dev(&a), 2.8048936827317665, 1e-13));
        assert!(mean(&[]).is_nan());
        assert!(std_dev(&[1.0]).is_nan());
        assert_eq!(std_dev(&[2.0, 2.0, 2.0]), 0.0);
    }

    #[test]
    fn percentiles_interpolate_like_numpy() {
        let v = [3.0, 1.0, 4.0, 1.5, 9.0, 2.6];
        let expected = [(0.0, 1.0), (25.0, 1.775), (50.0, 2.8), (90.0, 6.5), (95.0, 7.75), (100.0, 9.0)];
        for (q, e) in expected {
            assert!(close(percentile(&v, q), e, 1e-12), "p{q}: {} vs {e}", percentile(&v, q));
        }
        assert_eq!(median(&[5.0]), 5.0);
        assert!(percentile(&[], 50.0).is_nan());
    }

    #[test]
    fn welch_t_test_matches_scipy() {
        // (a, b, t, p, df)
        type Case<'a> = (&'a [f64], &'a [f64], f64, f64, f64);
        let cases: [Case; 3] = [
            (&[0.752, 0.761, 0.748], &[0.776, 0.781, 0.769], -4.178358252465949, 0.014224430754288515, 3.9610415962123775),
            (
                &[1.0, 2.0, 3.0, 4.0, 5.0],
                &[2.0, 4.0, 6.0, 8.0, 10.0, 12.0],
                -2.3763541031440183,
                0.04928433820673053,
                6.972255729794934,
            ),
            (
                &[27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7, 21.4],
                &[27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5, 24.4],
                -2.455356398286006,
                0.021378001462866992,
                24.988529290231416,
            ),
        ];
        for (a, b, t, p, df) in cases {
            let r = welch_t_test(a, b).unwrap();
            assert!(close(r.t, t, 1e-10), "t {} vs {t}", r.t);
            assert!(close(r.df, df, 1e-10), "df {} vs {df}", r.df);
            assert!(close(r.p, p, 1e-9), "p {} vs {p}", r.p);
            // Symmetric in the order of the groups.
            let s = welch_t_test(b, a).unwrap();
            assert!(close(s.t, -t, 1e-10) && close(s.p, p, 1e-9));
        }
    }

    #[test]
    fn welch_t_test_is_undefined_without_spread_or_replicates() {
        assert!(welch_t_test(&[1.0], &[2.0, 3.0]).is_none());
        assert!(welch_t_test(&[1.0, 1.0], &[2.0, 2.0]).is_none());
        // One group constant, the other not: defined.
        assert!(welch_t_test(&[1.0, 1.0, 1.0], &[2.0, 2.5, 3.0]).is_some());
    }

    #[test]
    fn student_t_distribution_matches_scipy() {
        assert!(close(student_t_cdf(-2.5, 3.7), 0.03591101145591339, 1e-9));
        assert!(close(student_t_cdf(1.3, 1.0), 0.7912855998398473, 1e-12));
        // Far tail: scipy.stats.t.sf(10, 50).
        assert!(close(0.5 * student_t_two_sided(10.0, 50.0), 8.038667344167724e-14, 1e-6));
        assert_eq!(student_t_cdf(0.0, 5.0), 0.5);
        assert_eq!(student_t_two_sided(f64::INFINITY, 5.0), 0.0);
    }

    #[test]
    fn ln_gamma_and_incomplete_beta_known_values() {
        assert!(close(ln_gamma(0.5), 0.5 * std::f64::consts::PI.ln(), 1e-14));
        assert!(close(ln_gamma(10.0), (362_880f64).ln(), 1e-14));
        // I_x(1, 1) = x; I_x(a, b) + I_{1-x}(b, a) = 1.
        assert!(close(regularized_incomplete_beta(0.3, 1.0, 1.0), 0.3, 1e-13));
        let (x, a, b) = (0.37, 2.5, 4.2);
        let s = regularized_incomplete_beta(x, a, b) + regularized_incomplete_beta(1.0 - x, b, a);
        assert!(close(s, 1.0, 1e-13));
    }
}
