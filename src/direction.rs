//! The `direction` label shared by NIC and switch metrics.

/// Which way a frame went, seen from the device that counts it: `rx` received, `tx` sent. For
/// PFC pause: rx = the link partner pauses us, tx = we pause the link partner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    Rx,
    Tx,
}

impl Direction {
    /// Every value of the label, for the docs check.
    pub const ALL: &[Direction] = &[Direction::Rx, Direction::Tx];

    pub fn as_label(self) -> &'static str {
        match self {
            Direction::Rx => "rx",
            Direction::Tx => "tx",
        }
    }
}
