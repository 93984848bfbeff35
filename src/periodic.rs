//! A reading made on a thread of its own at a fixed interval, for sources that can be slow
//! (RDMA netlink dumps, the kubelet, shared filesystems): scrapes take the last reading and
//! never wait on the source. [`Periodic`] is the thread and its last reading;
//! [`PeriodicCollector`] the collector around one (`netlink`, `transceiver`, `fec`, `pods`):
//! the reading's time, the failures counted across readings, staleness and success.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::collector::{Collector, Outcome, Output};
use crate::exposition::body::EncodedFamilies;
use crate::exposition::Families;

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

/// A reading, how long it took and when it ended.
#[derive(Debug, Default)]
pub struct Stamped<R> {
    pub reading: R,
    pub duration: Duration,
    /// `None` until the first reading ends.
    pub finished: Option<Instant>,
}

/// Failed reads by reason since the start: counted by the reading thread, written by scrapes.
#[derive(Debug)]
pub struct ErrorCounts<K>(Mutex<BTreeMap<K, u64>>);

impl<K> Default for ErrorCounts<K> {
    fn default() -> Self {
        ErrorCounts(Mutex::default())
    }
}

impl<K: Ord + Clone> ErrorCounts<K> {
    pub fn add(&self, reason: K) {
        *self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(reason)
            .or_default() += 1;
    }

    fn counts(&self) -> BTreeMap<K, u64> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// What a [`PeriodicCollector`] serves: implemented by the collector's config, which holds
/// everything a scrape needs (interval, timeout, which series).
pub trait Served: fmt::Debug + Send + Sync + 'static {
    /// The collector's name, one of [`crate::collector::KNOWN`].
    const NAME: &'static str;
    /// How long a scrape right after the start waits for the first reading: where reading
    /// takes milliseconds, so that the first scrape already has it.
    const FIRST_READING_WAIT: Duration = Duration::ZERO;
    /// Encode a reading's families once for every scrape until the next reading, rather than
    /// once a scrape: for small families read seldom (FEC's few KiB every 30 s).
    const ENCODE_ONCE: bool = false;
    /// Made ready on the thread, so that a scrape only encodes it.
    type Reading: Default + fmt::Debug + Send + Sync + 'static;
    /// The reason a read failed, counted in the collector's errors family.
    type ErrorKey: Ord + Clone + fmt::Debug + Send + Sync + 'static;

    /// How often the source is read.
    fn interval(&self) -> Duration;

    /// How long a reading may take at worst (its requests at their timeouts).
    fn slowest_reading(&self) -> Duration;

    fn add_metrics<'a>(
        &self,
        families: &mut Families<'a>,
        reading: &'a Self::Reading,
        errors: &BTreeMap<Self::ErrorKey, u64>,
    );

    /// Whether the reading counts as a success; a stale one never does.
    fn ok(&self, reading: &Self::Reading) -> bool;
}

/// A collector serving the last reading of a [`Periodic`] thread. Success is that of the last
/// reading, and 0 once it is older than two intervals and the slowest reading; the duration
/// reported is the reading's.
#[derive(Debug)]
pub struct PeriodicCollector<S: Served> {
    served: S,
    errors: Arc<ErrorCounts<S::ErrorKey>>,
    readings: Periodic<Stamped<S::Reading>>,
    /// With [`Served::ENCODE_ONCE`]: the last reading's families, as encoded.
    encoded: Mutex<Option<EncodedReading<S>>>,
}

/// A reading's families as encoded, with what they were encoded from.
#[derive(Debug)]
struct EncodedReading<S: Served> {
    reading: Arc<Stamped<S::Reading>>,
    errors: BTreeMap<S::ErrorKey, u64>,
    families: Arc<EncodedFamilies>,
}

