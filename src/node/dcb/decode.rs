//! From the kernel's answer bytes to a [`DcbAnswer`]. Pure: every length is checked against what
//! is there (framing and attribute walking are `rdma_netlink::wire`'s), attributes this build
//! does not read are skipped, and a struct shorter than its uapi size is an error, not a panic.

use crate::node::rdma_netlink::wire::{self, Attr, NLMSG_ERROR, NLMSG_NOOP};

use super::uapi::*;
use super::{DcbAnswer, DcbApp, DcbError, IeeePfc};

/// The answer to the request numbered `seq` (any when `None`) for `netdev`: its `RTM_GETDCB`
/// message, or the errno of its `NLMSG_ERROR`. Messages of other requests are skipped.
pub fn answer(buf: &[u8], seq: Option<u32>, netdev: &str) -> Result<DcbAnswer, DcbError> {
    for message in wire::messages(buf) {
        let message = message.map_err(|e| DcbError::Malformed(e.to_string()))?;
        if seq.is_some_and(|s| s != message.header.seq) {
            continue;
        }
        match message.header.kind {
            NLMSG_NOOP => continue,
            NLMSG_ERROR => {
                let code = message
                    .error_code()
                    .map_err(|e| DcbError::Malformed(e.to_string()))?;
                // 0 is an acknowledgement (only sent when asked for): the answer came before it.
                if code != 0 {
                    return Err(from_errno(code.saturating_neg(), netdev));
                }
            }
            RTM_GETDCB => return ieee_get(message.payload),
            _ => continue,
        }
    }
    Err(DcbError::Malformed(
        "no RTM_GETDCB message in the answer".into(),
    ))
}

/// The errors `dcb_doit` returns, as the user needs to read them.
pub(crate) fn from_errno(errno: i32, netdev: &str) -> DcbError {
    let netdev = netdev.to_string();
    match errno {
        libc::ENODEV => DcbError::NoDevice { netdev },
        libc::EOPNOTSUPP => DcbError::NotSupported { netdev },
        libc::EPERM | libc::EACCES => DcbError::PermissionDenied,
        errno => DcbError::Io {
            op: "RTM_GETDCB",
            source: std::sync::Arc::new(std::io::Error::from_raw_os_error(errno)),
        },
    }
}

/// The payload of an `RTM_GETDCB` answer: `struct dcbmsg`, then the attributes.
fn ieee_get(payload: &[u8]) -> Result<DcbAnswer, DcbError> {
    let header = payload.get(..DCBMSG_LEN).ok_or_else(|| {
        DcbError::Malformed(format!(
            "dcbmsg: {} bytes where {DCBMSG_LEN} are needed",
            payload.len()
        ))
    })?;
    if header[1] != DCB_CMD_IEEE_GET {
        return Err(DcbError::Malformed(format!(
            "answer to DCB command {}, not DCB_CMD_IEEE_GET",
            header[1]
        )));
    }
    let mut answer = DcbAnswer::default();
    for attr in wire::attrs(&payload[DCBMSG_LEN..]) {
        let attr = attr.map_err(|e| DcbError::Malformed(e.to_string()))?;
        match attr.kind {
            DCB_ATTR_IFNAME => answer.ifname = Some(attr.string()),
            DCB_ATTR_DCBX => answer.dcbx = Some(attr.u8().map_err(malformed("DCB_ATTR_DCBX"))?),
            DCB_ATTR_IEEE => ieee(&attr, &mut answer)?,
            _ => {}
        }
    }
    Ok(answer)
}

fn malformed(what: &'static str) -> impl Fn(wire::WireError) -> DcbError {
    move |e| DcbError::Malformed(format!("{what}: {e}"))
}

