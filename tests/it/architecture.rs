//! ARCHITECTURE.md's code map stays true to `src/`: every `*.rs` file has exactly one row, under
//! the heading of its directory, and no row names a file that is gone (issue 59, item 7).
//!
//! The form the map keeps, so that a row gives the file's whole path: a heading `### src/DIR/`
//! (`### src/` for the top level) and below it a table whose rows start with
//! ``| `FILE.rs` |``. Any other heading ends the directory; a row under a `src/` heading that is
//! not of that form is itself a problem, so that a file cannot hide in a malformed row.

use std::collections::BTreeMap;
use std::path::Path;

use crate::common::project_root;

/// The rows of the code map as full paths (`src/node/sysfs.rs`), in order, with the problems of
/// rows that do not give one.
fn code_map(markdown: &str) -> (Vec<String>, Vec<String>) {
    let mut entries = Vec::new();
    let mut problems = Vec::new();
    let mut dir: Option<&str> = None;
    for (number, line) in markdown.lines().enumerate() {
        let line = line.trim_end();
        if line.starts_with('#') {
            dir = line
                .strip_prefix("### ")
                .filter(|heading| heading.starts_with("src/") && heading.ends_with('/'));
            continue;
        }
        let Some(dir) = dir else { continue };
        if !line.starts_with('|') || line.starts_with("| file |") || line.starts_with("|---") {
            continue;
        }
        let first_cell = line.split('|').nth(1).unwrap_or("").trim();
        let name = first_cell
            .strip_prefix('`')
            .and_then(|rest| rest.strip_suffix('`'))
            .filter(|name| name.ends_with(".rs") && !name.contains(['/', '`', ' ']));
        match name {
            Some(name) => entries.push(format!("{dir}{name}")),
            None => problems.push(format!(
                "line {}: a row under `### {dir}` must start with | `FILE.rs` |: {line}",
                number + 1
            )),
        }
    }
    (entries, problems)
}

/// Every `*.rs` file below `dir`, as a path relative to `root` with `/` separators, sorted.
fn rust_files(root: &Path, dir: &Path, files: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        if entry.file_type().unwrap().is_dir() {
            rust_files(root, &path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let relative = path.strip_prefix(root).unwrap();
            let parts: Vec<_> = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            files.push(parts.join("/"));
        }
    }
    files.sort();
}

/// What is wrong with a code map against the files that exist: files it misses, files it lists
/// more than once, rows for files that do not exist, and malformed rows.
fn problems(markdown: &str, files: &[String]) -> Vec<String> {
    let (entries, mut problems) = code_map(markdown);
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for entry in &entries {
        *counts.entry(entry.as_str()).or_default() += 1;
    }
    for file in files {
        match counts.get(file.as_str()) {
            None => problems.push(format!("{file} has no row")),
            Some(&n) if n > 1 => problems.push(format!("{file} has {n} rows")),
            Some(_) => {}
        }
    }
    for entry in counts.keys() {
        if !files.iter().any(|file| file == entry) {
            problems.push(format!("{entry} has a row but no file"));
        }
    }
    problems
}

#[test]
fn the_code_map_lists_every_source_file_once_under_its_directory() {
    let root = project_root();
    let markdown = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let mut files = Vec::new();
    rust_files(&root, &root.join("src"), &mut files);
    assert!(files.len() > 100, "{} files under src/", files.len());
    let problems = problems(&markdown, &files);
    assert!(
        problems.is_empty(),
        "ARCHITECTURE.md's code map is out of date:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_check_names_a_missing_a_doubled_a_gone_and_a_malformed_row() {
    let files: Vec<String> = ["src/lib.rs", "src/node/mod.rs", "src/node/sysfs.rs"]
        .map(String::from)
        .to_vec();
    let good = "## Code map\n\n### src/\n\n| file | holds |\n|---|---|\n| `lib.rs` | root |\n\n\
                ### src/node/\n\nIntro naming `other.rs`.\n\n| file | holds |\n|---|---|\n\
                | `mod.rs` | collector |\n| `sysfs.rs` | walk |\n\n## Outside `src/`\n\n\
                | `bench.rs` | not a source file |\n";
    assert_eq!(problems(good, &files), Vec::<String>::new());

    let missing = good.replace("| `sysfs.rs` | walk |\n", "");
    assert_eq!(problems(&missing, &files), ["src/node/sysfs.rs has no row"]);

    let doubled = good.replace(
        "| `lib.rs` | root |\n",
        "| `lib.rs` | root |\n| `lib.rs` | again |\n",
    );
    assert_eq!(problems(&doubled, &files), ["src/lib.rs has 2 rows"]);

    let gone = good.replace(
        "| `sysfs.rs` | walk |\n",
        "| `sysfs.rs` | walk |\n| `gone.rs` | old |\n",
    );
    assert_eq!(
        problems(&gone, &files),
        ["src/node/gone.rs has a row but no file"]
    );

    let wrong_dir = good.replace("### src/node/", "### src/nodes/");
    assert_eq!(
        problems(&wrong_dir, &files).len(),
        4,
        "{:?}",
        problems(&wrong_dir, &files)
    );

    let malformed = good.replace("| `sysfs.rs` | walk |", "| `sysfs.rs`, `parse.rs` | walk |");
    let found = problems(&malformed, &files);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].contains("must start with"), "{found:?}");
}
