//! A scrape during device removal: directories disappear and come back while scrapes run.
//! Every scrape must succeed and stay valid; a removed device's series vanish, then return.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::*;

#[test]
fn scrapes_survive_devices_vanishing_mid_walk() {
    let _exclusive = common::exclusive(module_path!());
    let tree = tempfile::tempdir().unwrap();
    copy_tree(&fixture("quirks/sys"), tree.path());
    let class = tree.path().join("class/infiniband");
    let parked = tree.path().join("parked");
    std::fs::create_dir_all(&parked).unwrap();

    let exporter = Exporter::on_sysfs(tree.path(), &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let (stop, class, parked) = (stop.clone(), class.clone(), parked.clone());
        std::thread::spawn(move || {
            let mut flips = 0u64;
            while !stop.load(Ordering::Relaxed) && flips < 200_000 {
                // Remove and restore a whole device, and a port's counters directory.
                let _ = std::fs::rename(class.join("qrk_pma0"), parked.join("qrk_pma0"));
                let _ = std::fs::rename(
                    class.join("qrk_badrate0/ports/1/counters"),
                    parked.join("counters"),
                );
                let _ = std::fs::rename(parked.join("qrk_pma0"), class.join("qrk_pma0"));
                let _ = std::fs::rename(
                    parked.join("counters"),
                    class.join("qrk_badrate0/ports/1/counters"),
                );
                flips += 1;
            }
            flips
        })
    };
    let mut seen_without = 0;
    for _ in 0..150 {
        let samples = scrape_without_duplicates(&exporter);
        if !samples
            .iter()
            .any(|s| s.name == "rdma_port_info" && s.labels["device"] == "qrk_pma0")
        {
            seen_without += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let flips = flipper.join().unwrap();
    assert!(flips > 0);
    eprintln!(
        "{flips} remove/restore cycles; the device was missing in {seen_without} of 150 scrapes"
    );

    // Removed for good: its series disappear. Restored: they return.
    std::fs::rename(class.join("qrk_pma0"), parked.join("qrk_pma0")).unwrap();
    let samples = parse_exposition(&exporter.metrics());
    assert!(!samples
        .iter()
        .any(|s| s.name.starts_with("rdma_port") && s.labels["device"] == "qrk_pma0"));
    assert_eq!(value_of(&samples, "rdma_devices", &[]), Some(2.0));
    std::fs::rename(parked.join("qrk_pma0"), class.join("qrk_pma0")).unwrap();
    let samples = parse_exposition(&exporter.metrics());
    assert_eq!(
        value_of(
            &samples,
            "rdma_port_xmit_packets_total",
            &[("device", "qrk_pma0"), ("port", "1")]
        ),
        Some(12345.0)
    );
}
