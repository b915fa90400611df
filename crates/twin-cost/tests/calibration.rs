//! Predictions vs the fully specified published points of calibration.md (section A).

use twin_cost::calibration::all_points;

#[test]
fn predictions_within_stated_tolerances() {
    let mut failures = Vec::new();
    for p in all_points() {
        let err = p.relative_error();
        println!(
            "{:<50} published {:>12.5e} predicted {:>12.5e} {:+6.1}%",
            p.name,
            p.published,
            p.predicted,
            err * 100.0
        );
        if err.abs() > p.tolerance {
            failures.push(format!(
                "{}: {:+.1}% (tolerance {:.0}%)",
                p.name,
                err * 100.0,
                p.tolerance * 100.0
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn fp8_kv_slope_is_about_half_of_bf16() {
    let pts = all_points();
    let ratio = pts
        .iter()
        .find(|p| p.name.contains("FP8/BF16 slope ratio"))
        .unwrap();
    assert!(
        (0.45..0.65).contains(&ratio.predicted),
        "{}",
        ratio.predicted
    );
}
