//! Streaming quantiles in bounded memory: a log-linear histogram (HDR style: 128
//! sub-buckets per power of two, ≤ 0.8% relative error) indexed straight from the f64
//! bits, so recording costs no logarithm and a million-request run keeps no samples.

/// Values below this count as zero (seconds or tokens alike).
const MIN_VALUE: f64 = 1e-9;
/// Mantissa bits kept: 2^7 = 128 sub-buckets per octave.
const SUB_BITS: u32 = 7;
const MIN_EXP_BITS: u64 = MIN_VALUE.to_bits() >> (52 - SUB_BITS);

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

    /// The q-quantile (0..=1), 0 when empty. Bucket midpoints, clamped to [min, max].
    pub fn quantile(&self, q: f64) -> f64 {
        if self.n == 0 {
            return 0.0;
        }
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
        (0..=n)
            .map(|i| {
                let q = i as f64 / n as f64;
                (self.quantile(q), q)
            })
            .collect()
    }
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
