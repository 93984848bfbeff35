//! The Grafana dashboards in dashboards/ against Grafana's own dashboard schema: the TypeScript
//! types `@grafana/schema` publishes, narrowed per panel plugin in
//! `tests/dashboard-schema/board.ts` (which says where and why it departs from the schema).
//! Each board becomes `export const board: Board = <the file>;` and `tsc --noEmit --strict`
//! checks it: a field of the wrong type, a value outside an enum, a missing required field and a
//! property the schema does not know are errors. A board changed to break the schema in those
//! ways must be rejected, at the line of the change.
//!
//! The packages, at the exact versions of `tests/dashboard-schema/package.json` (their hashes
//! in its `package-lock.json`): `$GRAFANA_SCHEMA_DIR/node_modules`, by default
//! `/opt/grafana-schema`, where `scripts/test` installs them with `npm ci`. Node.js runs tsc.

use crate::common;
use crate::dashboards;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::project_root;
use serde_json::{json, Value};

fn package_dir() -> PathBuf {
    project_root().join("tests/dashboard-schema")
}

/// The installed packages, with the pinned versions, and node to run tsc; or the test is
/// skipped (fails under CI): `return` when this gives None. Other versions than the pinned ones
/// fail the test.
fn schema_dir_or_skip() -> Option<PathBuf> {
    let dir = std::env::var_os("GRAFANA_SCHEMA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/grafana-schema"));
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(package_dir().join("package.json")).unwrap())
            .unwrap();
    let pinned = manifest["dependencies"].as_object().unwrap();
    assert!(
        pinned.contains_key("@grafana/schema") && pinned.contains_key("typescript"),
        "{manifest}"
    );
    for (name, version) in pinned {
        let installed = dir.join("node_modules").join(name).join("package.json");
        let Ok(text) = std::fs::read_to_string(&installed) else {
            common::skip_or_fail(&format!(
                "{name} not installed in {} (GRAFANA_SCHEMA_DIR; scripts/test installs \
                 tests/dashboard-schema/package-lock.json there)",
                dir.display()
            ));
            return None;
        };
        let found: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            &found["version"],
            version,
            "{}: not the version tests/dashboard-schema/package.json pins (scripts/test \
             installs it again)",
            installed.display()
        );
    }
    if !Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        common::skip_or_fail("node (Node.js) not found: it runs tsc");
        return None;
    }
    Some(dir)
}

/// One error tsc reported: the file (as given to `tsc_check`), line, TS code and message.
#[derive(Debug)]
struct TsError {
    file: String,
    line: usize,
    code: String,
    message: String,
}

/// What `tsc --noEmit --strict` says about `files` ((name, board JSON text)): each is written
/// as `NAME.ts`, `export const board: Board = <text>;`, with the JSON on the lines it has in
/// its file. Returns the errors, and the files tsc read.
fn tsc_check(schema_dir: &Path, files: &[(String, String)]) -> (Vec<TsError>, Vec<String>) {
    let work = tempfile::tempdir().unwrap();
    std::fs::copy(package_dir().join("board.ts"), work.path().join("board.ts")).unwrap();
    std::os::unix::fs::symlink(
        schema_dir.join("node_modules"),
        work.path().join("node_modules"),
    )
    .unwrap();
    let mut names = Vec::new();
    for (name, text) in files {
        let file = format!("{name}.ts");
        let source = format!(
            "import type {{ Board }} from './board'; export const board: Board = {text};\n"
        );
        std::fs::write(work.path().join(&file), source).unwrap();
        names.push(file);
    }
    let tsconfig = json!({
        "compilerOptions": {
            "strict": true,
            "noEmit": true,
            "target": "es2022",
            "module": "esnext",
            "moduleResolution": "bundler",
            "types": [],
            // The schema's own declarations are checked too: an import of theirs that did not
            // resolve would otherwise become `any` and accept anything.
            "skipLibCheck": false
        },
        "files": names,
    });
    std::fs::write(
        work.path().join("tsconfig.json"),
        serde_json::to_string_pretty(&tsconfig).unwrap(),
    )
    .unwrap();
    let out = Command::new("node")
        .current_dir(work.path())
        .arg(schema_dir.join("node_modules/typescript/bin/tsc"))
        .args(["--project"])
        .arg(work.path())
        .args(["--noEmit", "--strict", "--pretty", "false", "--listFiles"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let error = regex::Regex::new(r"^(.+?)\((\d+),\d+\): error (TS\d+): (.*)$").unwrap();
    let (mut errors, mut read) = (Vec::new(), Vec::new());
    for line in stdout.lines() {
        if let Some(c) = error.captures(line) {
            errors.push(TsError {
                file: c[1].to_string(),
                line: c[2].parse().unwrap(),
                code: c[3].to_string(),
                message: c[4].to_string(),
            });
        } else if line.starts_with('/') {
            read.push(line.to_string());
        } else if !line.starts_with(' ') {
            // Continuation lines of a message are indented; anything else is unexpected.
            panic!("tsc: unexpected output {line:?}\n{stdout}");
        }
    }
    assert_eq!(
        out.status.success(),
        errors.is_empty(),
        "tsc exit status {} vs the errors parsed from:\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    (errors, read)
}

#[test]
fn every_board_has_grafanas_dashboard_type() {
    let _exclusive = common::exclusive(module_path!());
    let Some(schema_dir) = schema_dir_or_skip() else {
        return;
    };
    let mut boards = Vec::new();
    for uid in dashboards::DASHBOARDS {
        let path = project_root()
            .join("dashboards")
            .join(format!("{uid}.json"));
        boards.push((uid.to_string(), std::fs::read_to_string(path).unwrap()));
    }
    let (errors, read) = tsc_check(&schema_dir, &boards);
    // The check ran on every board, with the schema's panel types from the package.
    for needle in dashboards::DASHBOARDS
        .iter()
        .map(|uid| format!("/{uid}.ts"))
        .chain([
            "/node_modules/@grafana/schema/dist/types/veneer/dashboard.types.d.ts".to_string(),
            "/node_modules/@grafana/schema/dist/types/raw/composable/timeseries/panelcfg/x/types.gen.d.ts".to_string(),
        ])
    {
        assert!(
            read.iter().any(|file| file.ends_with(&needle)),
            "tsc did not read {needle}: {read:#?}"
        );
    }
    let errors: Vec<String> = errors
        .iter()
        .map(|e| {
            // A board's errors at its line in dashboards/; others (board.ts) as tsc names them.
            let file = match e.file.strip_suffix(".ts") {
                Some(uid) if dashboards::DASHBOARDS.contains(&uid) => {
                    format!("dashboards/{uid}.json")
                }
                _ => e.file.clone(),
            };
            format!("{file}:{}: {} {}", e.line, e.code, e.message)
        })
        .collect();
    assert!(
        errors.is_empty(),
        "the boards do not have Grafana's dashboard type (tests/dashboard-schema/board.ts):\n{}",
        errors.join("\n")
    );
}

/// A board changed in one place, the changed line (without its comma; empty: not checked) and
/// the error codes tsc may give for it.
struct Breakage {
    name: &'static str,
    change: fn(&mut Value),
    line: &'static str,
    code: &'static [&'static str],
}

fn first_panel_of<'a>(board: &'a mut Value, kind: &str) -> &'a mut Value {
    board["panels"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|p| p["type"] == kind)
        .unwrap_or_else(|| panic!("no {kind} panel"))
}

