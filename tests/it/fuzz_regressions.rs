//! Replays every saved input of `fuzz/regressions/<target>/` (crashes the fuzzers found, and
//! hand-picked hostile inputs) through the function its fuzz target calls, on the stable
//! toolchain, so that a fixed crash stays fixed without cargo-fuzz.

use std::path::{Path, PathBuf};

use rdma_fabric_exporter::fuzzing::TARGETS;

fn regressions() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions")
}

fn replay(target: &str) {
    let (_, run) = TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .unwrap_or_else(|| panic!("no fuzz target {target}"));
    let dir = regressions().join(target);
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    inputs.sort();
    assert!(!inputs.is_empty(), "{}: no saved inputs", dir.display());
    let failed: Vec<String> = inputs
        .iter()
        .filter(|input| {
            let data = std::fs::read(input).expect("a readable input");
            std::panic::catch_unwind(|| run(&data)).is_err()
        })
        .map(|input| input.display().to_string())
        .collect();
    assert!(failed.is_empty(), "inputs that fail {target}: {failed:#?}");
}

#[test]
fn sysfs_value() {
    replay("sysfs_value");
}

#[test]
fn config() {
    replay("config");
}

#[test]
fn nccl_log() {
    replay("nccl_log");
}

#[test]
fn ib_diags_text() {
    replay("ib_diags_text");
}

#[test]
fn ethtool_strings() {
    replay("ethtool_strings");
}

#[test]
fn ethtool_text() {
    replay("ethtool_text");
}

#[test]
fn snmp_values() {
    replay("snmp_values");
}

#[test]
fn gnmi_values() {
    replay("gnmi_values");
}

#[test]
fn gnmi_json() {
    replay("gnmi_json");
}

#[test]
fn rdma_netlink() {
    replay("rdma_netlink");
}

#[test]
fn probe_packet() {
    replay("probe_packet");
}

#[test]
fn transceiver_pages() {
    replay("transceiver_pages");
}

/// Each target has a test above and a directory; a directory of a renamed target would
/// otherwise replay nothing, silently.
#[test]
fn directories_and_targets_match() {
    let mut dirs: Vec<String> = std::fs::read_dir(regressions())
        .expect("fuzz/regressions")
        .map(|entry| entry.expect("a directory entry").file_name())
        .map(|name| name.to_string_lossy().into_owned())
        .collect();
    dirs.sort();
    let mut targets: Vec<&str> = TARGETS.iter().map(|(name, _)| *name).collect();
    targets.sort();
    assert_eq!(dirs, targets);
    let source = include_str!("fuzz_regressions.rs");
    for target in targets {
        assert!(
            source.contains(&format!("replay(\"{target}\")")),
            "no test replays {target}"
        );
    }
}

/// The fuzz workspace has its own lock file, and CI builds it `--locked`: a new dependency of
/// the main crate that is not in `fuzz/Cargo.lock` fails CI before any test runs (it did, three
/// times). This catches it in a plain `cargo test`, from the files alone: `cargo metadata
/// --offline` would need every package of the fuzz workspace, for every platform, already in
/// the cargo cache, which only a machine that once built the fuzz targets has (a fresh machine
/// failed here while CI stayed green).
#[test]
fn the_fuzz_lock_file_resolves_the_main_crates_dependencies() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |path: &str| {
        std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    let missing = lock_check::missing_from_fuzz_lock(
        &read("Cargo.toml"),
        &read("Cargo.lock"),
        &read("fuzz/Cargo.lock"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        missing.is_empty(),
        "fuzz/Cargo.lock lacks packages the main crate builds with: {missing:?}; run \
         `cargo update -w --manifest-path fuzz/Cargo.toml`"
    );
}

/// The check above fails on a fuzz lock file with one package removed: a direct dependency of
/// the main crate, and a package only reached through one.
#[test]
fn the_fuzz_lock_check_catches_a_removed_package() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let lock = std::fs::read_to_string(root.join("Cargo.lock")).unwrap();
    let fuzz_lock = std::fs::read_to_string(root.join("fuzz/Cargo.lock")).unwrap();
    // `glob` is a direct dependency; `rustls-webpki` only comes through rustls.
    for removed in ["glob", "rustls-webpki"] {
        let cut = lock_check::without_package(&fuzz_lock, removed);
        assert_ne!(cut, fuzz_lock, "fuzz/Cargo.lock has no package {removed}");
        let missing = lock_check::missing_from_fuzz_lock(&manifest, &lock, &cut).unwrap();
        assert!(
            missing.iter().any(|p| p.split(' ').next() == Some(removed)),
            "removing {removed} went unnoticed: {missing:?}"
        );
    }
    // A dependency the main crate declares that neither lock file holds is named too.
    let declared = manifest.replace("[dependencies]\n", "[dependencies]\nnot-locked = \"1\"\n");
    let missing = lock_check::missing_from_fuzz_lock(&declared, &lock, &fuzz_lock).unwrap_err();
    assert!(missing.contains("not-locked"), "{missing}");
}

/// Cargo.toml and Cargo.lock read as data. The fuzz lock file must list every normal and build
/// dependency of the main crate at the version the main lock file resolves, and every package it
/// reaches from the main crate must be in it. (The main lock file's own graph is no reference
/// for the rest: its edges carry the features the dev-dependencies turn on, reqwest's `url` and
/// the like, which the fuzz build never asks for. `cargo clippy --locked` of the fuzz workspace
/// in scripts/test is the full check.)
mod lock_check {
    use std::collections::{BTreeSet, HashMap};

