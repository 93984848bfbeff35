//! What the unit tests of several modules share: one scrape of collectors through the framework
//! (`collector::Scrape`, as `/metrics` serves them), and waiting for what a thread of the code
//! under test does on its own (a collector's first reading, a released read, an idle pool).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::collector::{Collector, Collectors, Scrape, Selection};
use crate::exposition::Format;

/// One port on host `host` of `fabric`, on rail 0, answering at GID `n` with Q_Key `qkey`: a
/// probe agent's or collector's ports in a test.
pub(crate) fn lone_port(
    fabric: &crate::probe::memory::MemoryFabric,
    host: &str,
    n: u8,
    qkey: u32,
) -> Vec<crate::probe::agent::LocalPort> {
    let mut gid = [0u8; 16];
    gid[15] = n;
    vec![crate::probe::agent::LocalPort {
        port: crate::probe::targets::Port {
            host: host.into(),
            device: "rxe0".into(),
            port: 1,
            rail: 0,
            leaf: None,
        },
        netdev: String::new(),
        traffic_class: 104,
        responder: Box::new(fabric.endpoint(gid, 100, qkey)),
        prober: Box::new(fabric.endpoint(gid, 200, qkey)),
    }]
}

/// One scrape of `collector` alone, its own self-metrics included, as OpenMetrics text.
pub(crate) fn scrape<C: Collector + 'static>(collector: &Arc<C>) -> String {
    scrape_selected(Collectors::new(vec![collector.clone()]), Selection::All)
}

/// One scrape of the collectors of `collectors` that `selection` picks, as OpenMetrics text.
pub(crate) fn scrape_selected(collectors: Collectors, selection: Selection) -> String {
    Scrape::new(Arc::new(collectors), selection, true)
        .body(Format::OpenMetrics, &[])
        .unwrap()
        .to_text()
}

/// Polls `done` every 5 ms until it holds; fails the test after `within`, saying `what` did
/// not happen. The bounds are generous: a loaded machine stretches every thread's work.
#[track_caller]
pub(crate) fn wait_for(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let held = poll_until(within, &mut done, |&held| held);
    assert!(held, "timed out waiting for {what}");
}

/// Reads `read` every 5 ms until `done` holds for a reading or `within` has passed, and returns
/// the last reading: the caller's assertions show what it was.
pub(crate) fn poll_until<T>(
    within: Duration,
    mut read: impl FnMut() -> T,
    done: impl Fn(&T) -> bool,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        let reading = read();
        if done(&reading) || Instant::now() > deadline {
            return reading;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

mod tests {
    use super::*;

    #[test]
    fn wait_for_returns_once_done_holds() {
        let mut polls = 0;
        wait_for("the third poll", Duration::from_secs(5), || {
            polls += 1;
            polls == 3
        });
        assert_eq!(polls, 3);
    }

    #[test]
    fn poll_until_returns_the_last_reading_past_its_bound() {
        let mut reads = 0;
        let last = poll_until(
            Duration::from_millis(20),
            || {
                reads += 1;
                reads
            },
            |_| false,
        );
        assert!(last > 1, "read until the bound: {last}");
    }

    #[test]
    #[should_panic(expected = "timed out waiting for nothing")]
    fn wait_for_fails_the_test_past_its_bound() {
        wait_for("nothing", Duration::from_millis(20), || false);
    }
}