/// The attributes nested in `DCB_ATTR_IEEE`.
fn ieee(nest: &Attr, answer: &mut DcbAnswer) -> Result<(), DcbError> {
    for attr in nest.nested() {
        let attr = attr.map_err(malformed("DCB_ATTR_IEEE"))?;
        match attr.kind {
            DCB_ATTR_IEEE_PFC => answer.pfc = Some(pfc(attr.value)?),
            DCB_ATTR_IEEE_ETS => {
                let ets = sized(attr.value, IEEE_ETS_LEN, "DCB_ATTR_IEEE_ETS")?;
                let mut prio_tc = [0u8; PRIORITIES];
                prio_tc.copy_from_slice(&ets[IEEE_ETS_PRIO_TC..IEEE_ETS_PRIO_TC + PRIORITIES]);
                answer.prio_tc = Some(prio_tc);
            }
            DCB_ATTR_IEEE_APP_TABLE => {
                for entry in attr.nested() {
                    let entry = entry.map_err(malformed("DCB_ATTR_IEEE_APP_TABLE"))?;
                    if matches!(entry.kind, DCB_ATTR_IEEE_APP | DCB_ATTR_DCB_APP) {
                        let app = sized(entry.value, DCB_APP_LEN, "DCB_ATTR_IEEE_APP")?;
                        answer.apps.push(DcbApp {
                            selector: app[0],
                            priority: app[1],
                            protocol: u16::from_ne_bytes([app[2], app[3]]),
                        });
                    }
                }
            }
            DCB_ATTR_DCB_APP_TRUST_TABLE => {
                let mut selectors = Vec::new();
                for entry in attr.nested() {
                    let entry = entry.map_err(malformed("DCB_ATTR_DCB_APP_TRUST_TABLE"))?;
                    if matches!(entry.kind, DCB_ATTR_IEEE_APP | DCB_ATTR_DCB_APP) {
                        selectors.push(entry.u8().map_err(malformed("trusted selector"))?);
                    }
                }
                answer.trust_table = Some(selectors);
            }
            _ => {}
        }
    }
    Ok(())
}

/// `value`, refused when shorter than its uapi struct; a longer one (a newer kernel's) is read
/// up to the size known here.
fn sized<'a>(value: &'a [u8], len: usize, what: &str) -> Result<&'a [u8], DcbError> {
    value.get(..len).ok_or_else(|| {
        DcbError::Malformed(format!(
            "{what}: {} bytes where {len} are needed",
            value.len()
        ))
    })
}

fn pfc(value: &[u8]) -> Result<IeeePfc, DcbError> {
    let v = sized(value, IEEE_PFC_LEN, "DCB_ATTR_IEEE_PFC")?;
    let u64_at = |at: usize| {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(&v[at..at + 8]);
        u64::from_ne_bytes(bytes)
    };
    let mut pfc = IeeePfc {
        pfc_cap: v[0],
        pfc_en: v[IEEE_PFC_EN],
        mbc: v[2],
        delay: u16::from_ne_bytes([v[IEEE_PFC_DELAY], v[IEEE_PFC_DELAY + 1]]),
        ..IeeePfc::default()
    };
    for p in 0..PRIORITIES {
        pfc.requests[p] = u64_at(IEEE_PFC_REQUESTS + 8 * p);
        pfc.indications[p] = u64_at(IEEE_PFC_INDICATIONS + 8 * p);
    }
    Ok(pfc)
}

#[cfg(all(test, target_endian = "little"))]
mod tests {
    use super::*;
    use crate::node::dcb::{DscpLookup, Trust, TrustEvidence};

    use crate::node::dcb::test_answers::*;

    fn decode(bytes: &[u8]) -> Result<DcbAnswer, DcbError> {
        answer(bytes, Some(SEQ), "ens1f0np0")
    }

    #[test]
    fn a_mlx5_answer_under_trust_dscp() {
        let bytes = Answer::mlx5_trust_dscp(0b0000_1000).bytes();
        let answer = decode(&bytes).unwrap();
        assert_eq!(answer.ifname.as_deref(), Some("ens1f0np0"));
        let pfc = answer.pfc.unwrap();
        assert_eq!((pfc.pfc_cap, pfc.pfc_en, pfc.delay), (8, 0b0000_1000, 7));
        assert_eq!(pfc.requests[3], 1_290_418);
        assert_eq!(pfc.indications[3], 41_927);
        assert_eq!(pfc.requests[0], 0);
        assert_eq!(answer.prio_tc, Some([1, 0, 2, 3, 4, 5, 6, 7]));
        assert_eq!(answer.apps.len(), 64);
        assert_eq!(
            answer.trust(),
            (Trust::Dscp, TrustEvidence::DscpEntries(64))
        );
        assert_eq!(answer.dscp_priority(26), DscpLookup::Priority(3));
        assert_eq!(answer.dscp_priority(0), DscpLookup::Priority(0));
        assert_eq!(answer.dscp_priority(63), DscpLookup::Priority(7));
        assert_eq!(answer.dcbx, Some(0x0c));
        assert_eq!(answer.trust_table, None);
    }

    #[test]
    fn trust_pcp_has_no_dscp_entries() {
        let bytes = Answer::mlx5_trust_pcp(0b0000_1000).bytes();
        let answer = decode(&bytes).unwrap();
        assert!(answer.apps.is_empty());
        assert_eq!(answer.trust(), (Trust::Pcp, TrustEvidence::NoDscpEntries));
        assert_eq!(answer.dscp_priority(26), DscpLookup::Unmapped);
    }

