//! Streaming quantiles in bounded memory: a log-linear histogram (HDR style: 128
//! sub-buckets per power of two, ≤ 0.8% relative error) indexed straight from the f64
//! bits, so recording costs no logarithm and a million-request run keeps no samples.
//! Short runs are exact: the first [`EXACT_RECORDS`] records are also kept as they came,
//! and while none has been dropped quantiles are numpy's (`np.percentile`'s linear
//! interpolation, what `benchmark_serving.py` and guidellm report), not bucket midpoints.

/// Values below this count as zero (seconds or tokens alike).
const MIN_VALUE: f64 = 1e-9;
/// Mantissa bits kept: 2^7 = 128 sub-buckets per octave.
const SUB_BITS: u32 = 7;
const MIN_EXP_BITS: u64 = MIN_VALUE.to_bits() >> (52 - SUB_BITS);
/// Records (value, count) kept exactly: 1 MiB, more than a benchmark's requests or a
/// short run's steps; past it the histogram alone answers.
pub const EXACT_RECORDS: usize = 1 << 16;

fn bucket_of(v: f64) -> usize {
    ((v.to_bits() >> (52 - SUB_BITS)) - MIN_EXP_BITS) as usize
}

fn bucket_bounds(i: usize) -> (f64, f64) {
    let lo = f64::from_bits(((i as u64) + MIN_EXP_BITS) << (52 - SUB_BITS));
    let hi = f64::from_bits(((i as u64) + MIN_EXP_BITS + 1) << (52 - SUB_BITS));
    (lo, hi)
}

#[derive(Clone, Debug)]
pub struct LogHistogram {
    counts: Vec<u64>,
    n: u64,
    sum: f64,
    min: f64,
    max: f64,
    zeros: u64,
    /// Every record so far, while there have been at most [`EXACT_RECORDS`]; `None` after.
    exact: Option<Vec<(f64, u64)>>,
}

impl Default for LogHistogram {
    fn default() -> Self {
        LogHistogram {
            counts: Vec::new(),
            n: 0,
            sum: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            zeros: 0,
            exact: Some(Vec::new()),
        }
    }
}

impl LogHistogram {
    pub fn record(&mut self, v: f64) {
        self.record_n(v, 1);
    }

    /// Record `v` `count` times.
    pub fn record_n(&mut self, v: f64, count: u64) {
        if !v.is_finite() || count == 0 {
            return;
        }
        let v = v.max(0.0);
        self.n += count;
        self.sum += v * count as f64;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        if let Some(exact) = &mut self.exact {
            if exact.len() < EXACT_RECORDS {
                exact.push((v, count));
            } else {
                self.exact = None;
            }
        }
        if v < MIN_VALUE {
            self.zeros += count;
            return;
        }
        let i = bucket_of(v);
        if i >= self.counts.len() {
            self.counts.resize(i + 1, 0);
        }
        self.counts[i] += count;
    }

    pub fn count(&self) -> u64 {
        self.n
    }

    pub fn mean(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.sum / self.n as f64
        }
    }

    pub fn max(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.max
        }
    }

    /// The q-quantile (0..=1), 0 when empty: exact while every record is kept, else the
    /// bucket midpoint, clamped to [min, max].
    pub fn quantile(&self, q: f64) -> f64 {
        self.quantiles([q])[0]
    }

    /// Several quantiles at one sort of the kept records.
    pub fn quantiles<const N: usize>(&self, qs: [f64; N]) -> [f64; N] {
        if self.n == 0 {
            return [0.0; N];
        }
        match self.ranked_records() {
            Some(ranked) => qs.map(|q| interpolated(&ranked, q)),
            None => qs.map(|q| self.bucket_quantile(q)),
        }
    }

    /// The kept records in value order, each with the count of samples up to and including
    /// it; `None` once records have been dropped (or before any).
    fn ranked_records(&self) -> Option<Vec<(f64, u64)>> {
        let mut ranked = self.exact.clone().filter(|r| !r.is_empty())?;
        ranked.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
        let mut seen = 0;
        for r in &mut ranked {
            seen += r.1;
            r.1 = seen;
        }
        Some(ranked)
    }

    fn bucket_quantile(&self, q: f64) -> f64 {
        let rank = (q.clamp(0.0, 1.0) * (self.n - 1) as f64).round() as u64 + 1;
        if rank <= self.zeros {
            return self.min.max(0.0);
        }
        let mut seen = self.zeros;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (lo, hi) = bucket_bounds(i);
                return ((lo + hi) / 2.0).clamp(self.min, self.max);
            }
        }
        self.max
    }

    /// Points (value, cumulative fraction) for a CDF chart, at most `n` of them.
    pub fn cdf_points(&self, n: usize) -> Vec<(f64, f64)> {
        let ranked = self.ranked_records();
        (0..=n)
            .map(|i| {
                let q = i as f64 / n as f64;
                let v = match &ranked {
                    Some(r) => interpolated(r, q),
                    None => self.quantile(q),
                };
                (v, q)
            })
            .collect()
    }
}

