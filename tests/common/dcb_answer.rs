//! Builds the kernel's answer to `RTM_GETDCB` / `DCB_CMD_IEEE_GET` byte by byte, the way
//! `dcbnl_ieee_fill` lays it out (net/dcb/dcbnl.c): the IFNAME, the IEEE nest (ETS, MAXRATE, PFC,
//! the APP table, the rewrite table, the trust table when the driver has one), then DCBX.
//! Its numbers are written out here, from include/uapi/linux/dcbnl.h, independently of
//! `src/node/dcb/uapi.rs`, so that a wrong number there makes the decoder tests fail.
//! Shared by the decoder's unit tests (`#[path]`) and tests/it/doctor.rs.
#![allow(dead_code)]

/// The sequence number the built messages carry.
pub const SEQ: u32 = 0x5eed_0042;

const NLMSG_ERROR: u16 = 2;
const RTM_GETDCB: u16 = 78;
const DCB_CMD_IEEE_GET: u8 = 21;
const ATTR_IFNAME: u16 = 1;
const ATTR_IEEE: u16 = 13;
const ATTR_DCBX: u16 = 14;
const IEEE_ETS: u16 = 1;
const IEEE_PFC: u16 = 2;
const IEEE_APP_TABLE: u16 = 3;
const IEEE_MAXRATE: u16 = 7;
const REWR_TABLE: u16 = 12;
const APP_TRUST_TABLE: u16 = 11;
const IEEE_APP: u16 = 1;
const DCB_APP: u16 = 2;
const SEL_PCP: u8 = 255;
const NESTED: u16 = 0x8000;

/// What one answer says; the constructors give mlx5's answers.
#[derive(Debug, Clone)]
pub struct Answer {
    pub ifname: String,
    pub cmd: u8,
    /// `pfc_en` of `struct ieee_pfc`; `None`: no PFC attribute.
    pub pfc_en: Option<u8>,
    /// Length of the PFC attribute's value (136 unless a test cuts it).
    pub pfc_len: Option<usize>,
    pub prio_tc: Option<[u8; 8]>,
    /// (selector, priority, protocol) of each APP entry, in order.
    pub apps: Vec<(u8, u8, u16)>,
    /// Trusted selectors; `None`: no trust table (mlx5).
    pub trust: Option<Vec<u8>>,
    pub dcbx: Option<u8>,
    /// Adds attributes no decoder knows, at the top level, in the IEEE nest and in the table.
    pub unknown_attributes: bool,
    /// The first APP entry only 2 bytes long.
    pub short_app: bool,
}

impl Answer {
    /// mlx5 in trust DSCP: its 64 DSCP entries with the firmware's default map (DSCP d to
    /// priority d / 8), PFC as given, ETS as `mlx5e_ets_init` sets it, DCBX host + IEEE.
    pub fn mlx5_trust_dscp(pfc_en: u8) -> Answer {
        Answer {
            apps: (0..64u16).map(|d| (5, (d >> 3) as u8, d)).collect(),
            ..Answer::mlx5_trust_pcp(pfc_en)
        }
    }

    /// mlx5 in trust PCP: no DSCP entry in the APP table.
    pub fn mlx5_trust_pcp(pfc_en: u8) -> Answer {
        Answer {
            ifname: "ens1f0np0".into(),
            cmd: DCB_CMD_IEEE_GET,
            pfc_en: Some(pfc_en),
            pfc_len: None,
            prio_tc: Some([1, 0, 2, 3, 4, 5, 6, 7]),
            apps: Vec::new(),
            trust: None,
            dcbx: Some(0x0c),
            unknown_attributes: false,
            short_app: false,
        }
    }

    pub fn for_netdev(mut self, ifname: &str) -> Answer {
        self.ifname = ifname.into();
        self
    }

