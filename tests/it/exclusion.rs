//! Invariant: an excluded device is never read. Proven with inotify, which reports every open
//! and read below the watched directories, including directory listings.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::*;
use inotify::{Inotify, WatchMask};

fn watch_tree(inotify: &Inotify, dir: &Path) -> usize {
    let mut watches = 1;
    inotify
        .watches()
        .add(dir, WatchMask::OPEN | WatchMask::ACCESS)
        .unwrap();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            watches += watch_tree(inotify, &entry.path());
        }
    }
    watches
}

fn drain(inotify: &mut Inotify) {
    let mut buffer = [0u8; 4096];
    while let Ok(events) = inotify.read_events(&mut buffer) {
        if events.count() == 0 {
            break;
        }
    }
}

#[test]
fn excluded_devices_are_never_opened() {
    let tree = tempfile::tempdir().unwrap();
    copy_tree(&fixture("quirks/sys"), tree.path());
    let excluded = tree.path().join("class/infiniband/qrk_pma0");
    let included = tree.path().join("class/infiniband/qrk_badrate0");

    let mut inotify = Inotify::init().unwrap();
    let watched = watch_tree(&inotify, &excluded);
    assert!(watched >= 4, "watching {watched} directories");

    // The control: the same watch on an included device does see opens.
    let mut control = Inotify::init().unwrap();
    watch_tree(&control, &included);
    // Setting up the watches listed the directories: drop those events.
    std::thread::sleep(Duration::from_millis(50));
    drain(&mut inotify);
    drain(&mut control);

    let exporter = Exporter::on_sysfs(
        tree.path(),
        &["--collector.infiniband.device-exclude", "^qrk_pma0$"],
    );
    let samples = parse_exposition(&exporter.metrics());
    assert!(samples
        .iter()
        .all(|s| s.labels.get("device").map(String::as_str) != Some("qrk_pma0")));
    assert!(samples
        .iter()
        .any(|s| s.labels.get("device").map(String::as_str) == Some("qrk_badrate0")));
    std::thread::sleep(Duration::from_millis(100));

    let mut buffer = [0u8; 4096];
    let events: Vec<String> = match inotify.read_events(&mut buffer) {
        Ok(events) => events
            .map(|e| format!("{:?} {:?}", e.mask, e.name))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Vec::new(),
        Err(e) => panic!("{e}"),
    };
    assert!(events.is_empty(), "excluded device was touched: {events:?}");
    let control_events = control
        .read_events(&mut buffer)
        .map(|e| e.count())
        .unwrap_or(0);
    assert!(
        control_events > 0,
        "inotify saw nothing on the included device: the proof is void"
    );
}

#[test]
fn include_regex_selects_devices() {
    let exporter = Exporter::on_sysfs(
        &fixture("quirks/sys"),
        &["--collector.infiniband.device-include", "nodirs"],
    );
    let samples = parse_exposition(&exporter.metrics());
    assert_eq!(value_of(&samples, "rdma_devices", &[]), Some(1.0));
    let devices: std::collections::BTreeSet<_> = samples
        .iter()
        .filter(|s| s.name.starts_with("rdma_port"))
        .map(|s| s.labels["device"].clone())
        .collect();
    assert_eq!(devices.into_iter().collect::<Vec<_>>(), vec!["qrk_nodirs0"]);
}
