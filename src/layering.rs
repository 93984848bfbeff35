//! The module dependency rules, checked on the source text so that they stay true:
//!
//! - the domains (`node`, `switch`, `diag`, `ib`, `nccl`, `pods`, `probe`) never import the modules that compose or front them:
//!   `config`, `app`, `cli`, `server`, `web`, `sim`. A domain owns its config types
//!   and imports only leaves (`yaml`, `exposition`, `collector`, `direction`) and other domains
//!   (its unit tests may use the simulator's fixtures);
//! - the exposition (`exposition`: families, the text writer, bodies and their gzip) is the
//!   bottom layer every body goes through: it imports no domain, no collector framework and
//!   nothing that fronts it (`web`, `server`);
//! - nothing but `src/main.rs` imports `cli`: not the library, the tests, the benches or the
//!   fuzz targets.
//!
//! A path to a module is `crate::m`, `crate::{m, ...}`, `super::...::m` climbing to the crate
//! root, or `rdma_fabric_exporter::m` outside the library. Comments count too, as they do for
//! `grep`.

use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

const DOMAINS: &[&str] = &["node", "switch", "diag", "ib", "nccl", "pods", "probe"];

/// What the domains never import.
const OUTER: &[&str] = &["app", "cli", "config", "server", "sim", "web"];

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return files;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        // Symlinks are not followed: fixture trees mirror sysfs, loops included.
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            if path
                .file_name()
                .is_some_and(|n| n == "target" || n == "fixtures")
            {
                continue;
            }
            files.extend(rust_files(&path));
        } else if kind.is_file() && path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

fn identifier(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// The first segment of each path after `prefix::` in `text`: `m` of `prefix::m::x`, and `a`,
/// `b` of `prefix::{a::x, b}`.
fn modules_after(text: &str, prefix: &str) -> Vec<String> {
    let mut found = Vec::new();
    let needle = format!("{prefix}::");
    for (at, _) in text.match_indices(&needle) {
        // `xcrate::` or `a::crate::` is not the crate root.
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let rest = text[at + needle.len()..].trim_start();
        match rest.strip_prefix('{') {
            Some(group) => {
                let mut depth = 0;
                let mut item_start = true;
                for (i, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => item_start = true,
                        c if c.is_whitespace() => {}
                        _ if item_start => {
                            found.push(identifier(&group[i..]).to_string());
                            item_start = false;
                        }
                        _ => {}
                    }
                }
            }
            None => found.push(identifier(rest).to_string()),
        }
    }
    found
}

/// Modules of the crate root that `file` (under `src/`) names through `super::` chains: as
/// many `super`s as the file is deep. Inside an inline module the same chain stops one level
/// lower, so a name that is also a module of the file's own domain is ambiguous and skipped.
fn root_modules_through_super(file: &Path, text: &str) -> Vec<String> {
    let relative = file.strip_prefix(Path::new(ROOT).join("src")).unwrap();
    let mut segments: Vec<String> = relative
        .iter()
        .map(|s| s.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if segments.last().is_some_and(|s| s == "mod") {
        segments.pop();
    }
    if segments.is_empty() || segments == ["lib"] || segments == ["main"] {
        return Vec::new();
    }
    let chain = vec!["super"; segments.len()].join("::");
    let own = Path::new(ROOT).join("src").join(&segments[0]);
    modules_after(text, &chain)
        .into_iter()
        .filter(|m| {
            segments.len() == 1 || !(own.join(format!("{m}.rs")).exists() || own.join(m).is_dir())
        })
        .collect()
}

/// A file's text without its unit tests (`#[cfg(test)] mod tests` closes a file by convention).
fn without_tests(text: &str) -> &str {
    text.find("\n#[cfg(test)]\nmod tests")
        .map_or(text, |end| &text[..end])
}

fn violations(files: &[PathBuf], forbidden: &[&str], prefixes: &[&str]) -> Vec<String> {
    violations_in(files, forbidden, prefixes, |text| text)
}

fn violations_in(
    files: &[PathBuf],
    forbidden: &[&str],
    prefixes: &[&str],
    part: fn(&str) -> &str,
) -> Vec<String> {
    let mut found = Vec::new();
    for file in files {
        let whole = std::fs::read_to_string(file).unwrap();
        let text = part(&whole);
        let mut named: Vec<String> = prefixes
            .iter()
            .flat_map(|p| modules_after(text, p))
            .collect();
        if file.starts_with(Path::new(ROOT).join("src")) {
            named.extend(root_modules_through_super(file, text));
        }
        for module in named {
            if forbidden.contains(&module.as_str()) {
                let shown = file.strip_prefix(ROOT).unwrap_or(file).display();
                found.push(format!("{shown} imports {module}"));
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

#[test]
fn the_domains_never_import_outer_modules() {
    let files: Vec<PathBuf> = DOMAINS
        .iter()
        .flat_map(|d| {
            let dir = Path::new(ROOT).join("src").join(d);
            let mut files = rust_files(&dir);
            files.push(dir.with_extension("rs"));
            files.retain(|f| f.exists());
            files
        })
        .collect();
    assert!(files.len() > 20, "found only {files:?}");
    // Their unit tests may build fixtures with the simulator.
    let found = violations_in(&files, OUTER, &["crate"], without_tests);
    assert!(
        found.is_empty(),
        "the domains import what composes them (move the type into the domain, or into a leaf such as yaml.rs):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_exposition_imports_nothing_above_it() {
    let dir = Path::new(ROOT).join("src/exposition");
    let files = rust_files(&dir);
    assert!(files.len() >= 4, "found only {files:?}");
    let above: Vec<&str> = OUTER
        .iter()
        .chain(DOMAINS)
        .chain(&["collector", "pods", "process_metrics"])
        .copied()
        .collect();
    let found = violations(&files, &above, &["crate"]);
    assert!(
        found.is_empty(),
        "the exposition imports a layer above it:\n{}",
        found.join("\n")
    );
}

#[test]
fn only_main_imports_cli() {
    let main = Path::new(ROOT).join("src/main.rs");
    let files: Vec<PathBuf> = ["src", "tests", "benches", "examples", "fuzz"]
        .iter()
        .flat_map(|d| rust_files(&Path::new(ROOT).join(d)))
        .filter(|f| *f != main && !f.ends_with("src/layering.rs"))
        .collect();
    let found = violations(&files, &["cli"], &["crate", "rdma_fabric_exporter"]);
    assert!(
        found.is_empty(),
        "only src/main.rs uses the command line:\n{}",
        found.join("\n")
    );
}

#[test]
fn paths_are_read_as_the_compiler_would() {
    let text = "use crate::{config::{self, Config}, node};\nuse crate::sim::demo;\nfoo::crate::x; mycrate::web;\n";
    assert_eq!(modules_after(text, "crate"), ["config", "node", "sim"]);
    let grouped = "use crate::{\n    cli::Cli,\n    yaml,\n};";
    assert_eq!(modules_after(grouped, "crate"), ["cli", "yaml"]);
    let nested = Path::new(ROOT).join("src/node/sysfs.rs");
    assert_eq!(
        root_modules_through_super(&nested, "use super::super::server;"),
        ["server"]
    );
    // `node::config` from a test module inside node/sysfs.rs: not the crate's config.
    assert!(root_modules_through_super(&nested, "use super::super::config;").is_empty());
    let top = Path::new(ROOT).join("src/app.rs");
    assert_eq!(root_modules_through_super(&top, "use super::cli;"), ["cli"]);
}
