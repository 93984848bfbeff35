//! The process's soft `RLIMIT_NOFILE`, raised at start to what the kept sysfs trees need.
//!
//! systemd starts services, and containerd 2 and Docker 25 start containers, with a soft limit
//! of 1 024 under a far higher hard one (524 288): the soft limit stays low for programs that
//! still use `select(2)`, and a program that wants more raises it itself. Go programs do so at
//! start (node_exporter among them). The kept trees get half the soft limit
//! ([`crate::node::tree_cache::FdBudget`]): 512 descriptors where a 10-NIC node keeps about 750,
//! so a third of the attribute reads fell back to an open, a read and a close at every scrape.
//! What to raise it to is the budget's to say
//! ([`crate::node::tree_cache::WANTED_SOFT_NOFILE`]); this module only reads and raises.

use std::io;

/// The process's `RLIMIT_NOFILE`: (soft, hard), `u64::MAX` standing for unlimited.
pub fn current() -> io::Result<(u64, u64)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((limit.rlim_cur, limit.rlim_max))
}

/// A soft limit before and after [`raise_soft_limit`], with the hard limit that bounds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NofileLimits {
    pub soft_before: u64,
    pub soft: u64,
    pub hard: u64,
}

impl NofileLimits {
    /// True when the hard limit kept the soft one below what was wanted.
    pub fn capped_by_hard(&self, wanted: u64) -> bool {
        self.soft < wanted && self.soft == self.hard
    }
}

/// Raises the soft `RLIMIT_NOFILE` to `wanted`, or to the hard limit if that is lower; never
/// lowers it. No call is made when the soft limit is already high enough (a systemd unit's
/// `LimitNOFILE=` or a container's ulimit said so), so a seccomp filter that denies
/// `setrlimit` is only met when raising is needed.
pub fn raise_soft_limit(wanted: u64) -> io::Result<NofileLimits> {
    let (soft_before, hard) = current()?;
    let target = wanted.min(hard);
    if soft_before >= target {
        return Ok(NofileLimits {
            soft_before,
            soft: soft_before,
            hard,
        });
    }
    let limit = libc::rlimit {
        rlim_cur: target,
        rlim_max: hard,
    };
    // SAFETY: setrlimit only reads the struct it is given.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(NofileLimits {
        soft_before,
        soft: target,
        hard,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::tree_cache::WANTED_SOFT_NOFILE;

    /// Asking for no more than the soft limit already is changes nothing and calls nothing.
    #[test]
    fn a_high_enough_soft_limit_is_left_as_it_is() {
        let now = raise_soft_limit(0).unwrap();
        assert_eq!(now.soft, now.soft_before);
        assert!(now.soft <= now.hard);
        assert!(!now.capped_by_hard(0));
    }

    #[test]
    fn the_current_limits_are_what_proc_shows() {
        let (soft, hard) = current().unwrap();
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
        let line = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .unwrap();
        assert!(line.contains(&format!(" {soft} ")), "{line}");
        assert!(soft <= hard);
    }

    #[test]
    fn capped_means_the_hard_limit_stopped_the_raise() {
        let capped = NofileLimits {
            soft_before: 1024,
            soft: 1024,
            hard: 1024,
        };
        assert!(capped.capped_by_hard(WANTED_SOFT_NOFILE));
        let raised = NofileLimits {
            soft_before: 1024,
            soft: WANTED_SOFT_NOFILE,
            hard: 524_288,
        };
        assert!(!raised.capped_by_hard(WANTED_SOFT_NOFILE));
    }
}