    use toml::{Table, Value};

    const CRATE: &str = "rdma-fabric-exporter";

    /// What the fuzz lock file lacks, as `name version` (or `name` for a dependency it does not
    /// list at all); an error when a file does not parse or the main lock file does not resolve
    /// the manifest.
    pub fn missing_from_fuzz_lock(
        manifest: &str,
        lock: &str,
        fuzz_lock: &str,
    ) -> Result<Vec<String>, String> {
        let manifest: Table = manifest.parse().map_err(|e| format!("Cargo.toml: {e}"))?;
        let main = Lock::parse(lock).map_err(|e| format!("Cargo.lock: {e}"))?;
        let fuzz = Lock::parse(fuzz_lock).map_err(|e| format!("fuzz/Cargo.lock: {e}"))?;
        let mut missing = BTreeSet::new();
        let ours = main.package(CRATE, None)?;
        let fuzz_ours = fuzz.package(CRATE, None)?;
        for name in build_dependencies(&manifest) {
            let (_, version) = main.resolve(reference_to(&ours.dependencies, &name)?)?;
            let listed = reference_to(&fuzz_ours.dependencies, &name)
                .and_then(|reference| fuzz.resolve(reference));
            if !listed.is_ok_and(|(_, locked)| locked == version) {
                missing.insert(format!("{name} {version}"));
            }
        }
        // The fuzz lock file's graph from the main crate, every reference resolved in it.
        let mut todo = vec![(CRATE.to_string(), fuzz_ours.version.clone())];
        let mut seen = BTreeSet::new();
        while let Some((name, version)) = todo.pop() {
            if !seen.insert((name.clone(), version.clone())) {
                continue;
            }
            for reference in &fuzz.package(&name, Some(&version))?.dependencies {
                match fuzz.resolve(reference) {
                    Ok(package) => todo.push(package),
                    Err(_) => {
                        missing.insert(reference.clone());
                    }
                }
            }
        }
        Ok(missing.into_iter().collect())
    }

    fn reference_to<'d>(dependencies: &'d [String], name: &str) -> Result<&'d String, String> {
        dependencies
            .iter()
            .find(|d| d.split(' ').next() == Some(name))
            .ok_or_else(|| format!("{CRATE} does not list {name}"))
    }

    /// The lock file text without the `[[package]]` block named `name`.
    pub fn without_package(lock: &str, name: &str) -> String {
        lock.split("\n[[package]]\n")
            .filter(|block| !block.starts_with(&format!("name = \"{name}\"\n")))
            .collect::<Vec<_>>()
            .join("\n[[package]]\n")
    }

    /// The package names (after `package = ` renames) of `[dependencies]`,
    /// `[build-dependencies]` and their `[target.'...']` forms: what a dependent build needs.
    fn build_dependencies(manifest: &Table) -> Vec<String> {
        let targets = manifest.get("target").and_then(Value::as_table);
        let sections = std::iter::once(manifest).chain(
            targets
                .into_iter()
                .flat_map(|t| t.values().filter_map(Value::as_table)),
        );
        sections
            .flat_map(|section| {
                ["dependencies", "build-dependencies"]
                    .into_iter()
                    .filter_map(|key| section.get(key).and_then(Value::as_table))
            })
            .flat_map(|deps| deps.iter())
            .map(|(key, spec)| {
                spec.get("package")
                    .and_then(Value::as_str)
                    .unwrap_or(key)
                    .to_string()
            })
            .collect()
    }

    struct Package {
        version: String,
        dependencies: Vec<String>,
    }

    /// The packages of one lock file by name.
    struct Lock(HashMap<String, Vec<Package>>);

    impl Lock {
        fn parse(text: &str) -> Result<Lock, String> {
            let table: Table = text.parse().map_err(|e| format!("{e}"))?;
            let mut packages: HashMap<String, Vec<Package>> = HashMap::new();
            let entries = table
                .get("package")
                .and_then(Value::as_array)
                .ok_or("no [[package]]")?;
            for entry in entries {
                let field = |key: &str| {
                    entry
                        .get(key)
                        .and_then(Value::as_str)
                        .map(str::to_string)
                        .ok_or_else(|| format!("a package without {key}"))
                };
                let dependencies = entry
                    .get("dependencies")
                    .and_then(Value::as_array)
                    .map(|list| {
                        list.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default();
                packages.entry(field("name")?).or_default().push(Package {
                    version: field("version")?,
                    dependencies,
                });
            }
            Ok(Lock(packages))
        }

        fn package(&self, name: &str, version: Option<&str>) -> Result<&Package, String> {
            let all = self.0.get(name).map(Vec::as_slice).unwrap_or_default();
            match version {
                Some(version) => all.iter().find(|p| p.version == version),
                None if all.len() == 1 => all.first(),
                None => None,
            }
            .ok_or_else(|| format!("no package {name} {}", version.unwrap_or("")))
        }

        /// A lock file's dependency reference: `name`, `name version` or `name version (source)`.
        fn resolve(&self, reference: &str) -> Result<(String, String), String> {
            let mut words = reference.split(' ');
            let name = words.next().unwrap_or_default();
            let package = self.package(name, words.next())?;
            Ok((name.to_string(), package.version.clone()))
        }
    }
}
