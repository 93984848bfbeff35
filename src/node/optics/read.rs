//! Which pages each standard needs, read in the order ethtool reads them (`netlink/
//! module-eeprom.c`, `sfpid.c`, `qsfp.c`, `cmis.c`): the identifier and lower memory first, then
//! only the pages the module says it has.

use super::layout::{self, I2C_ADDRESS, I2C_ADDRESS_DIAGNOSTICS};
use super::{
    cmis, sff8472, sff8636, DecodeError, ModuleError, ModulePages, ModuleReading, PageError,
    PageRequest, Standard,
};

/// The module in `netdev`'s cage, decoded. `Ok(None)`: no module (or one that vanished during
/// the read, or an identifier byte of 0, "unknown or unspecified").
pub fn read_module(
    pages: &dyn ModulePages,
    netdev: &str,
) -> Result<Option<ModuleReading>, ModuleError> {
    match read_pages(pages, netdev) {
        Err(ModuleError::Page {
            source: PageError::NoModule,
            ..
        }) => Ok(None),
        other => other,
    }
}

fn read_pages(pages: &dyn ModulePages, netdev: &str) -> Result<Option<ModuleReading>, ModuleError> {
    let get = |request: PageRequest| {
        pages
            .read(netdev, request)
            .map_err(|source| ModuleError::Page { request, source })
    };
    // An optional page: absent is `None`, other failures still fail the read.
    let optional = |request: PageRequest| match get(request) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(ModuleError::Page {
            source: PageError::NoPage(_),
            ..
        }) => Ok(None),
        Err(e) => Err(e),
    };
    let lower = get(PageRequest::lower(I2C_ADDRESS))?;
    let identifier = *lower.first().ok_or(DecodeError::Short {
        what: "identifier",
        need: 1,
        have: 0,
    })?;
    if identifier == 0 {
        return Ok(None);
    }
    let reading = match layout::standard_of(identifier)? {
        Standard::Sff8472 => {
            let a2 = if sff8472::has_diagnostics(&lower) {
                Some(get(PageRequest::lower(I2C_ADDRESS_DIAGNOSTICS))?)
            } else {
                None
            };
            sff8472::decode(&lower, a2.as_deref())?
        }
        Standard::Sff8636 => {
            let page_00 = get(PageRequest::upper(0, 0))?;
            let page_03 = if sff8636::has_threshold_page(&lower) {
                optional(PageRequest::upper(3, 0))?
            } else {
                None
            };
            sff8636::decode(&lower, &page_00, page_03.as_deref())?
        }
        Standard::Cmis => {
            let page_00 = get(PageRequest::upper(0, 0))?;
            let (page_01, page_02, page_11) = if cmis::is_flat(&lower) {
                (None, None, None)
            } else {
                let page_01 = get(PageRequest::upper(1, 0))?;
                let advertised = cmis::Advertisement::of(&page_01)?;
                let page_02 = optional(PageRequest::upper(2, 0))?;
                let page_11 = if advertised.any_lane_monitor() {
                    Some(get(PageRequest::upper(0x11, 0))?)
                } else {
                    None
                };
                (Some(page_01), page_02, page_11)
            };
            cmis::decode(cmis::Pages {
                lower: &lower,
                page_00: &page_00,
                page_01: page_01.as_deref(),
                page_02: page_02.as_deref(),
                page_11: page_11.as_deref(),
            })?
        }
    };
    Ok(Some(reading))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::Mutex;

    /// Pages by (address, page); records what was asked.
    #[derive(Debug, Default)]
    struct Memory {
        pages: HashMap<(u8, u8, u8), Vec<u8>>,
        asked: Mutex<Vec<PageRequest>>,
    }

    impl ModulePages for Memory {
        fn read(&self, _: &str, request: PageRequest) -> Result<Vec<u8>, PageError> {
            self.asked.lock().unwrap().push(request);
            if self.pages.is_empty() {
                return Err(PageError::NoModule);
            }
            let key = (request.i2c_address, request.page, request.offset);
            self.pages
                .get(&key)
                .cloned()
                .ok_or(PageError::NoPage(request))
        }
    }

    #[test]
    fn an_empty_cage_is_none_not_an_error() {
        assert_eq!(read_module(&Memory::default(), "eth0").unwrap(), None);
    }

    #[test]
    fn an_sfp_without_diagnostics_never_asks_for_a2h() {
        let mut lower = vec![0u8; 128];
        lower[0] = 0x03;
        let memory = Memory {
            pages: HashMap::from([((0x50, 0, 0), lower)]),
            ..Memory::default()
        };
        let reading = read_module(&memory, "eth0").unwrap().unwrap();
        assert_eq!(reading.diagnostics, None);
        assert_eq!(memory.asked.lock().unwrap().len(), 1);
    }

    #[test]
    fn a_cmis_module_whose_pages_cannot_be_reached_fails_with_the_page() {
        let mut lower = vec![0u8; 128];
        lower[0] = 0x18;
        let memory = Memory {
            pages: HashMap::from([((0x50, 0, 0), lower), ((0x50, 0, 128), vec![0; 128])]),
            ..Memory::default()
        };
        let err = read_module(&memory, "eth0").unwrap_err();
        assert_eq!(err.failure(), super::super::ReadFailure::PageUnavailable);
        assert!(err.to_string().contains("page 0x01"), "{err}");
    }

    #[test]
    fn an_unknown_identifier_is_a_decode_error() {
        let mut lower = vec![0u8; 128];
        lower[0] = 0x7E;
        let memory = Memory {
            pages: HashMap::from([((0x50, 0, 0), lower)]),
            ..Memory::default()
        };
        let err = read_module(&memory, "eth0").unwrap_err();
        assert_eq!(err.failure(), super::super::ReadFailure::Decode);
    }
}
