//! Endpoints in memory: a fabric of queues between [`Endpoint`]s, for the tests of the probe
//! loops and for the simulator. Each endpoint is a GID and QPN; a send lands in the receiver's
//! queue unless the fabric's `fate` for that path drops it, after the delay `fate` gives, and
//! is stamped with its arrival time. A receiver may be slow to see what arrived
//! ([`MemoryFabric::with_lag`]): a host whose busy CPU polls late.

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::responder::Source;
use super::rtt::Clock;
use super::transport::{Address, Endpoint, Event, SendOptions, TransportError};

/// What happens to one packet from one endpoint to another: dropped (`None`) or delivered
/// after a delay in nanoseconds.
pub(crate) type Fate = Box<dyn Fn(&Address, &Address, &SendOptions) -> Option<u64> + Send + Sync>;

/// How long after a packet's arrival its receiver, at the address given, first sees it, in
/// nanoseconds: the packet is stamped when it arrived, as a NIC stamps its completion, but
/// the poll that finds it comes this much later.
pub(crate) type Lag = Box<dyn Fn(&Address) -> u64 + Send + Sync>;

/// A packet on its way: when it arrives, when its receiver sees it, its payload, who sent it.
struct InFlight {
    due: u64,
    seen: u64,
    payload: Vec<u8>,
    source: Source,
}

struct Shared {
    queues: HashMap<(u128, u32), VecDeque<InFlight>>,
    gone: Vec<(u128, u32)>,
    /// Endpoints their owner closed.
    closed: Vec<(u128, u32)>,
    /// Endpoints to rebuild at their next poll, with their new QPN.
    resets: HashMap<(u128, u32), u32>,
    /// Each endpoint's doorbell, rung when a packet is queued for it (its `wait_fd`).
    doorbells: HashMap<(u128, u32), Arc<Doorbell>>,
}

/// An eventfd that turns readable when a packet is queued: the memory twin of a completion
/// channel, so the loop sleeps on the demo's endpoints as on a NIC's.
struct Doorbell(Option<OwnedFd>);