    #[test]
    fn pcp_entries_and_the_trust_table() {
        let mut built = Answer::mlx5_trust_pcp(0);
        built.apps = vec![(255, 3, 3), (5, 3, 26)];
        built.trust = Some(vec![255, 5]);
        let answer = decode(&built.bytes()).unwrap();
        assert_eq!(answer.apps.len(), 2);
        assert_eq!(answer.apps[0].selector, 255);
        assert_eq!(answer.trust_table, Some(vec![255, 5]));
        assert_eq!(answer.trust(), (Trust::Dscp, TrustEvidence::TrustTable));
    }

    #[test]
    fn unknown_attributes_are_skipped_at_every_level() {
        let mut built = Answer::mlx5_trust_dscp(0b0001_0000);
        built.unknown_attributes = true;
        let answer = decode(&built.bytes()).unwrap();
        assert_eq!(answer.pfc.unwrap().pfc_en, 0b0001_0000);
        assert_eq!(answer.apps.len(), 64);
    }

    #[test]
    fn a_driver_without_pfc_or_ets_answers_the_app_table_only() {
        let built = Answer {
            pfc_en: None,
            prio_tc: None,
            ..Answer::mlx5_trust_dscp(0)
        };
        let answer = decode(&built.bytes()).unwrap();
        assert_eq!((answer.pfc, answer.prio_tc), (None, None));
        assert_eq!(answer.apps.len(), 64);
    }

    #[test]
    fn errors_of_dcb_doit_keep_their_meaning() {
        for (errno, check) in [
            (libc::EOPNOTSUPP, "no DCB support"),
            (libc::ENODEV, "no netdev ens1f0np0"),
            (libc::EPERM, "permission denied"),
            (libc::EINVAL, "RTM_GETDCB"),
        ] {
            let err = decode(&error_message(SEQ, errno)).unwrap_err();
            assert!(err.to_string().contains(check), "{errno}: {err}");
        }
        assert!(matches!(
            decode(&error_message(SEQ, libc::EOPNOTSUPP)),
            Err(DcbError::NotSupported { .. })
        ));
    }

    #[test]
    fn a_stale_answer_to_another_request_is_skipped() {
        let mut bytes = error_message(SEQ - 1, libc::ENODEV);
        bytes.extend(Answer::mlx5_trust_dscp(0b1000).bytes());
        assert_eq!(decode(&bytes).unwrap().pfc.unwrap().pfc_en, 0b1000);
        // Alone, the stale message is no answer at all.
        assert!(matches!(
            decode(&error_message(SEQ - 1, libc::ENODEV)),
            Err(DcbError::Malformed(_))
        ));
    }

    #[test]
    fn truncation_anywhere_is_an_error_not_a_panic() {
        let bytes = Answer::mlx5_trust_dscp(0b1000).bytes();
        for len in 0..bytes.len() {
            let mut cut = bytes[..len].to_vec();
            // Keep nlmsg_len consistent with the cut so that the inner lengths are what fails.
            if len >= 16 {
                cut[..4].copy_from_slice(&(len as u32).to_ne_bytes());
            }
            match decode(&cut) {
                Ok(answer) => assert!(answer.apps.len() <= 64, "{len}"),
                Err(e) => assert!(matches!(e, DcbError::Malformed(_)), "{len}: {e}"),
            }
        }
    }

    #[test]
    fn structs_shorter_than_their_uapi_size_are_refused() {
        let mut built = Answer::mlx5_trust_dscp(0b1000);
        built.pfc_len = Some(40);
        let err = decode(&built.bytes()).unwrap_err();
        assert!(
            err.to_string()
                .contains("DCB_ATTR_IEEE_PFC: 40 bytes where 136"),
            "{err}"
        );
        let mut built = Answer::mlx5_trust_dscp(0b1000);
        built.short_app = true;
        let err = decode(&built.bytes()).unwrap_err();
        assert!(
            err.to_string().contains("DCB_ATTR_IEEE_APP: 2 bytes"),
            "{err}"
        );
    }

    #[test]
    fn an_answer_to_another_command_is_refused() {
        let mut built = Answer::mlx5_trust_dscp(0b1000);
        built.cmd = 22;
        let err = decode(&built.bytes()).unwrap_err();
        assert!(err.to_string().contains("DCB command 22"), "{err}");
    }
}