/// `np.percentile(x, 100 q)`, linear interpolation between the order statistics around rank
/// q (n - 1), over the samples `ranked` ([`LogHistogram::ranked_records`], never empty)
/// stands for.
fn interpolated(ranked: &[(f64, u64)], q: f64) -> f64 {
    let n = ranked[ranked.len() - 1].1;
    let h = q.clamp(0.0, 1.0) * (n - 1) as f64;
    let below = h.floor() as u64;
    // The value of 0-based order statistic k: the first record whose samples pass k.
    let nth = |k: u64| ranked[ranked.partition_point(|r| r.1 <= k)].0;
    let (lo, hi) = (nth(below), nth((below + 1).min(n - 1)));
    lo + (h - below as f64) * (hi - lo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_n_is_n_records() {
        let (mut once, mut each) = (LogHistogram::default(), LogHistogram::default());
        for (v, n) in [(0.012, 7u64), (0.0, 3), (0.5, 1), (0.012, 2), (3.0, 0)] {
            once.record_n(v, n);
            for _ in 0..n {
                each.record(v);
            }
        }
        assert_eq!(once.count(), 13);
        assert_eq!(once.count(), each.count());
        assert_eq!(once.max(), each.max());
        assert!((once.mean() - each.mean()).abs() < 1e-15);
        for q in [0.0, 0.3, 0.5, 0.9, 1.0] {
            assert_eq!(once.quantile(q), each.quantile(q), "q{q}");
        }
    }

    #[test]
    fn short_runs_get_numpys_percentiles() {
        let mut h = LogHistogram::default();
        for v in [4.0, 1.0, 3.0, 2.0] {
            h.record(v);
        }
        // np.percentile([1, 2, 3, 4], [50, 90, 0, 100]) = [2.5, 3.7, 1, 4]
        let [p50, p90, p0, p100] = h.quantiles([0.5, 0.9, 0.0, 1.0]);
        assert_eq!((p50, p0, p100), (2.5, 1.0, 4.0));
        assert!((p90 - 3.7).abs() < 1e-12, "{p90}");
        // A record of n is n samples: np.percentile([1, 1, 3], [50, 75]) = [1, 2].
        let mut w = LogHistogram::default();
        w.record(3.0);
        w.record_n(1.0, 2);
        assert_eq!(w.quantiles([0.5, 0.75]), [1.0, 2.0]);
        assert_eq!(w.cdf_points(4)[3], (2.0, 0.75));
    }

    #[test]
    fn past_the_kept_records_the_buckets_answer() {
        let mut h = LogHistogram::default();
        for i in 0..EXACT_RECORDS {
            h.record(1.0 + i as f64 * 1e-6);
        }
        let exact = h.quantile(0.5);
        assert!((exact - (1.0 + (EXACT_RECORDS - 1) as f64 * 0.5e-6)).abs() < 1e-12);
        h.record(1.0);
        // The median ~1.0328 lies in the bucket [1 + 4/128, 1 + 5/128): its midpoint now.
        assert_eq!(h.quantile(0.5), 1.0 + 4.5 / 128.0);
    }

    #[test]
    fn quantiles_are_within_half_a_percent() {
        let mut h = LogHistogram::default();
        let mut v: Vec<f64> = (1..=100_000).map(|i| (i as f64) * 1e-4).collect();
        for x in &v {
            h.record(*x);
        }
        v.sort_by(f64::total_cmp);
        for q in [0.5, 0.9, 0.95, 0.99] {
            let exact = v[((q * (v.len() - 1) as f64).round()) as usize];
            let got = h.quantile(q);
            assert!(
                (got - exact).abs() / exact < 0.008,
                "q{q}: {got} vs {exact}"
            );
        }
        assert!((h.mean() - 5.00005).abs() < 1e-9);
    }
}
