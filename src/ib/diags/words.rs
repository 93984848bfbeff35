//! The words the infiniband-diags tools print for widths, speeds and states, shared by the
//! parsers: `4X`/`4x`, `EDR`, a lane rate such as `25.78125 Gbps` (iblinkinfo), `4xEDR`
//! (ibnetdiscover), `Active`, `LinkUp`.

use crate::ib::model::{LinkSpeed, LinkWidth, PhysState, PortState};

/// `1X` .. `12X`, either case.
pub fn width(word: &str) -> Option<LinkWidth> {
    let digits = word.strip_suffix('X').or_else(|| word.strip_suffix('x'))?;
    match digits.parse::<u8>().ok()? {
        n @ (1 | 2 | 4 | 8 | 12) => Some(LinkWidth(n)),
        _ => None,
    }
}

/// A generation's name as the tools print it (`SDR` .. `XDR`, `FDR10`).
pub(crate) fn speed_name(word: &str) -> Option<LinkSpeed> {
    Some(match word.to_ascii_uppercase().as_str() {
        "SDR" => LinkSpeed::Sdr,
        "DDR" => LinkSpeed::Ddr,
        "QDR" => LinkSpeed::Qdr,
        "FDR10" => LinkSpeed::Fdr10,
        "FDR" => LinkSpeed::Fdr,
        "EDR" => LinkSpeed::Edr,
        "HDR" => LinkSpeed::Hdr,
        "NDR" => LinkSpeed::Ndr,
        "XDR" => LinkSpeed::Xdr,
        _ => return None,
    })
}

/// The signalling rate of one lane in Gb/s as iblinkinfo prints it (`2.5`, `5.0`, `10.0`,
/// `10.3125` FDR10, `14.0625`, `25.78125`, `53.125`, `106.25`, `212.5`). Ranges rather than
/// exact values: some versions and scripts round (`25.78`, `14.0`).
pub(crate) fn speed_lane_gbps(word: &str) -> Option<LinkSpeed> {
    let gbps: f64 = word.parse().ok()?;
    if !gbps.is_finite() || gbps <= 0.0 {
        return None;
    }
    Some(match gbps {
        g if g < 3.0 => LinkSpeed::Sdr,
        g if g < 7.0 => LinkSpeed::Ddr,
        g if g < 10.2 => LinkSpeed::Qdr,
        g if g < 12.0 => LinkSpeed::Fdr10,
        g if g < 20.0 => LinkSpeed::Fdr,
        g if g < 40.0 => LinkSpeed::Edr,
        g if g < 80.0 => LinkSpeed::Hdr,
        g if g < 150.0 => LinkSpeed::Ndr,
        g if g < 300.0 => LinkSpeed::Xdr,
        _ => return None,
    })
}

/// `4xEDR` (ibnetdiscover's topology file) into width and speed.
pub(crate) fn width_speed(word: &str) -> Option<(LinkWidth, LinkSpeed)> {
    let x = word.find(['x', 'X'])?;
    let w = width(&word[..=x])?;
    let s = speed_name(&word[x + 1..])?;
    Some((w, s))
}

/// PortState as printed: `Active`, `Down`, `Init`, `Armed` (any case, `ACTIVE` from ibstatus).
pub(crate) fn port_state(word: &str) -> Option<PortState> {
    Some(match word.to_ascii_lowercase().as_str() {
        "down" => PortState::Down,
        "init" | "initialize" => PortState::Init,
        "armed" => PortState::Armed,
        "active" => PortState::Active,
        _ => return None,
    })
}

/// PortPhysicalState as printed: `LinkUp`, `Polling`, `Disabled`...
pub fn phys_state(word: &str) -> Option<PhysState> {
    Some(match word.to_ascii_lowercase().as_str() {
        "sleep" => PhysState::Sleep,
        "polling" => PhysState::Polling,
        "disabled" => PhysState::Disabled,
        "portconfigurationtraining" | "training" => PhysState::PortConfigurationTraining,
        "linkup" => PhysState::LinkUp,
        "linkerrorrecovery" => PhysState::LinkErrorRecovery,
        "phytest" | "phy test" => PhysState::PhyTest,
        _ => return None,
    })
}

/// A line with what was around the tool's own text in a support bundle or a mail taken off:
/// leading `>` quote marks and whitespace, a trailing carriage return.
pub fn unquoted(line: &str) -> &str {
    let line = line.strip_suffix('\r').unwrap_or(line);
    let mut rest = line.trim_start();
    while let Some(r) = rest.strip_prefix('>') {
        rest = r.trim_start();
    }
    rest
}

/// A GUID of the tools' `0x…` form, or bare hex as in ibnetdiscover's `S-ec0d9a0300ec8240`.
pub fn guid_hex(word: &str) -> Option<crate::ib::model::Guid> {
    let hex = word
        .strip_prefix("0x")
        .or_else(|| word.strip_prefix("0X"))
        .unwrap_or(word);
    if hex.is_empty() || hex.len() > 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(hex, 16)
        .ok()
        .map(crate::ib::model::Guid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widths_speeds_and_states_read_as_the_tools_print_them() {
        assert_eq!(width("4X"), Some(LinkWidth(4)));
        assert_eq!(width("1x"), Some(LinkWidth(1)));
        assert_eq!(width("3X"), None);
        assert_eq!(width_speed("4xEDR"), Some((LinkWidth(4), LinkSpeed::Edr)));
        assert_eq!(
            width_speed("2xFDR10"),
            Some((LinkWidth(2), LinkSpeed::Fdr10))
        );
        assert_eq!(width_speed("4x???"), None);
        assert_eq!(speed_lane_gbps("25.78125"), Some(LinkSpeed::Edr));
        assert_eq!(speed_lane_gbps("10.0"), Some(LinkSpeed::Qdr));
        assert_eq!(speed_lane_gbps("10.3125"), Some(LinkSpeed::Fdr10));
        assert_eq!(speed_lane_gbps("106.25"), Some(LinkSpeed::Ndr));
        assert_eq!(speed_lane_gbps("2.5"), Some(LinkSpeed::Sdr));
        assert_eq!(speed_lane_gbps("NaN"), None);
        assert_eq!(port_state("ACTIVE"), Some(PortState::Active));
        assert_eq!(phys_state("Polling"), Some(PhysState::Polling));
        assert_eq!(unquoted(">    GUID 0x1 port 1:\r"), "GUID 0x1 port 1:");
        assert_eq!(
            guid_hex("ec0d9a0300ec8240").map(|g| g.0),
            Some(0xec0d_9a03_00ec_8240)
        );
        assert_eq!(guid_hex("0x"), None);
    }
}
