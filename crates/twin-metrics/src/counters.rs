//! Counters across scrapes: Prometheus-style `increase()` with resets, and the indexed
//! tracker the doctor and the sandbox feed scrape by scrape. Kept apart from the exposition
//! parser, which only turns text into [`Scrape`]s.

use std::collections::HashMap;

use crate::parser::{candidate_names, canonical_into, split_suffix, Sample, Scrape};

/// Prometheus-style `increase()` over successive readings of one counter,
/// without extrapolation: positive deltas add up, and a drop is a counter
/// reset, after which the new reading is all increase.
pub fn counter_increase(readings: &[f64]) -> f64 {
    let mut total = 0.0;
    for w in readings.windows(2) {
        let (prev, cur) = (w[0], w[1]);
        if cur.is_nan() || prev.is_nan() {
            continue;
        }
        total += if cur < prev { cur } else { cur - prev };
    }
    total
}

/// Whether a sample name denotes a monotonic series.
fn is_monotonic(name: &str, meta_kind: Option<&str>) -> bool {
    if name.ends_with("_created") {
        return false;
    }
    if name.ends_with("_total") {
        return true;
    }
    // A histogram's parts are counters; a gauge named `_count` is not.
    matches!(meta_kind, Some("histogram") | Some("counter"))
        && (name.ends_with("_bucket") || name.ends_with("_count") || name.ends_with("_sum"))
}

/// One series the tracker follows: canonical name plus labels sorted by
/// `(name, value)`, as identity.
#[derive(Debug, Clone)]
struct Tracked {
    name: String,
    labels: Vec<(String, String)>,
    last: f64,
    /// `_created` of the parent series at the last scrape that had one.
    created: Option<f64>,
    increase: f64,
}

/// A parent series' `_created` in the scrape being pushed.
#[derive(Debug, Clone)]
struct Parent {
    name: String,
    labels: Vec<(String, String)>,
    created: f64,
    /// Which push set `created` (older values are stale).
    push: u64,
}

