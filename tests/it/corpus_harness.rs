//! The corpus harness (`tests/common/corpus.rs`) on directories written here: it pairs each
//! sample with its expectation and fails on a sample without one, an expectation without its
//! sample, a sample whose source is not named, and a kind whose directory is missing. And the
//! repository itself: it holds no copy of a sample of `../shared/corpus`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::common::corpus::{corpus_under, root, Corpus};

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

/// A kind renamed away (or a root that is not there) fails in one line that names the
/// directory the harness looked for; nothing is skipped.
#[test]
fn a_missing_kind_fails_naming_its_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("present")).unwrap();
    let _ = corpus_under(dir.path(), "present");
    let wanted = dir.path().join("renamed-away");
    let message = std::panic::catch_unwind(|| corpus_under(dir.path(), "renamed-away"))
        .err()
        .and_then(|panic| panic.downcast_ref::<String>().cloned())
        .expect("a missing kind fails");
    assert!(
        message.starts_with(&format!("{}: no such directory", wanted.display())),
        "{message}"
    );
    assert!(!message.contains('\n'), "{message}");
}

/// The samples are third-party text: they live in `../shared/corpus` and the repository keeps
/// only its expectations. No tracked file has the bytes of a file there.
#[test]
fn the_repository_holds_no_copy_of_a_corpus_file() {
    let project = Path::new(env!("CARGO_MANIFEST_DIR"));
    let shared = root();
    assert!(
        shared.is_dir(),
        "{}: no such directory (the corpus beside the project)",
        shared.display()
    );
    let mut by_size: HashMap<u64, Vec<PathBuf>> = HashMap::new();
    for file in files_under(&shared) {
        let size = std::fs::metadata(&file).unwrap().len();
        by_size.entry(size).or_default().push(file);
    }
    assert!(by_size.len() > 20, "{}: too few files", shared.display());
    let listed = std::process::Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(project)
        .output();
    let tracked = match listed {
        Ok(out) if out.status.success() => out.stdout,
        _ => {
            crate::common::skip_or_fail("git ls-files: not a git checkout or no git");
            return;
        }
    };
    let mut copies = Vec::new();
    for name in tracked.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let path = project.join(String::from_utf8_lossy(name).as_ref());
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue; // deleted in the work tree
        };
        let Some(candidates) = by_size.get(&meta.len()).filter(|_| meta.is_file()) else {
            continue;
        };
        let bytes = std::fs::read(&path).unwrap();
        for sample in candidates {
            if std::fs::read(sample).unwrap() == bytes {
                copies.push(format!("{} = {}", path.display(), sample.display()));
            }
        }
    }
    assert!(copies.is_empty(), "copies of corpus files: {copies:#?}");
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(files_under(&path));
        } else {
            files.push(path);
        }
    }
    files
}
