//! How late this machine runs a thread that asks to wake every 10 ms: the cause a test names
//! when a deadline inside the program under test (a probe's 500 ms timeout) was missed because
//! the machine did not run it, not because the program is wrong. A test that sees such a stall
//! takes another window instead of failing at random; on a machine that runs its threads, the
//! same assertion fails for real.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TICK: Duration = Duration::from_millis(10);

/// A thread that sleeps `TICK` at a time and keeps the worst lateness since the last `take`.
pub struct StallWatch {
    worst_us: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl StallWatch {
    pub fn start() -> StallWatch {
        let worst_us = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (worst_us, stop) = (worst_us.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let asked = Instant::now();
                    std::thread::sleep(TICK);
                    let late = asked.elapsed().saturating_sub(TICK);
                    worst_us.fetch_max(late.as_micros() as u64, Ordering::Relaxed);
                }
            })
        };
        StallWatch {
            worst_us,
            stop,
            thread: Some(thread),
        }
    }

    /// The worst lateness since the last call (or the start), and a fresh start.
    pub fn take(&self) -> Duration {
        Duration::from_micros(self.worst_us.swap(0, Ordering::Relaxed))
    }
}

impl Drop for StallWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