impl Doorbell {
    fn new() -> Doorbell {
        // SAFETY: eventfd takes no pointers; a non-negative result is a new descriptor we own.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        // Out of descriptors: no doorbell, and the loop polls this endpoint on a timer.
        // SAFETY: `fd` is a fresh descriptor owned by nothing else.
        Doorbell((fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    fn ring(&self) {
        if let Some(fd) = &self.0 {
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a live u64; a full counter (EAGAIN) is rung already.
            unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
        }
    }

    fn clear(&self) {
        if let Some(fd) = &self.0 {
            let mut count: u64 = 0;
            // SAFETY: reads 8 bytes into a live u64; non-blocking, EAGAIN when not rung.
            unsafe { libc::read(fd.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
        }
    }

    fn fd(&self) -> Option<RawFd> {
        self.0.as_ref().map(AsRawFd::as_raw_fd)
    }
}

/// The fabric every endpoint of it sends through. `fate` is asked without the queues' lock
/// held: it may take locks of its own (the simulator's fabric).
#[derive(Clone)]
pub struct MemoryFabric {
    /// The fabric's clock starts here (read without the queues' lock: every endpoint reads
    /// it at each send and poll).
    start: Instant,
    shared: Arc<Mutex<Shared>>,
    fate: Arc<Fate>,
    lag: Option<Arc<Lag>>,
    /// Endpoints made from now on have no descriptor to sleep on (a device without completion
    /// channels): the loop polls them on its timer.
    polled: bool,
}

impl MemoryFabric {
    /// A fabric where every packet arrives after `fate`'s delay, or never.
    pub fn new(fate: Fate) -> MemoryFabric {
        MemoryFabric {
            start: Instant::now(),
            shared: Arc::new(Mutex::new(Shared {
                queues: HashMap::new(),
                gone: Vec::new(),
                closed: Vec::new(),
                resets: HashMap::new(),
                doorbells: HashMap::new(),
            })),
            fate: Arc::new(fate),
            lag: None,
            polled: false,
        }
    }

    /// The same fabric, its endpoints without a descriptor to sleep on: the loop polls them,
    /// as it polls a device that gives no completion channel (and as it polled every device
    /// before it slept on them). The idle-loop bench compares the two.
    pub fn polled(mut self) -> MemoryFabric {
        self.polled = true;
        self
    }

    /// The same fabric, its receivers seeing each packet `lag` after its arrival. Like `fate`,
    /// `lag` is asked at the send, without the queues' lock held.
    pub fn with_lag(mut self, lag: Lag) -> MemoryFabric {
        self.lag = Some(Arc::new(lag));
        self
    }

    /// A new endpoint at `gid` and `qpn`, the demo's model: it says `Software` but stamps each
    /// arrival as it happened, as a host that polls at once would see it (its lag, if any, is
    /// measured as the responder's delay).
    pub fn endpoint(&self, gid: [u8; 16], qpn: u32, qkey: u32) -> MemoryEndpoint {
        self.endpoint_stamped(gid, qpn, qkey, Clock::Software, false)
    }

    /// A new endpoint with the completion times a real device of `clock` gives: `Hardware`
    /// stamps each arrival when it happened (the NIC's timestamp), `Software` when it is polled
    /// (verbs without timestamps: the host's clock at the poll, lag included).
    pub fn endpoint_with_clock(
        &self,
        gid: [u8; 16],
        qpn: u32,
        qkey: u32,
        clock: Clock,
    ) -> MemoryEndpoint {
        self.endpoint_stamped(gid, qpn, qkey, clock, clock == Clock::Software)
    }

    fn endpoint_stamped(
        &self,
        gid: [u8; 16],
        qpn: u32,
        qkey: u32,
        clock: Clock,
        stamp_at_poll: bool,
    ) -> MemoryEndpoint {
        let mut shared = self.shared.lock().unwrap();
        let key = (u128::from_be_bytes(gid), qpn);
        shared.queues.insert(key, VecDeque::new());
        let doorbell = Arc::new(if self.polled {
            Doorbell(None)
        } else {
            Doorbell::new()
        });
        shared.doorbells.insert(key, doorbell.clone());
        MemoryEndpoint {
            fabric: self.clone(),
            address: Address {
                gid,
                qpn,
                qkey,
                lid: None,
            },
            sent: Vec::new(),
            clock,
            stamp_at_poll,
            doorbell,
        }
    }

    /// Removes the device of `gid`: its endpoints answer [`TransportError::Gone`] from now on.
    pub fn remove(&self, gid: [u8; 16]) {
        let mut shared = self.shared.lock().unwrap();
        let key = u128::from_be_bytes(gid);
        let removed: Vec<(u128, u32)> = shared
            .queues
            .keys()
            .filter(|k| k.0 == key)
            .copied()
            .collect();
        for k in removed {
            shared.queues.remove(&k);
            shared.gone.push(k);
            if let Some(doorbell) = shared.doorbells.get(&k) {
                doorbell.ring();
            }
        }
    }

    /// Removes one endpoint only, as a device that one endpoint finds gone before the other.
    #[cfg(test)]
    pub(crate) fn remove_endpoint(&self, gid: [u8; 16], qpn: u32) {
        let mut shared = self.shared.lock().unwrap();
        let key = (u128::from_be_bytes(gid), qpn);
        shared.queues.remove(&key);
        shared.gone.push(key);
        if let Some(doorbell) = shared.doorbells.get(&key) {
            doorbell.ring();
        }
    }

    /// Rebuilds the endpoint at `gid` and `qpn` as a verbs endpoint rebuilds a queue pair in
    /// the error state: what waits for it is lost, and from its next poll it answers on
    /// `new_qpn` and says so ([`Event::Reset`]).
    pub fn reset(&self, gid: [u8; 16], qpn: u32, new_qpn: u32) {
        let key = (u128::from_be_bytes(gid), qpn);
        let mut shared = self.shared.lock().unwrap();
        shared.resets.insert(key, new_qpn);
        if let Some(doorbell) = shared.doorbells.get(&key) {
            doorbell.ring();
        }
    }

    /// Whether the endpoint at `gid` and `qpn` was closed by its owner.
    pub fn closed(&self, gid: [u8; 16], qpn: u32) -> bool {
        let key = (u128::from_be_bytes(gid), qpn);
        self.shared.lock().unwrap().closed.contains(&key)
    }

    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }
}

pub struct MemoryEndpoint {
    fabric: MemoryFabric,
    address: Address,
    /// Completions of sends not yet polled.
    sent: Vec<(u64, u64)>,
    clock: Clock,
    /// Receives are stamped when polled (software verbs), not when they arrived.
    stamp_at_poll: bool,
    doorbell: Arc<Doorbell>,
}

impl MemoryEndpoint {
    fn key(&self) -> (u128, u32) {
        (u128::from_be_bytes(self.address.gid), self.address.qpn)
    }

    fn check(&self, shared: &Shared) -> Result<(), TransportError> {
        if shared.gone.contains(&self.key()) {
            Err(TransportError::Gone)
        } else {
            Ok(())
        }
    }
}

impl Endpoint for MemoryEndpoint {
    fn address(&self) -> Address {
        self.address
    }

    fn clock(&self) -> Clock {
        self.clock
    }

    fn send(
        &mut self,
        to: Address,
        options: SendOptions,
        payload: &[u8],
        wr_id: u64,
    ) -> Result<u64, TransportError> {
        // The post's time first: the fate may wait on a lock, which is not the wire's time.
        let now = self.fabric.now_ns();
        let delay = (self.fabric.fate)(&self.address, &to, &options);
        let lag = match (&self.fabric.lag, delay) {
            (Some(lag), Some(_)) => lag(&to),
            _ => 0,
        };
        let mut shared = self.fabric.shared.lock().unwrap();
        self.check(&shared)?;
        let source = Source::from_gid(self.address.gid, self.address.qpn);
        if let (Some(delay), Some(queue)) = (
            delay,
            shared
                .queues
                .get_mut(&(u128::from_be_bytes(to.gid), to.qpn)),
        ) {
            if to.qkey == self.address.qkey {
                queue.push_back(InFlight {
                    due: now + delay,
                    seen: now + delay + lag,
                    payload: payload.to_vec(),
                    source,
                });
                let to_key = (u128::from_be_bytes(to.gid), to.qpn);
                if let Some(doorbell) = shared.doorbells.get(&to_key) {
                    doorbell.ring();
                }
            }
        }
        self.sent.push((wr_id, now));
        // With NIC timestamps the loop waits for a send's completion (its time on the wire):
        // it signals, as a NIC's signals its channel. A software clock's carries nothing the
        // loop waits for, and is taken at the next poll.
        if self.clock == Clock::Hardware {
            self.doorbell.ring();
        }
        Ok(now)
    }

    fn poll(&mut self, events: &mut Vec<Event>, wait: Duration) -> Result<(), TransportError> {
        let deadline = Instant::now() + wait;
        loop {
            let now = self.fabric.now_ns();
            {
                let mut shared = self.fabric.shared.lock().unwrap();
                self.check(&shared)?;
                if let Some(new_qpn) = shared.resets.remove(&self.key()) {
                    shared.queues.remove(&self.key());
                    shared.doorbells.remove(&self.key());
                    self.address.qpn = new_qpn;
                    shared.queues.insert(self.key(), VecDeque::new());
                    shared.doorbells.insert(self.key(), self.doorbell.clone());
                    self.sent.clear();
                    events.push(Event::Reset { reason: "qp_error" });
                }
                events.extend(self.sent.drain(..).map(|(wr_id, at_ns)| Event::Sent {
                    wr_id,
                    ok: true,
                    at_ns,
                }));
                let queue = shared
                    .queues
                    .get_mut(&self.key())
                    .ok_or(TransportError::Gone)?;
                // Deliveries are in send order per sender; a later, shorter delay waits behind.
                while queue.front().is_some_and(|packet| packet.seen <= now) {
                    let packet = queue.pop_front().unwrap();
                    // Stamped when it arrived, not when it was polled: like a NIC's completion
                    // timestamp, so the fabric's delay is measured exactly, whatever the lag.
                    events.push(Event::Received {
                        payload: packet.payload,
                        source: packet.source,
                        at_ns: if self.stamp_at_poll { now } else { packet.due },
                    });
                }
            }
            if !events.is_empty() || Instant::now() >= deadline {
                return Ok(());
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    fn now_ns(&self) -> u64 {
        self.fabric.now_ns()
    }

    fn wait_fd(&self) -> Option<RawFd> {
        self.doorbell.fd()
    }

    /// Queued packets ring at once but show only at their arrival (plus the receiver's lag):
    /// the loop is told to look again then. Completions of sends show at the next poll.
    fn arm(&mut self, woken: bool) -> Result<Option<Duration>, TransportError> {
        if woken {
            self.doorbell.clear();
        }
        let now = self.fabric.now_ns();
        let shared = self.fabric.shared.lock().unwrap();
        self.check(&shared)?;
        if !self.sent.is_empty() || shared.resets.contains_key(&self.key()) {
            return Ok(Some(Duration::ZERO));
        }
        // The first not yet seen, in queue order: the poll after this call takes those before
        // it (a poll delivers in order, see `poll`).
        let next = shared
            .queues
            .get(&self.key())
            .and_then(|queue| queue.iter().map(|p| p.seen).find(|&seen| seen > now));
        Ok(next.map(|seen| Duration::from_nanos(seen.saturating_sub(now))))
    }

    fn close(&mut self) {
        let key = self.key();
        self.fabric.shared.lock().unwrap().closed.push(key);
    }
}
