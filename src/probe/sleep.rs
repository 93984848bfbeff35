//! How the probing loop sleeps between passes: on its endpoints' completion descriptors
//! ([`Endpoint::wait_fd`]: a NIC's completion channel, the memory fabric's eventfd) until the
//! first completion or the next thing the loop must do, whichever comes first. The loop wakes
//! for work only (a send due, an arrival, a timeout), not to look at empty queues (an 8-port
//! host's loop used to wake about 1 500 times a second), and then polls only the endpoints
//! that have something.
//!
//! The descriptors sit in one epoll set, registered once each; the sleep itself is a `ppoll`
//! on the epoll descriptor (readable when any of them is), for `ppoll`'s nanoseconds where
//! `epoll_wait` rounds to milliseconds (`epoll_pwait2` needs glibc 2.35), then an
//! `epoll_wait` that does not wait says which. A `ppoll` over every descriptor instead cost
//! a sixth of the loop's time in the kernel's per-descriptor polling.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use super::transport::{Endpoint, TransportError};

/// How long descriptors are left out of the sleeps after one reported an error (a device
/// going away): the endpoint's own health check finds out within its interval, and until then
/// the loop sleeps on a timer rather than waking at once again and again.
const AFTER_ERROR: Duration = Duration::from_millis(2);

/// What the loop knows of one endpoint between two passes.
#[derive(Clone, Copy)]
struct Watch {
    /// Its descriptor was readable at the last wake-up (or it was never armed).
    woken: bool,
    /// It had no descriptor at the last sleep: it is polled every pass.
    polled: bool,
    /// When it asked to be looked at again, whatever its descriptor says.
    look_at: Option<Instant>,
}

impl Default for Watch {
    fn default() -> Self {
        Watch {
            woken: true,
            polled: true,
            look_at: None,
        }
    }
}

/// The loop's endpoints as its sleeps see them: which have work, and when to look again.
/// Endpoints are numbered by the loop.
#[derive(Default)]
pub(crate) struct Sleeper {
    /// The epoll set; `None` until the first sleep, and where it cannot be made (then every
    /// endpoint is polled on the loop's timer).
    epoll: Option<OwnedFd>,
    /// The descriptor each endpoint has in the set.
    registered: Vec<Option<RawFd>>,
    watches: Vec<Watch>,
    /// Descriptors are left out of sleeps until then (one reported an error).
    timer_only_until: Option<Instant>,
    events: Vec<libc::epoll_event>,
    /// The endpoints the current sleep was given.
    listed: Vec<bool>,
}

impl Sleeper {
    fn watch(&mut self, id: usize) -> &mut Watch {
        if id >= self.watches.len() {
            self.watches.resize(id + 1, Watch::default());
            self.registered.resize(id + 1, None);
        }
        &mut self.watches[id]
    }

    /// Whether endpoint `id` may have something for the loop: its descriptor woke the sleep,
    /// its time to look again has come, or it has no descriptor. The others are not polled.
    pub fn ready(&self, id: usize, now: Instant) -> bool {
        self.watches
            .get(id)
            .is_none_or(|w| w.woken || w.polled || w.look_at.is_some_and(|at| at <= now))
    }

    /// Hands ready endpoint `id` the wake-up it gave, if any, and asks it to signal its next
    /// completion (before it is polled: what comes after the poll then wakes the sleep).
    pub(crate) fn arm(
        &mut self,
        id: usize,
        endpoint: &mut dyn Endpoint,
        now: Instant,
    ) -> Result<(), TransportError> {
        let woken = self.watch(id).woken;
        let look_at = endpoint.arm(woken)?.map(|within| now + within);
        let watch = self.watch(id);
        watch.woken = false;
        watch.look_at = look_at;
        Ok(())
    }

