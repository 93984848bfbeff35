//! `/probe` polls, bounded: probes of one target that arrive while its poll runs wait for that
//! poll instead of starting their own (2 000 scrapers of one switch cost the switch one poll),
//! and at most a fixed number of targets are polled for probes at once; past that a probe is
//! refused at once rather than queued without bound.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::sync::{watch, Semaphore};

/// Targets polled for `/probe` at once (the background poller has its own bound).
pub const MAX_PROBE_POLLS: usize = 64;

/// Every target's poll is running: the probe was not started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{0} probe polls already running")]
pub struct Saturated(pub usize);

/// How a probe got its poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Polled {
    /// This probe started the poll.
    Started,
    /// It waited for a poll another probe had started.
    Joined,
}

pub struct ProbeGate {
    /// Target -> the running poll's "finished" flag. An entry lives as long as its poll.
    running: Mutex<HashMap<usize, watch::Receiver<bool>>>,
    permits: Arc<Semaphore>,
    limit: usize,
}

impl ProbeGate {
    pub fn new(limit: usize) -> Arc<ProbeGate> {
        Arc::new(ProbeGate {
            running: Mutex::default(),
            permits: Arc::new(Semaphore::new(limit)),
            limit,
        })
    }

    /// Runs `poll` for `target` unless a poll of it is already running, and waits for
    /// whichever runs. The poll is its own task: a probe that gives up (its scrape timeout, a
    /// closed connection) does not cancel it for the others.
    pub async fn poll<F>(
        self: &Arc<Self>,
        target: usize,
        poll: impl FnOnce() -> F,
    ) -> Result<Polled, Saturated>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let (mut finished, polled) = {
            let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
            match running.get(&target) {
                Some(finished) => (finished.clone(), Polled::Joined),
                None => {
                    let permit = self
                        .permits
                        .clone()
                        .try_acquire_owned()
                        .map_err(|_| Saturated(self.limit))?;
                    let (done, finished) = watch::channel(false);
                    running.insert(target, finished.clone());
                    let entry = Entry {
                        gate: self.clone(),
                        target,
                    };
                    let poll = poll();
                    tokio::spawn(async move {
                        let _permit = permit;
                        poll.await;
                        // Removed before the waiters wake: a probe arriving after this starts
                        // a fresh poll rather than joining a finished one.
                        drop(entry);
                        let _ = done.send(true);
                    });
                    (finished, Polled::Started)
                }
            }
        };
        // An error means the poll task died (a panic): it is over all the same.
        let _ = finished.wait_for(|done| *done).await;
        Ok(polled)
    }

    /// Polls running now.
    pub fn running(&self) -> usize {
        self.running.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// A running poll's place in the map, removed however its task ends (a panic included).
struct Entry {
    gate: Arc<ProbeGate>,
    target: usize,
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.gate
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.target);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    fn slow_poll(count: &Arc<AtomicUsize>) -> impl Future<Output = ()> + Send + 'static {
        let count = count.clone();
        async move {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    #[tokio::test]
    async fn probes_of_one_target_share_its_poll() {
        let gate = ProbeGate::new(4);
        let polls = Arc::new(AtomicUsize::new(0));
        let probes: Vec<_> = (0..100)
            .map(|_| {
                let (gate, polls) = (gate.clone(), polls.clone());
                tokio::spawn(async move { gate.poll(7, || slow_poll(&polls)).await })
            })
            .collect();
        let mut started = 0;
        for probe in probes {
            if probe.await.unwrap() == Ok(Polled::Started) {
                started += 1;
            }
        }
        assert_eq!((started, polls.load(Ordering::SeqCst)), (1, 1));
        assert_eq!(gate.running(), 0);
        // A later probe polls again.
        gate.poll(7, || slow_poll(&polls)).await.unwrap();
        assert_eq!(polls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn past_the_bound_a_probe_is_refused_at_once() {
        let gate = ProbeGate::new(2);
        let polls = Arc::new(AtomicUsize::new(0));
        // The two polls run until released, not for a while: a stalled test thread cannot
        // see them end before it looks.
        let (release, held) = watch::channel(false);
        let held_poll = |polls: &Arc<AtomicUsize>| {
            let (polls, mut held) = (polls.clone(), held.clone());
            async move {
                polls.fetch_add(1, Ordering::SeqCst);
                let _ = held.wait_for(|go| *go).await;
            }
        };
        let busy: Vec<_> = (0..2)
            .map(|target| {
                let (gate, poll) = (gate.clone(), held_poll(&polls));
                tokio::spawn(async move { gate.poll(target, || poll).await })
            })
            .collect();
        while gate.running() < 2 {
            tokio::task::yield_now().await;
        }
        let refused = tokio::time::timeout(
            Duration::from_millis(20),
            gate.poll(2, || held_poll(&polls)),
        )
        .await
        .expect("refused without waiting");
        assert_eq!(refused, Err(Saturated(2)));
        // Probes of a target being polled still join it (joined at their first poll, before
        // the release).
        let mut joined = std::pin::pin!(gate.poll(1, || async {}));
        assert!(tokio::time::timeout(Duration::ZERO, joined.as_mut())
            .await
            .is_err());
        release.send(true).unwrap();
        assert_eq!(joined.await, Ok(Polled::Joined));
        for probe in busy {
            assert_eq!(probe.await.unwrap(), Ok(Polled::Started));
        }
        assert_eq!(polls.load(Ordering::SeqCst), 2);
        assert_eq!(gate.poll(2, || async {}).await, Ok(Polled::Started));
    }

    #[tokio::test]
    async fn a_probe_that_gives_up_leaves_the_poll_to_the_others() {
        let gate = ProbeGate::new(1);
        let polls = Arc::new(AtomicUsize::new(0));
        let gave_up = tokio::time::timeout(
            Duration::from_millis(20),
            gate.poll(0, || slow_poll(&polls)),
        )
        .await;
        assert!(gave_up.is_err());
        assert_eq!(gate.poll(0, || slow_poll(&polls)).await, Ok(Polled::Joined));
        assert_eq!(polls.load(Ordering::SeqCst), 1);
        // A poll that panics frees its place and its waiters.
        let panicked = gate.poll(0, || async { panic!("poll panicked") }).await;
        assert_eq!(panicked, Ok(Polled::Started));
        assert_eq!(gate.running(), 0);
        assert_eq!(gate.poll(0, || async {}).await, Ok(Polled::Started));
    }
}
