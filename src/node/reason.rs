//! The `reason` label of `rdma_exporter_read_errors_total`: why a value was skipped. One closed
//! set for the sysfs walk, the attribute parsers, the ethtool sources and the encoding.

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ReadErrorReason {
    /// `N/A (no PMA)`: the PMA MAD failed (iWARP, VFs, restricted PFs).
    NotAvailable,
    Empty,
    NotUtf8,
    /// Not a number, or a malformed `state`/`rate`.
    Parse,
    /// Above 64 bits.
    Overflow,
    /// A directory where a counter file should be.
    NotAFile,
    DanglingSymlink,
    /// Removed between listing and reading.
    Vanished,
    /// A file where a directory should be.
    NotADirectory,
    Permission,
    /// A reader thread panicked or could not be started.
    Internal,
    /// EINVAL, EOPNOTSUPP or ENOSYS from the driver (firmware-restricted PFs).
    Unsupported,
    Io,
    /// The device's read did not return within `node.device_read_timeout`, or an earlier read
    /// of it still has not: a firmware reset or a hung driver command.
    Timeout,
    /// Two driver names that sanitize to one metric name.
    NameCollision,
    /// The netdev is not in this network namespace.
    EthtoolNoDevice,
    EthtoolNotSupported,
    EthtoolCountChanged,
    EthtoolIo,
    EthtoolParse,
    EthtoolBadName,
    /// Port `hw_counters` over RDMA netlink (`node.hw_counters_source`): the device's read fell
    /// back to the sysfs files for this scrape. No answer within the deadline.
    NetlinkTimeout,
    /// An answer without the port's counters (another device or port, or no message at all).
    NetlinkMissing,
    /// An answer lacking a counter that sysfs lists.
    NetlinkShort,
    /// An answer that does not decode.
    NetlinkMalformed,
    /// Any other error of the request (an errno, a socket that would not open).
    NetlinkError,
    /// EPERM or EOPNOTSUPP (or no NETLINK_RDMA at all): the device reads sysfs from now on;
    /// counted once.
    NetlinkRefused,
}

impl ReadErrorReason {
    /// Every value of the label, for the docs check.
    pub const ALL: &[ReadErrorReason] = &[
        ReadErrorReason::NotAvailable,
        ReadErrorReason::Empty,
        ReadErrorReason::NotUtf8,
        ReadErrorReason::Parse,
        ReadErrorReason::Overflow,
        ReadErrorReason::NotAFile,
        ReadErrorReason::DanglingSymlink,
        ReadErrorReason::Vanished,
        ReadErrorReason::NotADirectory,
        ReadErrorReason::Permission,
        ReadErrorReason::Internal,
        ReadErrorReason::Unsupported,
        ReadErrorReason::Io,
        ReadErrorReason::Timeout,
        ReadErrorReason::NameCollision,
        ReadErrorReason::EthtoolNoDevice,
        ReadErrorReason::EthtoolNotSupported,
        ReadErrorReason::EthtoolCountChanged,
        ReadErrorReason::EthtoolIo,
        ReadErrorReason::EthtoolParse,
        ReadErrorReason::EthtoolBadName,
        ReadErrorReason::NetlinkTimeout,
        ReadErrorReason::NetlinkMissing,
        ReadErrorReason::NetlinkShort,
        ReadErrorReason::NetlinkMalformed,
        ReadErrorReason::NetlinkError,
        ReadErrorReason::NetlinkRefused,
    ];

    pub fn as_label(self) -> &'static str {
        match self {
            ReadErrorReason::NotAvailable => "not_available",
            ReadErrorReason::Empty => "empty",
            ReadErrorReason::NotUtf8 => "not_utf8",
            ReadErrorReason::Parse => "parse",
            ReadErrorReason::Overflow => "overflow",
            ReadErrorReason::NotAFile => "not_a_file",
            ReadErrorReason::DanglingSymlink => "dangling_symlink",
            ReadErrorReason::Vanished => "vanished",
            ReadErrorReason::NotADirectory => "not_a_directory",
            ReadErrorReason::Permission => "permission",
            ReadErrorReason::Internal => "internal",
            ReadErrorReason::Unsupported => "unsupported",
            ReadErrorReason::Io => "io",
            ReadErrorReason::Timeout => "timeout",
            ReadErrorReason::NameCollision => "name_collision",
            ReadErrorReason::EthtoolNoDevice => "ethtool_no_device",
            ReadErrorReason::EthtoolNotSupported => "ethtool_not_supported",
            ReadErrorReason::EthtoolCountChanged => "ethtool_count_changed",
            ReadErrorReason::EthtoolIo => "ethtool_io",
            ReadErrorReason::EthtoolParse => "ethtool_parse",
            ReadErrorReason::EthtoolBadName => "ethtool_bad_name",
            ReadErrorReason::NetlinkTimeout => "netlink_timeout",
            ReadErrorReason::NetlinkMissing => "netlink_missing",
            ReadErrorReason::NetlinkShort => "netlink_short",
            ReadErrorReason::NetlinkMalformed => "netlink_malformed",
            ReadErrorReason::NetlinkError => "netlink_error",
            ReadErrorReason::NetlinkRefused => "netlink_refused",
        }
    }
}
