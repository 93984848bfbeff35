//! Transceiver modules (SFP, QSFP, QSFP-DD, OSFP): their EEPROM pages read through
//! [`ModulePages`] and decoded into a [`ModuleReading`] in base units (celsius, volts, watts,
//! amperes) with the module's own alarm and warning thresholds.
//!
//! - `layout.rs`: what the three management standards share (SFF-8024 identifiers, the
//!   16-bit monitor units, vendor text).
//! - `sff8472.rs`, `sff8636.rs`, `cmis.rs`: one decoder per standard, pure functions of bytes.
//! - `read.rs`: which pages each standard needs, asked of a [`ModulePages`] in order.
//! - `files.rs`: page images from files (fixtures, the demo); `kernel.rs`: the running kernel
//!   (ethtool netlink page reads, the SIOCETHTOOL module EEPROM ioctl as fallback).
//! - `collector.rs`: the opt-in `transceiver` collector (its own thread, an interval).

pub mod cmis;
pub mod collector;
pub mod files;
#[cfg(test)]
mod fixture_tests;
pub mod kernel;
pub mod layout;
pub mod read;
pub mod sff8472;
pub mod sff8636;

use std::fmt;
use std::sync::Arc;

pub use read::read_module;

/// The management interface a module speaks, chosen by its SFF-8024 identifier (byte 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Standard {
    /// SFP, SFP+, SFP28: A0h identification, A2h diagnostics.
    Sff8472,
    /// QSFP+, QSFP28: lower page, upper page 00h, page 03h thresholds.
    Sff8636,
    /// QSFP-DD, OSFP, QSFP112 (CMIS 4/5): pages 00h, 01h, 02h, 11h.
    Cmis,
}

impl Standard {
    pub fn as_label(self) -> &'static str {
        match self {
            Standard::Sff8472 => "sff8472",
            Standard::Sff8636 => "sff8636",
            Standard::Cmis => "cmis",
        }
    }
}

/// One monitored quantity of a module, for the threshold series' `quantity` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Quantity {
    Temperature,
    SupplyVoltage,
    TxPower,
    RxPower,
    BiasCurrent,
}

impl Quantity {
    pub const ALL: [Quantity; 5] = [
        Quantity::Temperature,
        Quantity::SupplyVoltage,
        Quantity::TxPower,
        Quantity::RxPower,
        Quantity::BiasCurrent,
    ];

    pub fn as_label(self) -> &'static str {
        match self {
            Quantity::Temperature => "temperature",
            Quantity::SupplyVoltage => "supply_voltage",
            Quantity::TxPower => "tx_power",
            Quantity::RxPower => "rx_power",
            Quantity::BiasCurrent => "bias_current",
        }
    }
}

/// A module's four limits for one quantity, in the quantity's base unit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Levels {
    pub high_alarm: f64,
    pub high_warning: f64,
    pub low_warning: f64,
    pub low_alarm: f64,
}

impl Levels {
    /// `(level label, value)` in the order the series are written.
    pub fn labelled(&self) -> [(&'static str, f64); 4] {
        [
            ("high_alarm", self.high_alarm),
            ("high_warning", self.high_warning),
            ("low_warning", self.low_warning),
            ("low_alarm", self.low_alarm),
        ]
    }
}

/// The thresholds a module advertises; `None` where the module has no such monitor or no
/// threshold page.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Thresholds {
    pub temperature: Option<Levels>,
    pub supply_voltage: Option<Levels>,
    pub tx_power: Option<Levels>,
    pub rx_power: Option<Levels>,
    pub bias_current: Option<Levels>,
}

impl Thresholds {
    pub fn get(&self, quantity: Quantity) -> Option<Levels> {
        match quantity {
            Quantity::Temperature => self.temperature,
            Quantity::SupplyVoltage => self.supply_voltage,
            Quantity::TxPower => self.tx_power,
            Quantity::RxPower => self.rx_power,
            Quantity::BiasCurrent => self.bias_current,
        }
    }
}

/// One optical lane's monitors (numbered from 1); `None`: not implemented by the module.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Lane {
    pub lane: u8,
    pub tx_power_watts: Option<f64>,
    pub rx_power_watts: Option<f64>,
    pub bias_current_amperes: Option<f64>,
}

/// A module's digital diagnostics (DDM/DOM).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Diagnostics {
    pub temperature_celsius: Option<f64>,
    pub supply_voltage_volts: Option<f64>,
    pub lanes: Vec<Lane>,
    pub thresholds: Thresholds,
}

/// What one module says about itself.
#[derive(Debug, Clone, PartialEq)]
pub struct ModuleReading {
    pub standard: Standard,
    /// SFF-8024 identifier byte.
    pub identifier: u8,
    pub vendor: String,
    pub part_number: String,
    pub revision: String,
    pub serial_number: String,
    /// `None`: the module has no diagnostics (a passive copper cable, a module without DDM).
    pub diagnostics: Option<Diagnostics>,
}

