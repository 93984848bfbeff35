//! The real samples the parsers are proven on, kept apart from what the project expects of them.
//!
//! The samples of one kind are the files of `<root>/<kind>/`, each named with its public source
//! in that directory's `SOURCES.md`. They are third-party text and not part of the repository:
//! the root is `../shared/corpus/`, beside the project as every checkout has it, unless
//! `RFE_CORPUS_DIR` names another (a relative path is taken from the project root). A missing
//! root or kind fails the test that reads it with one line naming the directory; nothing is
//! skipped. The expectations are the project's own: a
//! `tests/corpus-expected/<kind>/<sample>.expected` file per sample, or a row of the test's
//! table. Either way every sample has its expectation and every expectation its sample.
//!
//! Included by the integration tests (`tests/common`) and by the library's unit tests
//! (`src/lib.rs`), so it uses the standard library only.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The environment variable naming another root of the samples.
pub const ROOT_VAR: &str = "RFE_CORPUS_DIR";

/// The file of a sample directory that lists the samples' sources; not a sample.
pub const SOURCES: &str = "SOURCES.md";

fn project_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The root the samples are read from when `RFE_CORPUS_DIR` names none.
pub const DEFAULT_ROOT: &str = "../shared/corpus";

/// The root the samples are read from.
pub fn root() -> PathBuf {
    match std::env::var_os(ROOT_VAR) {
        Some(dir) if !dir.is_empty() => project_root().join(dir),
        _ => project_root().join(DEFAULT_ROOT),
    }
}

/// The samples of one kind and the project's expectations for them.
pub struct Corpus {
    kind: String,
    samples: PathBuf,
    expected: PathBuf,
}

/// The corpus of `kind`: samples under [`root`], expectations in `tests/corpus-expected/`.
/// Fails at once, naming the directory, when the kind's sample directory is not there.
#[track_caller]
pub fn corpus(kind: &str) -> Corpus {
    corpus_under(&root(), kind)
}

/// The corpus of `kind` with its samples under `root`.
#[track_caller]
pub fn corpus_under(root: &Path, kind: &str) -> Corpus {
    let samples = root.join(kind);
    assert!(
        samples.is_dir(),
        "{}: no such directory: the samples of corpus kind {kind:?} are read from there ({} beside the project, or {ROOT_VAR}=<root>)",
        samples.display(),
        DEFAULT_ROOT
    );
    Corpus::at(
        kind,
        samples,
        project_root().join("tests/corpus-expected").join(kind),
    )
}

impl Corpus {
    /// A corpus with its two directories given (the harness' own tests).
    pub fn at(kind: &str, samples: PathBuf, expected: PathBuf) -> Corpus {
        Corpus {
            kind: kind.to_string(),
            samples,
            expected,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.samples
    }

    /// One sample by file name, for a test about that file's particulars.
    #[track_caller]
    pub fn sample(&self, name: &str) -> PathBuf {
        let path = self.samples.join(name);
        assert!(
            path.is_file(),
            "{}: no sample {name:?} of kind {:?} (samples are read from {}; {ROOT_VAR} moves them)",
            path.display(),
            self.kind,
            self.samples.display()
        );
        path
    }

    /// The sample files, sorted by name. Each must be named in the directory's `SOURCES.md`:
    /// a sample without its source is refused.
    #[track_caller]
    pub fn samples(&self) -> Vec<PathBuf> {
        let entries = std::fs::read_dir(&self.samples).unwrap_or_else(|e| {
            panic!(
                "{}: the samples of kind {:?} cannot be listed: {e} ({ROOT_VAR} moves them)",
                self.samples.display(),
                self.kind
            )
        });
        let mut files: Vec<PathBuf> = entries
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.file_name().is_some_and(|n| n != SOURCES))
            .collect();
        files.sort();
        assert!(
            !files.is_empty(),
            "{}: no sample of kind {:?}",
            self.samples.display(),
            self.kind
        );
        let sources = std::fs::read_to_string(self.samples.join(SOURCES)).unwrap_or_default();
        for file in &files {
            let name = file_name(file);
            assert!(
                sources.contains(&format!("`{name}`")),
                "{}: sample {name:?} is not named (in backticks) in {SOURCES} with its source",
                self.samples.display()
            );
        }
        files
    }

    /// Each sample with the text of its expectation, `<expected dir>/<sample>.expected`.
    #[track_caller]
    pub fn with_expected_files(&self) -> Vec<(PathBuf, String)> {
        let listed: Vec<String> = match std::fs::read_dir(&self.expected) {
            Ok(entries) => entries
                .map(|entry| file_name(&entry.unwrap().path()))
                .filter_map(|name| name.strip_suffix(".expected").map(str::to_string))
                .collect(),
            Err(_) => Vec::new(),
        };
        let pairs = self.pair(&listed, |name| name.as_str());
        pairs
            .into_iter()
            .map(|(sample, name)| {
                let path = self.expected.join(format!("{name}.expected"));
                let text = std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                (sample, text)
            })
            .collect()
    }

    /// Each sample with its row of `table`, whose `key` is the sample's file name.
    #[track_caller]
    pub fn with_table<'t, E>(
        &self,
        table: &'t [E],
        key: impl Fn(&E) -> &str,
    ) -> Vec<(PathBuf, &'t E)> {
        self.pair(table, key)
    }

    /// Pairs the samples with `expectations` by file name: none unexpected (a sample without an
    /// expectation), none missing (an expectation without its sample), none twice.
    #[track_caller]
    fn pair<'t, E>(
        &self,
        expectations: &'t [E],
        key: impl Fn(&E) -> &str,
    ) -> Vec<(PathBuf, &'t E)> {
        let samples = self.samples();
        let names: Vec<String> = samples.iter().map(|p| file_name(p)).collect();
        let mut keys: Vec<&str> = expectations.iter().map(&key).collect();
        keys.sort_unstable();
        if let Some(twice) = keys.windows(2).find(|w| w[0] == w[1]) {
            panic!("kind {:?}: two expectations for {:?}", self.kind, twice[0]);
        }
        let unexpected: Vec<&String> = names
            .iter()
            .filter(|n| !keys.contains(&n.as_str()))
            .collect();
        let missing: Vec<&str> = keys
            .iter()
            .copied()
            .filter(|k| !names.iter().any(|n| n == k))
            .collect();
        assert!(
            unexpected.is_empty() && missing.is_empty(),
            "kind {:?}: samples without an expectation {unexpected:?} (in {}), expectations without their sample {missing:?}",
            self.kind,
            self.samples.display()
        );
        samples
            .into_iter()
            .zip(names)
            .map(|(sample, name)| {
                let expectation = expectations.iter().find(|e| key(e) == name).unwrap();
                (sample, expectation)
            })
            .collect()
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}