#[test]
fn tsc_rejects_a_board_with_a_field_of_the_wrong_type() {
    let _exclusive = common::exclusive(module_path!());
    let Some(schema_dir) = schema_dir_or_skip() else {
        return;
    };
    let breakages = [
        Breakage {
            name: "refresh-number",
            change: |b| b["refresh"] = json!(5),
            line: r#""refresh": 5"#,
            code: &["TS2322"],
        },
        Breakage {
            name: "gridpos-w-string",
            change: |b| first_panel_of(b, "timeseries")["gridPos"]["w"] = json!("12"),
            line: r#""w": "12""#,
            code: &["TS2322"],
        },
        Breakage {
            name: "unknown-panel-property",
            change: |b| first_panel_of(b, "stat")["fieldconfig"] = json!({}),
            line: r#""fieldconfig": {}"#,
            code: &["TS2353"],
        },
        Breakage {
            name: "enum-value",
            change: |b| {
                first_panel_of(b, "timeseries")["options"]["legend"]["displayMode"] = json!("grid")
            },
            line: r#""displayMode": "grid""#,
            code: &["TS2322", "TS2820"],
        },
        Breakage {
            name: "query-without-expr",
            change: |b| {
                first_panel_of(b, "timeseries")["targets"][0]
                    .as_object_mut()
                    .unwrap()
                    .remove("expr");
            },
            line: "",
            code: &["TS2741"],
        },
    ];
    let original: Value = serde_json::from_str(
        &std::fs::read_to_string(project_root().join("dashboards/rdma-ib-fabric.json")).unwrap(),
    )
    .unwrap();
    let mut files = vec![(
        "unchanged".to_string(),
        serde_json::to_string_pretty(&original).unwrap(),
    )];
    let mut lines = Vec::new();
    for breakage in &breakages {
        let mut board = original.clone();
        (breakage.change)(&mut board);
        assert_ne!(board, original, "{}: nothing changed", breakage.name);
        let text = serde_json::to_string_pretty(&board).unwrap();
        // The line of the change (1-based; the JSON starts on the file's first line).
        let line = if breakage.line.is_empty() {
            None
        } else {
            let at: Vec<usize> = text
                .lines()
                .enumerate()
                .filter(|(_, l)| l.trim().trim_end_matches(',') == breakage.line)
                .map(|(i, _)| i + 1)
                .collect();
            assert_eq!(
                at.len(),
                1,
                "{}: {:?} at lines {at:?}",
                breakage.name,
                breakage.line
            );
            Some(at[0])
        };
        lines.push(line);
        files.push((breakage.name.to_string(), text));
    }
    let (errors, _) = tsc_check(&schema_dir, &files);
    let of = |name: &str| -> Vec<&TsError> {
        let file = format!("{name}.ts");
        errors.iter().filter(|e| e.file == file).collect()
    };
    assert!(of("unchanged").is_empty(), "{:#?}", of("unchanged"));
    for (breakage, line) in breakages.iter().zip(lines) {
        let found = of(breakage.name);
        assert_eq!(found.len(), 1, "{}: {errors:#?}", breakage.name);
        assert!(
            breakage.code.contains(&found[0].code.as_str()),
            "{}: {:?}",
            breakage.name,
            found[0]
        );
        if let Some(line) = line {
            assert_eq!(found[0].line, line, "{}: {:?}", breakage.name, found[0]);
        }
    }
    assert_eq!(errors.len(), breakages.len(), "{errors:#?}");
}
