//! Prints predicted vs published numbers for the fully specified calibration points
//! (calibration.md A). `cargo run -p twin-cost --release --example calibration_table`.

use twin_cost::calibration::{all_points, Point};

fn main() {
    println!("| Point | Published | Predicted | Error |");
    println!("|---|---|---|---|");
    for Point {
        name,
        published,
        predicted,
        unit,
        ..
    } in all_points()
    {
        let err = (predicted - published) / published * 100.0;
        println!(
            "| {name} | {} {unit} | {} {unit} | {err:+.1}% |",
            sig(published),
            sig(predicted)
        );
    }
}

fn sig(v: f64) -> String {
    if v.abs() < 0.01 {
        format!("{v:.3e}")
    } else {
        format!("{v:.2}")
    }
}
