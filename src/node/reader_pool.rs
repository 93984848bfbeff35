//! Long-lived threads for the device reads, instead of one new thread per device per scrape.
//!
//! Every job gets a thread of its own if it needs one: a job is queued, and a new thread is
//! started unless enough idle threads are waiting to take every queued job. So a job that
//! hangs (a wedged firmware command) holds one thread and never delays another job. A job is a
//! lane of device reads ([`super::device_reads`]). A thread idle for [`IDLE_EXIT`] ends.
//!
//! A thread is named [`READER_THREAD_NAME`] while it runs a job and [`IDLE_THREAD_NAME`]
//! while it waits (`/proc/<pid>/task/*/comm`): a stuck read is visible as a `sysfs-read`
//! thread that stays.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// The name of a thread running a device read.
pub(crate) const READER_THREAD_NAME: &str = "sysfs-read";
/// The name of a reader thread waiting for work.
pub(crate) const IDLE_THREAD_NAME: &str = "sysfs-idle";
/// How long an idle thread waits for work before it ends.
pub(crate) const IDLE_EXIT: Duration = Duration::from_secs(300);

/// What a job hands back to run once its thread counts as idle again: the delivery of its
/// result. So a walk that starts right after the last result finds the thread available
/// instead of starting another.
pub(crate) type Deliver = Box<dyn FnOnce() + Send>;

type Job = Box<dyn FnOnce() -> Deliver + Send>;

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// Threads waiting for a job.
    waiting: usize,
    /// The pool was dropped: waiting threads end now rather than after [`IDLE_EXIT`] (a
    /// config reload replaces the pool, and its idle threads must not pile up).
    closed: bool,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
}

/// The pool; dropping it ends its idle threads at once, and busy ones after their job.
#[derive(Default)]
pub(crate) struct ReaderPool {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ReaderPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let queue = lock(&self.shared.queue);
        f.debug_struct("ReaderPool")
            .field("queued", &queue.jobs.len())
            .field("waiting", &queue.waiting)
            .finish()
    }
}

fn lock(queue: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    queue.lock().unwrap_or_else(|p| p.into_inner())
}

impl ReaderPool {
    /// Runs `job` on a pool thread. Fails only when a needed thread could not be started; the
    /// job is then dropped unrun.
    pub fn run(&self, job: impl FnOnce() -> Deliver + Send + 'static) -> std::io::Result<()> {
        let mut queue = lock(&self.shared.queue);
        queue.jobs.push_back(Box::new(job));
        if queue.jobs.len() <= queue.waiting {
            drop(queue);
            self.shared.wake.notify_one();
            return Ok(());
        }
        drop(queue);
        let shared = self.shared.clone();
        let started = std::thread::Builder::new()
            .name(READER_THREAD_NAME.into())
            .spawn(move || work(&shared));
        if let Err(e) = started {
            // Take back the job that has no thread (the newest one: this one).
            lock(&self.shared.queue).jobs.pop_back();
            return Err(e);
        }
        Ok(())
    }
}

impl Drop for ReaderPool {
    fn drop(&mut self) {
        lock(&self.shared.queue).closed = true;
        self.shared.wake.notify_all();
    }
}

fn work(shared: &Shared) {
    let mut name = ThreadName(READER_THREAD_NAME);
    let mut queue = lock(&shared.queue);
    loop {
        if queue.closed && queue.jobs.is_empty() {
            return;
        }
        if let Some(job) = queue.jobs.pop_front() {
            drop(queue);
            name.set(READER_THREAD_NAME);
            let deliver = job();
            name.set(IDLE_THREAD_NAME);
            // Counted as waiting before the result goes out; it looks at the queue again
            // before it really waits, so a job queued meanwhile is not missed.
            lock(&shared.queue).waiting += 1;
            deliver();
            queue = lock(&shared.queue);
            queue.waiting -= 1;
            continue;
        }
        // A thread started for a job that an idle one took first waits here without having
        // run one: it must not keep the reader's name.
        name.set(IDLE_THREAD_NAME);
        queue.waiting += 1;
        let (woken, timeout) = shared
            .wake
            .wait_timeout(queue, IDLE_EXIT)
            .unwrap_or_else(|p| p.into_inner());
        queue = woken;
        queue.waiting -= 1;
        if timeout.timed_out() && queue.jobs.is_empty() {
            return;
        }
    }
}

/// The calling thread's name, changed only when it differs (a `prctl` each time otherwise).
struct ThreadName(&'static str);

impl ThreadName {
    fn set(&mut self, name: &'static str) {
        if self.0 != name {
            name_thread(name);
            self.0 = name;
        }
    }
}

/// Renames the calling thread (at most 15 bytes are kept by the kernel).
fn name_thread(name: &str) {
    let Ok(name) = std::ffi::CString::new(name) else {
        return;
    };
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of which it keeps 16 bytes; it
    // renames only the calling thread.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, name.as_ptr());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::wait_for;
    use std::sync::mpsc;

    fn comm_names() -> Vec<String> {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .map(|c| c.trim_end().to_string())
            .collect()
    }

    /// Waits until `n` threads wait for work.
    fn wait_for_idle(pool: &ReaderPool, n: usize) {
        wait_for(&format!("{n} idle threads"), Duration::from_secs(5), || {
            lock(&pool.shared.queue).waiting == n
        });
    }

    #[test]
    fn a_blocked_job_does_not_hold_up_the_next_and_threads_are_reused() {
        let pool = ReaderPool::default();
        let (release, blocked) = mpsc::channel::<()>();
        let (done, finished) = mpsc::channel::<&'static str>();
        let d = done.clone();
        pool.run(move || {
            let _ = blocked.recv();
            Box::new(move || {
                let _ = d.send("blocked");
            })
        })
        .unwrap();
        for round in 0..3 {
            let d = done.clone();
            pool.run(move || {
                Box::new(move || {
                    let _ = d.send("quick");
                })
            })
            .unwrap();
            assert_eq!(
                finished.recv_timeout(Duration::from_secs(5)).unwrap(),
                "quick",
                "round {round}"
            );
            // The quick jobs' thread goes back to wait; the blocked one does not.
            wait_for_idle(&pool, 1);
        }
        release.send(()).unwrap();
        assert_eq!(
            finished.recv_timeout(Duration::from_secs(5)).unwrap(),
            "blocked"
        );
        // Two threads in all: the blocked job's, and one that ran every quick job.
        wait_for_idle(&pool, 2);
        let names = comm_names();
        assert!(names.iter().any(|n| n == IDLE_THREAD_NAME), "{names:?}");
    }
}