/// A hash of a series identity (canonical name, then the labels in sorted order), eight
/// bytes at a time (FxHash's mixing; each string ends with its length).
fn identity_hash<'a>(canon: &str, labels: impl Iterator<Item = &'a (String, String)>) -> u64 {
    let mut h: u64 = 0;
    let mut eat = |bytes: &[u8]| {
        let mut mix = |w: u64| h = (h.rotate_left(5) ^ w).wrapping_mul(0x517c_c1b7_2722_0a95);
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            mix(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let mut tail = [0u8; 8];
        tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
        mix(u64::from_le_bytes(tail));
        mix(bytes.len() as u64);
    };
    eat(canon.as_bytes());
    for (k, v) in labels {
        eat(k.as_bytes());
        eat(v.as_bytes());
    }
    h
}

/// No index (in [`Resolved`]).
const NONE: usize = usize::MAX;

/// What one sample position of the last push resolved to, reused when the next scrape
/// has the same sample (name and labels as written) at that position.
#[derive(Debug, Clone, Copy)]
struct Resolved {
    /// For a `_created` sample: its parent.
    parent: usize,
    /// For a monotonic sample: its series, and the parent whose `_created` it follows.
    series: usize,
    series_parent: usize,
}

/// `order` = indexes of `labels` (minus `le` when `skip_le`) sorted by `(name, value)`.
fn sorted_order(labels: &[(String, String)], skip_le: bool, order: &mut Vec<usize>) {
    order.clear();
    order.extend((0..labels.len()).filter(|i| !(skip_le && labels[*i].0 == "le")));
    order.sort_by(|a, b| labels[*a].cmp(&labels[*b]));
}

fn same_labels(have: &[(String, String)], labels: &[(String, String)], order: &[usize]) -> bool {
    have.len() == order.len() && order.iter().zip(have).all(|(i, h)| labels[*i] == *h)
}

/// Accumulates counter increases across a sequence of scrapes of one
/// target, handling resets (a value drop, or a changed `_created`).
///
/// Series are found by a hash of their identity (canonical name and sorted
/// labels) computed without building the identity, so a push allocates only
/// for series it has not seen before; [`Self::increase`] looks series up by
/// name. Increases of several matching series are summed in first-seen order.
#[derive(Debug, Clone, Default)]
pub struct CounterTracker {
    series: Vec<Tracked>,
    by_hash: HashMap<u64, Vec<usize>>,
    by_name: HashMap<String, Vec<usize>>,
    parents: Vec<Parent>,
    parents_by_hash: HashMap<u64, Vec<usize>>,
    pushes: u64,
    resets: usize,
    /// Per sample position of the last push, and a spare buffer for the next one.
    layout: Vec<Resolved>,
    spare: Vec<Resolved>,
    // Scratch, reused across pushes.
    canon: String,
    order: Vec<usize>,
}

impl CounterTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// A tracker fed `scrapes` in order. Where a scrape repeats its predecessor's
    /// samples (the same names and labels at the same positions, as successive scrapes
    /// of one server do), a sample is matched to its series by position rather than by
    /// hashing its identity; the result is what [`Self::push`] of each gives.
    pub fn from_scrapes<'a>(scrapes: impl IntoIterator<Item = &'a Scrape>) -> Self {
        let mut t = Self::new();
        let mut prev: Option<&Scrape> = None;
        for s in scrapes {
            t.push_after(prev, s);
            prev = Some(s);
        }
        t
    }

    /// Feed the next scrape.
    pub fn push(&mut self, scrape: &Scrape) {
        self.push_after(None, scrape);
    }

    /// `prev`, when given, is the scrape pushed just before this one (its layout is
    /// `self.layout`).
    fn push_after(&mut self, prev: Option<&Scrape>, scrape: &Scrape) {
        // Positions can be reused only under the same metadata (it decides which
        // samples are monotonic).
        let prev = prev.filter(|p| p.meta == scrape.meta && self.layout.len() == p.samples.len());
        let same = |i: usize, s: &Sample| {
            prev.is_some_and(|p| {
                p.samples
                    .get(i)
                    .is_some_and(|q| q.name == s.name && q.labels == s.labels)
            })
        };
        let old_layout = std::mem::take(&mut self.layout);
        let mut layout = std::mem::take(&mut self.spare);
        layout.clear();
        layout.resize(
            scrape.samples.len(),
            Resolved {
                parent: NONE,
                series: NONE,
                series_parent: NONE,
            },
        );
        self.pushes += 1;
        let push_no = self.pushes;
        let mut canon = std::mem::take(&mut self.canon);
        let mut order = std::mem::take(&mut self.order);
        // `_created` per parent series, to spot restarts that happened to
        // leave the counter higher than before (the last one seen wins).
        for (i, s) in scrape.samples.iter().enumerate() {
            if same(i, s) {
                let p = old_layout[i].parent;
                layout[i].parent = p;
                if p != NONE {
                    self.parents[p].created = s.value;
                    self.parents[p].push = push_no;
                }
                continue;
            }
            canonical_into(&s.name, &mut canon);
            let Some(base) = canon.strip_suffix("_created") else {
                continue;
            };
            sorted_order(&s.labels, false, &mut order);
            let h = identity_hash(base, order.iter().map(|i| &s.labels[*i]));
            let slot = self.parents_by_hash.entry(h).or_default();
            let found = slot.iter().copied().find(|p| {
                let p = &self.parents[*p];
                p.name == base && same_labels(&p.labels, &s.labels, &order)
            });
            let idx = found.unwrap_or_else(|| {
                self.parents.push(Parent {
                    name: base.to_string(),
                    labels: order.iter().map(|i| s.labels[*i].clone()).collect(),
                    created: 0.0,
                    push: 0,
                });
                slot.push(self.parents.len() - 1);
                self.parents.len() - 1
            });
            self.parents[idx].created = s.value;
            self.parents[idx].push = push_no;
            layout[i].parent = idx;
        }
        for (i, s) in scrape.samples.iter().enumerate() {
            if same(i, s) {
                let Resolved {
                    series,
                    series_parent,
                    ..
                } = old_layout[i];
                if series == NONE {
                    continue; // not monotonic
                }
                let p = if series_parent != NONE && self.parents[series_parent].push == push_no {
                    series_parent
                } else {
                    // The parent's `_created` may be elsewhere in the scrape, and new.
                    canonical_into(&s.name, &mut canon);
                    let (base, _) = split_suffix(&canon);
                    self.find_parent(base, s, push_no, &mut order)
                };
                layout[i].series = series;
                layout[i].series_parent = p;
                let created = (p != NONE).then(|| self.parents[p].created);
                self.advance(series, s.value, created);
                continue;
            }
            canonical_into(&s.name, &mut canon);
            let (base, _) = split_suffix(&canon);
            let kind = scrape.meta.get(base).and_then(|m| m.kind.as_deref());
            if !is_monotonic(&canon, kind) {
                continue;
            }
            // The parent's `_created`, if this scrape has one.
            let p = self.find_parent(base, s, push_no, &mut order);
            layout[i].series_parent = p;
            let created = (p != NONE).then(|| self.parents[p].created);
            // The series itself.
            sorted_order(&s.labels, false, &mut order);
            let h = identity_hash(&canon, order.iter().map(|i| &s.labels[*i]));
            let slot = self.by_hash.entry(h).or_default();
            let found = slot.iter().copied().find(|t| {
                let t = &self.series[*t];
                t.name == canon && same_labels(&t.labels, &s.labels, &order)
            });
            let Some(idx) = found else {
                // First sight: no baseline yet.
                let idx = self.series.len();
                slot.push(idx);
                layout[i].series = idx;
                match self.by_name.get_mut(canon.as_str()) {
                    Some(v) => v.push(idx),
                    None => {
                        self.by_name.insert(canon.clone(), vec![idx]);
                    }
                }
                self.series.push(Tracked {
                    name: canon.clone(),
                    labels: order.iter().map(|i| s.labels[*i].clone()).collect(),
                    last: s.value,
                    created,
                    increase: 0.0,
                });
                continue;
            };
            layout[i].series = idx;
            self.advance(idx, s.value, created);
        }
        self.canon = canon;
        self.order = order;
        self.layout = layout;
        self.spare = old_layout;
    }

    /// The parent series (`base` and `s`'s labels but `le`) whose `_created` this push
    /// has seen, or [`NONE`].
    fn find_parent(&self, base: &str, s: &Sample, push_no: u64, order: &mut Vec<usize>) -> usize {
        sorted_order(&s.labels, true, order);
        let ph = identity_hash(base, order.iter().map(|i| &s.labels[*i]));
        self.parents_by_hash
            .get(&ph)
            .and_then(|slot| {
                slot.iter().copied().find(|p| {
                    let p = &self.parents[*p];
                    p.push == push_no && p.name == base && same_labels(&p.labels, &s.labels, order)
                })
            })
            .unwrap_or(NONE)
    }

    /// A seen series' next reading, `created` its parent's `_created` in this scrape.
    fn advance(&mut self, idx: usize, value: f64, created: Option<f64>) {
        let t = &mut self.series[idx];
        let restarted = match (created, t.created) {
            (Some(now), Some(before)) => now != before,
            _ => false,
        };
        if created.is_some() {
            t.created = created;
        }
        let delta = if restarted || value < t.last {
            self.resets += 1;
            value
        } else {
            value - t.last
        };
        if !delta.is_nan() {
            t.increase += delta;
        }
        t.last = value;
    }

    /// Increase of the series `name` whose labels include `want`, summed
    /// over all matching series (e.g. every engine); 0 if unseen.
    pub fn increase(&self, name: &str, want: &[(&str, &str)]) -> f64 {
        let mut total = 0.0;
        for cand in candidate_names(name) {
            let Some(idx) = self.by_name.get(&cand) else {
                continue;
            };
            for t in idx.iter().map(|i| &self.series[*i]) {
                if want
                    .iter()
                    .all(|(k, v)| t.labels.iter().any(|(lk, lv)| lk == k && lv == v))
                {
                    total += t.increase;
                }
            }
        }
        total
    }

    /// Number of resets seen so far.
    pub fn resets(&self) -> usize {
        self.resets
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parser::{canonical_name, parse};

    /// The tracker as it was first written (clone-and-hash every key), kept as the
    /// reference the indexed one must agree with.
    #[derive(Default)]
    struct ReferenceTracker {
        last: HashMap<(String, Vec<(String, String)>), f64>,
        created: HashMap<(String, Vec<(String, String)>), f64>,
        increase: HashMap<(String, Vec<(String, String)>), f64>,
        resets: usize,
    }

    impl ReferenceTracker {
        fn push(&mut self, scrape: &Scrape) {
            let key = |s: &Sample| {
                let mut labels = s.labels.clone();
                labels.sort();
                (canonical_name(&s.name), labels)
            };
            let mut created_now = HashMap::new();
            for s in &scrape.samples {
                let canon = canonical_name(&s.name);
                if let Some(base) = canon.strip_suffix("_created") {
                    let mut labels = s.labels.clone();
                    labels.sort();
                    created_now.insert((base.to_string(), labels), s.value);
                }
            }
            for s in &scrape.samples {
                let canon = canonical_name(&s.name);
                let (base, _) = split_suffix(&canon);
                let kind = scrape.meta.get(base).and_then(|m| m.kind.as_deref());
                if !is_monotonic(&canon, kind) {
                    continue;
                }
                let k = key(s);
                let mut parent: Vec<(String, String)> = s
                    .labels
                    .iter()
                    .filter(|(k, _)| k != "le")
                    .cloned()
                    .collect();
                parent.sort();
                let created = created_now.get(&(base.to_string(), parent)).copied();
                let restarted = match (created, self.created.get(&k)) {
                    (Some(now), Some(before)) => now != *before,
                    _ => false,
                };
                if let Some(c) = created {
                    self.created.insert(k.clone(), c);
                }
                let delta = match self.last.get(&k) {
                    None => 0.0,
                    Some(prev) if restarted || s.value < *prev => {
                        self.resets += 1;
                        s.value
                    }
                    Some(prev) => s.value - prev,
                };
                if !delta.is_nan() {
                    *self.increase.entry(k.clone()).or_insert(0.0) += delta;
                }
                self.last.insert(k, s.value);
            }
        }

        fn increase(&self, name: &str, want: &[(&str, &str)]) -> f64 {
            let cands = candidate_names(name);
            self.increase
                .iter()
                .filter(|((n, labels), _)| {
                    cands.contains(n)
                        && want
                            .iter()
                            .all(|(k, v)| labels.iter().any(|(lk, lv)| lk == k && lv == v))
                })
                .map(|(_, v)| *v)
                .sum()
        }
    }

    #[test]
    fn indexed_tracker_agrees_with_the_reference() {
        // A small LCG: deterministic, no dependency.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        let mut totals = [0u64; 8];
        let mut created = [1000u64; 2];
        let (mut tracker, mut reference) = (CounterTracker::new(), ReferenceTracker::default());
        let mut all: Vec<Scrape> = Vec::new();
        let mut reused = 0;
        let mut saw_reset = false;
        for round in 0..60 {
            let mut lines = vec![
                "# TYPE vllm:h histogram".to_string(),
                "# TYPE vllm:g gauge".to_string(),
            ];
            for (e, t) in totals.iter_mut().enumerate() {
                *t = if rnd(12) == 0 { rnd(5) } else { *t + rnd(50) };
                let _ = e;
            }
            if rnd(10) == 0 {
                created[rnd(2) as usize] += 1;
            }
            for e in 0..2usize {
                let (a, b) = (totals[e], totals[e + 2]);
                // Label order and name spelling vary from scrape to scrape.
                let labels = if rnd(2) == 0 {
                    format!("engine=\"{e}\",model_name=\"m\"")
                } else {
                    format!("model_name=\"m\",engine=\"{e}\"")
                };
                let sep = if rnd(2) == 0 { ':' } else { '_' };
                lines.push(format!("vllm{sep}prompt_tokens_total{{{labels}}} {a}"));
                lines.push(format!(
                    "vllm:prompt_tokens_created{{{labels}}} {}",
                    created[e]
                ));
                lines.push(format!(
                    "vllm:gpu_prefix_cache_queries_total{{{labels}}} {b}"
                ));
                lines.push(format!(
                    "vllm:prefix_cache_queries_total{{{labels}}} {}",
                    b / 2
                ));
                lines.push(format!("vllm:g{{{labels}}} {a}"));
                let (c1, c2) = (
                    totals[e + 4].min(totals[e + 6]),
                    totals[e + 4].max(totals[e + 6]),
                );
                for (le, c) in [("0.5", c1), ("+Inf", c2)] {
                    lines.push(format!("vllm{sep}h_bucket{{le=\"{le}\",{labels}}} {c}"));
                }
                lines.push(format!("vllm:h_count{{{labels}}} {c2}"));
                lines.push(format!("vllm:h_sum{{{labels}}} {}.25", c2 * 3));
                lines.push(format!("vllm:h_created{{{labels}}} {}", created[e]));
            }
            if round % 7 == 3 {
                lines.push("vllm:h_sum{engine=\"0\",model_name=\"m\"} NaN".into());
            }
            // Sometimes the same layout as the scrape before (positions reused), sometimes
            // not (label order, spelling, an extra sample).
            let scrape = parse(&lines.join("\n")).expect("parses");
            tracker.push(&scrape);
            reference.push(&scrape);
            if all.last().is_some_and(|p| {
                p.samples.len() == scrape.samples.len()
                    && p.samples
                        .iter()
                        .zip(&scrape.samples)
                        .any(|(a, b)| a.name == b.name && a.labels == b.labels)
            }) {
                reused += 1;
            }
            all.push(scrape);
            let replayed = CounterTracker::from_scrapes(&all);
            saw_reset |= reference.resets > 0;
            assert_eq!(tracker.resets(), reference.resets, "round {round}");
            for (name, want) in [
                ("vllm:prompt_tokens_total", vec![]),
                ("vllm_prompt_tokens_total", vec![("engine", "1")]),
                ("vllm:prefix_cache_queries_total", vec![]),
                ("vllm:gpu_prefix_cache_queries_total", vec![("engine", "0")]),
                ("vllm:h_bucket", vec![("le", "0.5")]),
                ("vllm:h_bucket", vec![("le", "+Inf"), ("engine", "1")]),
                ("vllm:h_count", vec![]),
                ("vllm:h_sum", vec![("engine", "0")]),
                ("vllm:g", vec![]),
                ("vllm:absent_total", vec![]),
            ] {
                assert_eq!(
                    tracker.increase(name, &want),
                    reference.increase(name, &want),
                    "round {round}: {name} {want:?}"
                );
                assert_eq!(
                    replayed.increase(name, &want),
                    reference.increase(name, &want),
                    "round {round}, from_scrapes: {name} {want:?}"
                );
            }
            assert_eq!(replayed.resets(), reference.resets, "round {round}");
        }
        assert!(saw_reset);
        assert!(reused > 10, "{reused}");
        assert!(tracker.increase("vllm:prompt_tokens_total", &[]) > 0.0);
    }

    #[test]
    fn increases_handle_resets() {
        assert_eq!(counter_increase(&[1.0, 5.0, 2.0, 4.0]), 4.0 + 2.0 + 2.0);
        let mut t = CounterTracker::new();
        for v in [10.0, 15.0, 3.0] {
            t.push(&parse(&format!("vllm:prompt_tokens_total{{engine=\"0\"}} {v}")).expect("ok"));
        }
        assert_eq!(t.increase("vllm_prompt_tokens_total", &[]), 5.0 + 3.0);
        assert_eq!(t.resets(), 1);
    }

    /// Everything a tracker has accumulated (series, parents, resets), to compare two.
    fn tracker_state(t: &CounterTracker) -> String {
        format!("{:?}\n{:?}\n{}", t.series, t.parents, t.resets)
    }

    #[test]
    fn from_scrapes_equals_pushing_each_scrape() {
        let head = "# TYPE vllm:h histogram\n# TYPE vllm:g gauge\n# TYPE vllm:c counter\n";
        let counter_head = head.replace("vllm:g gauge", "vllm:g counter");
        let block = |e: u32, a: f64, created: f64, h: f64| {
            format!(
                "vllm:a_total{{engine=\"{e}\",model_name=\"m\"}} {a}\n\
                 vllm:a_created{{engine=\"{e}\",model_name=\"m\"}} {created}\n\
                 vllm:g{{engine=\"{e}\"}} {a}\n\
                 vllm:h_bucket{{engine=\"{e}\",le=\"1\"}} {h}\n\
                 vllm:h_bucket{{engine=\"{e}\",le=\"+Inf\"}} {}\n\
                 vllm:h_count{{engine=\"{e}\"}} {}\n\
                 vllm:h_sum{{engine=\"{e}\"}} {}\n\
                 vllm:h_created{{engine=\"{e}\"}} {created}\n",
                h + 1.0,
                h + 1.0,
                h * 2.0
            )
        };
        let texts = [
            // 0, 1: the same layout twice (positions reused), counters rising.
            format!("{head}{}", block(0, 10.0, 100.0, 3.0)),
            format!("{head}{}", block(0, 15.0, 100.0, 4.0)),
            // 2: a counter reset (a drop), same layout.
            format!("{head}{}", block(0, 2.0, 100.0, 5.0)),
            // 3: a restart that left the counters higher: only `_created` changed.
            format!("{head}{}", block(0, 20.0, 200.0, 9.0)),
            // 4: a new engine's series appear first, shifting every position.
            format!("{head}{}{}", block(1, 1.0, 300.0, 1.0), block(0, 25.0, 200.0, 9.0)),
            // 5: the same layout as 4.
            format!("{head}{}{}", block(1, 4.0, 300.0, 2.0), block(0, 30.0, 200.0, 12.0)),
            // 6: a new series appended at the end, and a NaN.
            format!(
                "{head}{}{}vllm:c_total{{engine=\"0\"}} 7\nvllm:h_sum{{engine=\"0\"}} NaN\n",
                block(1, 6.0, 300.0, 2.0),
                block(0, 33.0, 200.0, 13.0)
            ),
            // 7: as 6 but with engine 1's `_created` samples gone (a parent missing), in
            // place of which its gauge is repeated.
            format!(
                "{head}{}{}vllm:c_total{{engine=\"0\"}} 9\nvllm:h_sum{{engine=\"0\"}} NaN\n",
                block(1, 8.0, 300.0, 3.0)
                    .replace("vllm:a_created{engine=\"1\",model_name=\"m\"} 300", "vllm:g{engine=\"1\"} 1")
                    .replace("vllm:h_created{engine=\"1\"} 300", "vllm:g{engine=\"1\"} 2"),
                block(0, 35.0, 200.0, 14.0)
            ),
            // 8: `_created` back with a new value (a restart, counters higher).
            format!(
                "{head}{}{}vllm:c_total{{engine=\"0\"}} 9\nvllm:h_sum{{engine=\"0\"}} NaN\n",
                block(1, 9.0, 400.0, 4.0),
                block(0, 36.0, 200.0, 15.0)
            ),
            // 9: `vllm:g` exposed as `vllm:g_count` while typed a gauge (not monotonic),
            // then 10, 11: the same samples typed a counter (monotonic): what is tracked
            // changes under the same layout.
            format!(
                "{head}{}{}vllm:c_total{{engine=\"0\"}} 9\nvllm:h_sum{{engine=\"0\"}} NaN\n",
                block(1, 9.0, 400.0, 4.0).replace("vllm:g{", "vllm:g_count{"),
                block(0, 36.0, 200.0, 15.0).replace("vllm:g{", "vllm:g_count{")
            ),
            format!(
                "{counter_head}{}{}vllm:c_total{{engine=\"0\"}} 9\nvllm:h_sum{{engine=\"0\"}} NaN\n",
                block(1, 10.0, 400.0, 4.0).replace("vllm:g{", "vllm:g_count{"),
                block(0, 37.0, 200.0, 15.0).replace("vllm:g{", "vllm:g_count{")
            ),
            format!(
                "{counter_head}{}{}vllm:c_total{{engine=\"0\"}} 9\nvllm:h_sum{{engine=\"0\"}} NaN\n",
                block(1, 12.0, 400.0, 4.0).replace("vllm:g{", "vllm:g_count{"),
                block(0, 30.0, 200.0, 16.0).replace("vllm:g{", "vllm:g_count{")
            ),
            // 12: labels written in another order and the other name spelling at the
            // same positions (the same series), plus a duplicate sample.
            format!(
                "{head}{}{}vllm_c_total{{engine=\"0\"}} 11\nvllm:c_total{{engine=\"0\"}} 12\n",
                block(1, 13.0, 400.0, 5.0)
                    .replace("engine=\"1\",model_name=\"m\"", "model_name=\"m\",engine=\"1\""),
                block(0, 40.0, 200.0, 17.0).replace("vllm:a_total", "vllm_a_total")
            ),
            format!(
                "{head}{}{}vllm_c_total{{engine=\"0\"}} 13\nvllm:c_total{{engine=\"0\"}} 14\n",
                block(1, 14.0, 400.0, 5.0)
                    .replace("engine=\"1\",model_name=\"m\"", "model_name=\"m\",engine=\"1\""),
                block(0, 41.0, 200.0, 18.0).replace("vllm:a_total", "vllm_a_total")
            ),
            // 14, 15: engine 1 gone (positions shift back), then a restart.
            format!("{head}{}", block(0, 50.0, 200.0, 19.0)),
            format!("{head}{}", block(0, 60.0, 500.0, 20.0)),
        ];
        let scrapes: Vec<Scrape> = texts.iter().map(|t| parse(t).expect("parses")).collect();
        let mut pushed = CounterTracker::new();
        let mut saw_reset = false;
        for k in 0..scrapes.len() {
            pushed.push(&scrapes[k]);
            let replayed = CounterTracker::from_scrapes(&scrapes[..=k]);
            assert_eq!(
                tracker_state(&replayed),
                tracker_state(&pushed),
                "after scrape {k}"
            );
            saw_reset |= pushed.resets() > 0;
            for name in [
                "vllm:a_total",
                "vllm:h_bucket",
                "vllm:h_count",
                "vllm:h_sum",
                "vllm:c_total",
                "vllm:g_count",
            ] {
                for want in [
                    vec![],
                    vec![("engine", "0")],
                    vec![("engine", "1")],
                    vec![("le", "1")],
                ] {
                    assert_eq!(
                        replayed.increase(name, &want).to_bits(),
                        pushed.increase(name, &want).to_bits(),
                        "after scrape {k}: {name} {want:?}"
                    );
                }
            }
        }
        assert!(saw_reset);
        // Not vacuous: some scrapes repeat their predecessor's layout (positions reused),
        // and the restarts that only `_created` shows were counted.
        let same_layout = |a: &Scrape, b: &Scrape| {
            a.meta == b.meta
                && a.samples.len() == b.samples.len()
                && a.samples
                    .iter()
                    .zip(&b.samples)
                    .all(|(x, y)| x.name == y.name && x.labels == y.labels)
        };
        let repeats: Vec<usize> = (1..scrapes.len())
            .filter(|k| same_layout(&scrapes[k - 1], &scrapes[*k]))
            .collect();
        assert_eq!(repeats, [1, 2, 3, 5, 11, 13, 15], "{repeats:?}");
        let resets_by_push = |n: usize| {
            let mut t = CounterTracker::new();
            scrapes[..n].iter().for_each(|s| t.push(s));
            t.resets()
        };
        assert!(
            resets_by_push(4) > resets_by_push(3),
            "the `_created` restart"
        );
        assert!(
            resets_by_push(9) > resets_by_push(8),
            "the `_created` back, changed"
        );
    }
}
