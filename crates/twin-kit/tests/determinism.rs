//! Same options → same bytes, in memory and on disk; different options → different kit.

mod common;

use common::{kit_dir, option_sets};
use twin_kit::{render_kit, KitOptions};

#[test]
fn same_options_same_bytes() {
    for (name, opts) in option_sets() {
        let a = render_kit(&opts).unwrap_or_else(|e| panic!("{e}"));
        let b = render_kit(&opts.clone()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(a, b, "[{name}] render_kit is not deterministic");
        let (d1, w1) = kit_dir(&opts);
        let (d2, w2) = kit_dir(&opts);
        assert_eq!(w1.len(), a.len());
        for ((p1, p2), f) in w1.iter().zip(&w2).zip(&a) {
            let b1 = std::fs::read(p1).unwrap_or_else(|e| panic!("{e}"));
            let b2 = std::fs::read(p2).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(b1, b2, "[{name}] {} differs between runs", f.path);
            assert_eq!(
                b1,
                f.contents.as_bytes(),
                "[{name}] {} on disk differs from render_kit",
                f.path
            );
            assert_eq!(
                p1.strip_prefix(d1.path()).ok(),
                p2.strip_prefix(d2.path()).ok()
            );
        }
    }
}

#[test]
fn options_change_the_output() {
    let base = render_kit(&KitOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let other = render_kit(&KitOptions {
        kv_warning: 0.8,
        ..Default::default()
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert_ne!(base, other);
}

#[test]
fn invalid_options_are_errors_not_panics() {
    let bad = KitOptions {
        ttft_slo_s: 0.3,
        ..Default::default()
    };
    let err = render_kit(&bad)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("ttft_slo_s"), "{err}");
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    // A file where a directory must go: an Io error, not a panic.
    std::fs::write(dir.path().join("grafana"), "x").unwrap_or_else(|e| panic!("{e}"));
    let res = twin_kit::write_kit(&KitOptions::default(), dir.path());
    assert!(matches!(res, Err(twin_kit::KitError::Io { .. })), "{res:?}");
}