    /// Puts `fd` in the set as endpoint `id`'s (out goes the one it had); false when it
    /// cannot be watched.
    fn register(&mut self, id: usize, fd: Option<RawFd>) -> bool {
        self.watch(id);
        if self.registered[id] == fd {
            return fd.is_some();
        }
        let Some(epoll) = self.epoll.as_ref().map(AsRawFd::as_raw_fd) else {
            return false;
        };
        if let Some(old) = self.registered[id].take() {
            // SAFETY: plain syscall; an `old` closed since has left the set already (ENOENT or
            // EBADF, both ignored).
            unsafe { libc::epoll_ctl(epoll, libc::EPOLL_CTL_DEL, old, std::ptr::null_mut()) };
        }
        let Some(fd) = fd else { return false };
        let mut event = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: id as u64,
        };
        // SAFETY: `event` is a valid epoll_event for the call.
        if unsafe { libc::epoll_ctl(epoll, libc::EPOLL_CTL_ADD, fd, &mut event) } != 0 {
            return false;
        }
        self.registered[id] = Some(fd);
        true
    }

    /// Sleeps until `until`, an endpoint's time to look again, or one of `endpoints`'
    /// descriptors turning readable. An endpoint without one is not waited on (the loop's
    /// `until` covers it) and is polled every pass; endpoints not listed leave the set.
    pub fn sleep(
        &mut self,
        endpoints: impl Iterator<Item = (usize, Option<RawFd>)>,
        until: Instant,
    ) {
        if self.epoll.is_none() {
            // SAFETY: plain syscall; a non-negative result is a new descriptor we own.
            let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
            // SAFETY: `fd` is fresh and owned by nothing else.
            self.epoll = (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) });
        }
        let now = Instant::now();
        let mut until = until;
        let mut listed = std::mem::take(&mut self.listed);
        listed.clear();
        let mut watched = 0;
        for (id, fd) in endpoints {
            let in_set = self.register(id, fd);
            let watch = &mut self.watches[id];
            watch.polled = !in_set;
            if let Some(at) = watch.look_at {
                until = until.min(at);
            }
            listed.resize(listed.len().max(id + 1), false);
            listed[id] = true;
            watched += usize::from(in_set);
        }
        for id in 0..self.registered.len() {
            if !listed.get(id).copied().unwrap_or(false) && self.registered[id].is_some() {
                self.register(id, None);
            }
        }
        self.listed = listed;
        if until <= now {
            return;
        }
        let timeout = until - now;
        let epoll = self.epoll.as_ref().map(AsRawFd::as_raw_fd);
        let (Some(epoll), true, true) = (
            epoll,
            watched > 0,
            self.timer_only_until.is_none_or(|t| now >= t),
        ) else {
            std::thread::sleep(timeout);
            return;
        };
        let mut set = [libc::pollfd {
            fd: epoll,
            events: libc::POLLIN,
            revents: 0,
        }];
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: one initialised pollfd; `ts` is a valid timespec; no signal mask (null).
        if unsafe { libc::ppoll(set.as_mut_ptr(), 1, &ts, std::ptr::null()) } <= 0 {
            return; // the deadline, or a signal: the times to look again say who is looked at
        }
        self.events
            .resize(watched.max(1), libc::epoll_event { events: 0, u64: 0 });
        // SAFETY: `events` holds `events.len()` entries; a zero timeout does not wait.
        let ready = unsafe {
            libc::epoll_wait(epoll, self.events.as_mut_ptr(), self.events.len() as i32, 0)
        };
        for event in &self.events[..ready.max(0) as usize] {
            let (id, flags) = (event.u64 as usize, event.events);
            if let Some(watch) = self.watches.get_mut(id) {
                watch.woken = true;
            }
            if flags & (libc::EPOLLERR | libc::EPOLLHUP) as u32 != 0 {
                self.timer_only_until = Some(Instant::now() + AFTER_ERROR);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::memory::MemoryFabric;
    use crate::probe::transport::SendOptions;

    fn fabric(delay_ns: u64) -> MemoryFabric {
        MemoryFabric::new(Box::new(move |_, _, _| Some(delay_ns)))
    }

    /// A sleep ends when a packet comes for an armed endpoint, not at the deadline, and the
    /// endpoint hears that it was woken.
    #[test]
    fn an_arrival_ends_the_sleep_and_a_quiet_endpoint_sleeps_to_the_deadline() {
        let fabric = fabric(0);
        let mut a = fabric.endpoint([1; 16], 1, 7);
        let mut b = fabric.endpoint([2; 16], 2, 7);
        let mut sleeper = Sleeper::default();
        let start = Instant::now();
        assert!(sleeper.ready(0, start), "never armed");
        sleeper.arm(0, &mut a, start).unwrap();
        // Nothing comes: the sleep lasts to its deadline, and the endpoint has nothing.
        sleeper.sleep(
            [(0, a.wait_fd())].into_iter(),
            start + Duration::from_millis(50),
        );
        assert!(start.elapsed() >= Duration::from_millis(50));
        assert!(!sleeper.ready(0, Instant::now()));

        sleeper.arm(0, &mut a, Instant::now()).unwrap();
        let to = a.address();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            b.send(to, SendOptions::default(), b"probe", 1).unwrap();
        });
        let start = Instant::now();
        sleeper.sleep(
            [(0, a.wait_fd())].into_iter(),
            start + Duration::from_secs(30),
        );
        sender.join().unwrap();
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "woken by the arrival"
        );
        assert!(sleeper.ready(0, Instant::now()));
        // The next arm takes the wake-up: a sleep after it is not cut short by the old ring.
        sleeper.arm(0, &mut a, Instant::now()).unwrap();
        let start = Instant::now();
        sleeper.sleep(
            [(0, a.wait_fd())].into_iter(),
            start + Duration::from_millis(30),
        );
        assert!(start.elapsed() >= Duration::from_millis(30));
    }

    /// A packet on its way (the fabric's delay) rings at the send but shows at its arrival:
    /// the endpoint's arm says when to look.
    #[test]
    fn a_packet_in_flight_is_looked_for_at_its_arrival() {
        let fabric = fabric(40_000_000);
        let mut a = fabric.endpoint([1; 16], 1, 7);
        let mut b = fabric.endpoint([2; 16], 2, 7);
        b.send(a.address(), SendOptions::default(), b"probe", 1)
            .unwrap();
        let mut sleeper = Sleeper::default();
        let now = Instant::now();
        sleeper.arm(0, &mut a, now).unwrap();
        let look = sleeper.watches[0].look_at.expect("a time to look");
        assert!(look > now + Duration::from_millis(30) && look <= now + Duration::from_millis(40));
        // Slept on (a sleep already over): it is polled when its time comes, not before.
        sleeper.sleep([(0, a.wait_fd())].into_iter(), now);
        assert!(!sleeper.ready(0, now) && sleeper.ready(0, look));
    }
}
