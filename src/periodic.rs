//! A reading made on a thread of its own at a fixed interval, for sources that can be slow
//! (RDMA netlink dumps, the kubelet, shared filesystems): scrapes take the last reading and
//! never wait on the source.

use std::io;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The shortest interval: a config typo must not turn a reader into a busy loop.
const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// The last reading and the thread that makes them.
#[derive(Debug)]
pub struct Periodic<T> {
    last: Arc<Mutex<Arc<T>>>,
    /// A message, or this handle dropped, ends the thread at its next wake-up.
    stop: mpsc::Sender<()>,
}

impl<T: Send + Sync + 'static> Periodic<T> {
    /// Starts thread `name` calling `read` at once and then every `interval`, on the
    /// interval's grid: a reading longer than the interval skips the missed starts rather than
    /// running back to back. `initial` is served until the first reading ends.
    pub fn spawn(
        name: &str,
        interval: Duration,
        initial: T,
        mut read: impl FnMut() -> T + Send + 'static,
    ) -> io::Result<Periodic<T>> {
        let last = Arc::new(Mutex::new(Arc::new(initial)));
        let (stop, stopped) = mpsc::channel::<()>();
        let served = last.clone();
        let interval = interval.max(MIN_INTERVAL);
        // Detached: a reading stuck in the kernel or on a hung filesystem does not keep the
        // process from exiting.
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || loop {
                let started = Instant::now();
                let reading = read();
                *served.lock().unwrap_or_else(|p| p.into_inner()) = Arc::new(reading);
                let periods = started.elapsed().as_nanos() / interval.as_nanos() + 1;
                let next = interval
                    .checked_mul(u32::try_from(periods).unwrap_or(u32::MAX))
                    .unwrap_or(Duration::MAX);
                match stopped.recv_timeout(next.saturating_sub(started.elapsed())) {
                    Err(RecvTimeoutError::Timeout) => {}
                    // Stopped, or the handle is gone.
                    _ => return,
                }
            })?;
        Ok(Periodic { last, stop })
    }

    /// The last finished reading (`initial` before the first).
    pub fn last(&self) -> Arc<T> {
        self.last.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Ends the thread at once if it waits, or after the reading it is in.
    pub fn stop(&self) {
        let _ = self.stop.send(());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn readings_repeat_until_stopped() {
        let count = Arc::new(AtomicU32::new(0));
        let counted = count.clone();
        let periodic = Periodic::spawn("test-periodic", MIN_INTERVAL, 0, move || {
            counted.fetch_add(1, Ordering::SeqCst) + 1
        })
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while *periodic.last() < 2 {
            assert!(Instant::now() < deadline, "no second reading");
            std::thread::sleep(Duration::from_millis(10));
        }
        periodic.stop();
        // The thread takes at most one more reading after the stop.
        std::thread::sleep(MIN_INTERVAL * 3);
        let after_stop = count.load(Ordering::SeqCst);
        std::thread::sleep(MIN_INTERVAL * 3);
        assert_eq!(count.load(Ordering::SeqCst), after_stop);
    }
}
