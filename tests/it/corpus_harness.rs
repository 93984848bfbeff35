//! The corpus harness (`tests/common/corpus.rs`) on directories written here: it pairs each
//! sample with its expectation and fails on a sample without one, an expectation without its
//! sample, and a sample whose source is not named.

use std::path::Path;

use crate::common::corpus::Corpus;

/// A sample directory with `samples` (each named in `SOURCES.md` unless `unsourced`) and an
/// expectation directory with `expected`.
fn corpus(dir: &Path, samples: &[&str], unsourced: &[&str], expected: &[&str]) -> Corpus {
    let (sample_dir, expected_dir) = (dir.join("samples/kind"), dir.join("expected/kind"));
    std::fs::create_dir_all(&sample_dir).unwrap();
    std::fs::create_dir_all(&expected_dir).unwrap();
    let mut sources = String::from("| file | source |\n|---|---|\n");
    for name in samples.iter().chain(unsourced) {
        std::fs::write(sample_dir.join(name), format!("sample {name}\n")).unwrap();
    }
    for name in samples {
        sources += &format!("| `{name}` | a public thread |\n");
    }
    std::fs::write(sample_dir.join("SOURCES.md"), sources).unwrap();
    for name in expected {
        std::fs::write(
            expected_dir.join(format!("{name}.expected")),
            format!("expect {name}\n"),
        )
        .unwrap();
    }
    Corpus::at("kind", sample_dir, expected_dir)
}

#[test]
fn samples_pair_with_their_expectations_sorted() {
    let dir = tempfile::tempdir().unwrap();
    let kind = corpus(dir.path(), &["b.txt", "a.log"], &[], &["a.log", "b.txt"]);
    let pairs: Vec<(String, String)> = kind
        .with_expected_files()
        .into_iter()
        .map(|(path, text)| (path.file_name().unwrap().to_string_lossy().into(), text))
        .collect();
    assert_eq!(
        pairs,
        [
            ("a.log".to_string(), "expect a.log\n".to_string()),
            ("b.txt".to_string(), "expect b.txt\n".to_string())
        ]
    );
    let table = [("b.txt", 2), ("a.log", 1)];
    let rows: Vec<i32> = kind
        .with_table(&table, |row| row.0)
        .into_iter()
        .map(|(_, row)| row.1)
        .collect();
    assert_eq!(rows, [1, 2]);
}

#[test]
#[should_panic(expected = "samples without an expectation [\"c.txt\"]")]
fn a_sample_without_an_expectation_fails() {
    let dir = tempfile::tempdir().unwrap();
    corpus(dir.path(), &["a.txt", "c.txt"], &[], &["a.txt"]).with_expected_files();
}

#[test]
#[should_panic(expected = "expectations without their sample [\"gone.txt\"]")]
fn an_expectation_without_its_sample_fails() {
    let dir = tempfile::tempdir().unwrap();
    let kind = corpus(dir.path(), &["a.txt"], &[], &[]);
    kind.with_table(&["a.txt", "gone.txt"], |name| name);
}

#[test]
#[should_panic(expected = "is not named (in backticks) in SOURCES.md")]
fn a_sample_without_its_source_fails() {
    let dir = tempfile::tempdir().unwrap();
    corpus(
        dir.path(),
        &["a.txt"],
        &["copied.txt"],
        &["a.txt", "copied.txt"],
    )
    .samples();
}