    /// Moves DSCP `dscp` to `priority` in the map.
    pub fn map_dscp(mut self, dscp: u16, priority: u8) -> Answer {
        for app in self.apps.iter_mut().filter(|a| a.0 == 5 && a.2 == dscp) {
            app.1 = priority;
        }
        self
    }

    /// The whole datagram: nlmsghdr, dcbmsg, attributes.
    pub fn bytes(&self) -> Vec<u8> {
        let mut payload = vec![0u8, self.cmd, 0, 0];
        let mut name = self.ifname.as_bytes().to_vec();
        name.push(0);
        put(&mut payload, ATTR_IFNAME, &name);
        let mut ieee = Vec::new();
        if let Some(prio_tc) = self.prio_tc {
            let mut ets = vec![0u8; 59];
            ets[1] = 8; // ets_cap
            ets[27..35].copy_from_slice(&prio_tc);
            put(&mut ieee, IEEE_ETS, &ets);
        }
        put(&mut ieee, IEEE_MAXRATE, &[0u8; 64]);
        if self.unknown_attributes {
            put(&mut ieee, 42, &[1, 2, 3]);
        }
        if let Some(pfc_en) = self.pfc_en {
            let mut pfc = vec![0u8; 136];
            pfc[0] = 8; // pfc_cap
            pfc[1] = pfc_en;
            pfc[4..6].copy_from_slice(&7u16.to_ne_bytes()); // delay: the cable length
            pfc[8 + 3 * 8..8 + 4 * 8].copy_from_slice(&1_290_418u64.to_ne_bytes());
            pfc[72 + 3 * 8..72 + 4 * 8].copy_from_slice(&41_927u64.to_ne_bytes());
            pfc.truncate(self.pfc_len.unwrap_or(136));
            put(&mut ieee, IEEE_PFC, &pfc);
        }
        let mut table = Vec::new();
        if self.unknown_attributes {
            put(&mut table, 0, &[9, 9, 9, 9]);
        }
        for (i, (selector, priority, protocol)) in self.apps.iter().enumerate() {
            let mut app = vec![*selector, *priority];
            app.extend_from_slice(&protocol.to_ne_bytes());
            if self.short_app && i == 0 {
                app.truncate(2);
            }
            let kind = if *selector == SEL_PCP {
                DCB_APP
            } else {
                IEEE_APP
            };
            put(&mut table, kind, &app);
        }
        put(&mut ieee, IEEE_APP_TABLE, &table);
        put(&mut ieee, REWR_TABLE | NESTED, &[]);
        if let Some(trust) = &self.trust {
            let mut nest = Vec::new();
            for selector in trust {
                let kind = if *selector == SEL_PCP {
                    DCB_APP
                } else {
                    IEEE_APP
                };
                put(&mut nest, kind, &[*selector]);
            }
            put(&mut ieee, APP_TRUST_TABLE | NESTED, &nest);
        }
        put(&mut payload, ATTR_IEEE, &ieee);
        if let Some(dcbx) = self.dcbx {
            put(&mut payload, ATTR_DCBX, &[dcbx]);
        }
        if self.unknown_attributes {
            put(&mut payload, 99, &[0; 8]);
        }
        message(RTM_GETDCB, SEQ, &payload)
    }
}

/// `NLMSG_ERROR` with `-errno`, followed (as the kernel does) by the request's header.
pub fn error_message(seq: u32, errno: i32) -> Vec<u8> {
    let mut payload = (-errno).to_ne_bytes().to_vec();
    payload.extend_from_slice(&[0u8; 16]);
    message(NLMSG_ERROR, seq, &payload)
}

fn message(kind: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
    let len = 16 + payload.len();
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&(len as u32).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(&0u16.to_ne_bytes()); // flags
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes()); // pid
    out.extend_from_slice(payload);
    out
}

/// One attribute, padded to 4 bytes.
fn put(out: &mut Vec<u8>, kind: u16, value: &[u8]) {
    out.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(value);
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}
