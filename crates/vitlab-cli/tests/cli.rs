//! End-to-end tests of the `vitlab` binary.

use std::process::{Command, Output};

fn vitlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vitlab")).args(args).output().expect("run vitlab")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

const PAPER_224: &[&str] = &["--preset", "paper", "--image-size", "224", "--patch-size", "16", "--num-classes", "10"];

#[test]
fn models_table_reads_the_papers_parameter_counts() {
    let out = vitlab(&[&["models"], PAPER_224].concat());
    assert!(out.status.success());
    let text = stdout(&out);
    let vit_params: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("vit "))
        .map(|l| l.split_whitespace().last().unwrap())
        .collect();
    assert_eq!(vit_params, ["5.67M", "22.26M", "88.16M", "307.47M", "637.40M"], "{text}");
    // Every variant x size is listed.
    assert_eq!(text.lines().filter(|l| l.contains("  tiny ")).count(), 4, "{text}");
}

#[test]
fn models_csv_and_json_give_exact_integers() {
    let csv = stdout(&vitlab(&[&["models", "--format", "csv"], PAPER_224].concat()));
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("block,size,depth,width,mlp,heads,params"));
    assert!(csv.contains("\nvit,tiny,12,192,768,3,5673034\n"), "{csv}");
    assert!(csv.contains("\nvit,large,24,1024,4096,16,307465226\n"), "{csv}");
    assert_eq!(lines.count(), 20);

    let json = stdout(&vitlab(&[&["models", "--format", "json"], PAPER_224].concat()));
    let rows: serde_json::Value = serde_json::from_str(&json).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 20);
    let small = rows.iter().find(|r| r["block"] == "vit" && r["size"] == "small").unwrap();
    assert_eq!(small["params"], 22257802);
    assert_eq!(small["heads"], 6);
}

#[test]
fn a_bad_image_size_exits_non_zero_with_a_clear_message() {
    let out = vitlab(&["models", "--image-size", "30", "--patch-size", "4"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("model.image_size") && err.contains("not divisible"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn an_unknown_preset_lists_the_choices() {
    let out = vitlab(&["models", "--preset", "fancy"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("default") && err.contains("paper"), "{err}");
}