impl<S: Served> PeriodicCollector<S> {
    /// Starts thread `name` calling `read` at once and then every `served.interval()`;
    /// `read` counts its failures in the errors it is given.
    pub fn start(
        name: &str,
        served: S,
        mut read: impl FnMut(&ErrorCounts<S::ErrorKey>) -> S::Reading + Send + 'static,
    ) -> io::Result<PeriodicCollector<S>> {
        let errors = Arc::new(ErrorCounts::default());
        let counted = errors.clone();
        let readings = Periodic::spawn(name, served.interval(), Stamped::default(), move || {
            let started = Instant::now();
            let reading = read(&counted);
            Stamped {
                reading,
                duration: started.elapsed(),
                finished: Some(Instant::now()),
            }
        })?;
        Ok(PeriodicCollector {
            served,
            errors,
            readings,
            encoded: Mutex::default(),
        })
    }

    /// The last reading; before the first has ended, waits for it up to `wait`.
    pub fn last(&self, wait: Duration) -> Arc<Stamped<S::Reading>> {
        let started = Instant::now();
        let mut reading = self.readings.last();
        while reading.finished.is_none() && started.elapsed() < wait {
            std::thread::sleep(Duration::from_millis(5));
            reading = self.readings.last();
        }
        reading
    }

    fn stale_after(&self) -> Duration {
        self.served
            .interval()
            .saturating_mul(2)
            .saturating_add(self.served.slowest_reading())
    }

    /// The families of `reading`, encoded once for it and these error counts.
    fn encoded(
        &self,
        reading: &Arc<Stamped<S::Reading>>,
        errors: BTreeMap<S::ErrorKey, u64>,
    ) -> Arc<EncodedFamilies> {
        let mut encoded = self.encoded.lock().unwrap_or_else(|p| p.into_inner());
        match &*encoded {
            Some(last) if Arc::ptr_eq(&last.reading, reading) && last.errors == errors => {
                last.families.clone()
            }
            _ => {
                let mut families = Families::default();
                self.served
                    .add_metrics(&mut families, &reading.reading, &errors);
                let families = Arc::new(EncodedFamilies::new(&families));
                *encoded = Some(EncodedReading {
                    reading: reading.clone(),
                    errors,
                    families: families.clone(),
                });
                families
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn last_encoded(&self) -> Option<Arc<EncodedFamilies>> {
        let encoded = self.encoded.lock().unwrap_or_else(|p| p.into_inner());
        encoded.as_ref().map(|e| e.families.clone())
    }
}

#[cfg(test)]
impl<S: Served> PeriodicCollector<S> {
    /// Waits for the first reading; a test's bound: 10 s.
    #[track_caller]
    pub(crate) fn assert_first_reading(&self) {
        let first = self.last(Duration::from_secs(10));
        assert!(first.finished.is_some(), "no reading");
    }
}

impl<S: Served> Collector for PeriodicCollector<S> {
    fn name(&self) -> &'static str {
        S::NAME
    }

    fn retire(&self) {
        self.readings.stop();
    }

    fn collect(&self, out: &mut Output<'_>) -> Result<Outcome, fmt::Error> {
        let reading = self.last(S::FIRST_READING_WAIT);
        let errors = self.errors.counts();
        if S::ENCODE_ONCE {
            out.write_encoded(&self.encoded(&reading, errors));
        } else {
            let mut families = Families::default();
            self.served
                .add_metrics(&mut families, &reading.reading, &errors);
            out.encode(&families)?;
        }
        let fresh = reading
            .finished
            .is_some_and(|at| at.elapsed() <= self.stale_after());
        Ok(Outcome {
            ok: fresh && self.served.ok(&reading.reading),
            duration: reading.finished.map(|_| reading.duration),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::wait_for;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn readings_repeat_until_stopped() {
        let count = Arc::new(AtomicU32::new(0));
        let counted = count.clone();
        let periodic = Periodic::spawn("test-periodic", MIN_INTERVAL, 0, move || {
            counted.fetch_add(1, Ordering::SeqCst) + 1
        })
        .unwrap();
        wait_for("a second reading", Duration::from_secs(10), || {
            *periodic.last() >= 2
        });
        periodic.stop();
        // The thread takes at most one more reading after the stop.
        std::thread::sleep(MIN_INTERVAL * 3);
        let after_stop = count.load(Ordering::SeqCst);
        std::thread::sleep(MIN_INTERVAL * 3);
        assert_eq!(count.load(Ordering::SeqCst), after_stop);
    }
}