impl ModuleReading {
    /// The identifier's SFF-8024 name (`SFP`, `QSFP28`, `QSFP-DD`, ...).
    pub fn identifier_name(&self) -> &'static str {
        layout::identifier_name(self.identifier)
    }
}

/// Why a module's bytes could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("{what}: {have} bytes where {need} are needed")]
    Short {
        what: &'static str,
        need: usize,
        have: usize,
    },
    #[error("identifier {0:#04x} is not a module type this exporter decodes")]
    UnknownIdentifier(u8),
    #[error("{0}")]
    Unsupported(&'static str),
}

/// One read of module memory, as the ethtool netlink request names it: I2C address (0x50, or
/// 0x51 for SFF-8472's A2h), page and bank, and a byte range of the 256-byte view in which
/// 0-127 is the lower memory and 128-255 the selected upper page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PageRequest {
    pub i2c_address: u8,
    pub page: u8,
    pub bank: u8,
    pub offset: u8,
    pub length: u8,
}

impl PageRequest {
    /// The lower memory (bytes 0-127) at `i2c_address`.
    pub fn lower(i2c_address: u8) -> PageRequest {
        PageRequest {
            i2c_address,
            page: 0,
            bank: 0,
            offset: 0,
            length: 128,
        }
    }

    /// Upper page `page` of bank `bank` (bytes 128-255) at address 0x50.
    pub fn upper(page: u8, bank: u8) -> PageRequest {
        PageRequest {
            i2c_address: layout::I2C_ADDRESS,
            page,
            bank,
            offset: 128,
            length: 128,
        }
    }
}

impl fmt::Display for PageRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "i2c {:#04x} page {:#04x} bank {} bytes {}..{}",
            self.i2c_address,
            self.page,
            self.bank,
            self.offset,
            u16::from(self.offset) + u16::from(self.length)
        )
    }
}

/// Why a page read failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PageError {
    /// No module in the cage, or a port without one (a DAC without EEPROM access, a soft
    /// device): the kernel's EOPNOTSUPP/ENODEV, or no page file. Not an error: reads as none.
    #[error("no module")]
    NoModule,
    /// The page is not there (an optional page of a module, or one the ioctl cannot reach).
    #[error("{0} is not available")]
    NoPage(PageRequest),
    /// EPERM: the module EEPROM requests need CAP_NET_ADMIN.
    #[error("not permitted (module EEPROM reads need CAP_NET_ADMIN)")]
    Permission,
    #[error("no answer within {0:?}")]
    Timeout(std::time::Duration),
    #[error("netdev name {0:?} is not one the kernel could hold")]
    BadName(String),
    #[error("{op}: {source}")]
    Io {
        op: &'static str,
        source: Arc<std::io::Error>,
    },
    /// An answer that cannot be framed or is not the length asked for.
    #[error("{0}")]
    Malformed(String),
}

/// Reads module memory of a netdev's cage.
pub trait ModulePages: Send + Sync + fmt::Debug {
    /// Exactly `request.length` bytes, or why not.
    fn read(&self, netdev: &str, request: PageRequest) -> Result<Vec<u8>, PageError>;
}

/// Why reading one port's module failed, as the `reason` label of
/// `rdma_exporter_transceiver_read_errors_total` (a closed set, documented in docs/metrics.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReadFailure {
    Permission,
    Timeout,
    Io,
    /// Bytes that do not decode (short, garbled, an unknown identifier).
    Decode,
    BadName,
    /// A page the module's standard requires could not be reached (CMIS pages over the
    /// ioctl, which reaches only the lower memory and page 00h).
    PageUnavailable,
}

impl ReadFailure {
    pub const ALL: [ReadFailure; 6] = [
        ReadFailure::Permission,
        ReadFailure::Timeout,
        ReadFailure::Io,
        ReadFailure::Decode,
        ReadFailure::BadName,
        ReadFailure::PageUnavailable,
    ];

    pub fn as_label(self) -> &'static str {
        match self {
            ReadFailure::Permission => "permission",
            ReadFailure::Timeout => "timeout",
            ReadFailure::Io => "io",
            ReadFailure::Decode => "decode",
            ReadFailure::BadName => "bad_name",
            ReadFailure::PageUnavailable => "page_unavailable",
        }
    }
}

/// Why [`read_module`] gave no reading.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ModuleError {
    #[error("reading {request}: {source}")]
    Page {
        request: PageRequest,
        source: PageError,
    },
    #[error(transparent)]
    Decode(#[from] DecodeError),
}

impl ModuleError {
    pub fn failure(&self) -> ReadFailure {
        match self {
            ModuleError::Decode(_) => ReadFailure::Decode,
            ModuleError::Page { source, .. } => match source {
                PageError::Permission => ReadFailure::Permission,
                PageError::Timeout(_) => ReadFailure::Timeout,
                PageError::BadName(_) => ReadFailure::BadName,
                PageError::Malformed(_) => ReadFailure::Decode,
                PageError::NoPage(_) => ReadFailure::PageUnavailable,
                PageError::NoModule | PageError::Io { .. } => ReadFailure::Io,
            },
        }
    }
}
