//! Module memory from files, for fixtures and the demo: `<dir>/<netdev>/` holds one 128-byte
//! file per half page, named after what the kernel's page request names:
//! `i2c50_lower.bin` (bytes 0-127 at address 0x50), `i2c50_page<PP>_bank<B>.bin` (upper page
//! `PP`, hex, of bank `B`: bytes 128-255), `i2c51_lower.bin` (SFF-8472's A2h). No directory:
//! no module in the cage; no file: the module has no such page.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{ModulePages, PageError, PageRequest};

/// One half page.
pub(crate) const HALF_PAGE: usize = 128;

/// The file a half page lives in, below a netdev's directory.
pub fn file_name(i2c_address: u8, page: u8, bank: u8, upper: bool) -> String {
    if upper {
        format!("i2c{i2c_address:02x}_page{page:02x}_bank{bank}.bin")
    } else {
        format!("i2c{i2c_address:02x}_lower.bin")
    }
}

/// Reads `<dir>/<netdev>/<half page>.bin`.
#[derive(Debug, Clone)]
pub struct FilePages {
    dir: PathBuf,
}

impl FilePages {
    pub fn new(dir: impl Into<PathBuf>) -> FilePages {
        FilePages { dir: dir.into() }
    }

    fn half(&self, netdev: &Path, request: PageRequest, upper: bool) -> Result<Vec<u8>, PageError> {
        let name = file_name(request.i2c_address, request.page, request.bank, upper);
        let path = netdev.join(&name);
        match crate::bounded_read::read(&path, HALF_PAGE as u64) {
            Ok(bytes) if bytes.len() == HALF_PAGE => Ok(bytes),
            Ok(bytes) => Err(PageError::Malformed(format!(
                "{}: {} bytes, a half page is {HALF_PAGE}",
                path.display(),
                bytes.len()
            ))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(PageError::NoPage(request)),
            Err(e) => Err(PageError::Io {
                op: "read page file",
                source: Arc::new(e),
            }),
        }
    }
}

impl ModulePages for FilePages {
    fn read(&self, netdev: &str, request: PageRequest) -> Result<Vec<u8>, PageError> {
        if netdev.is_empty() || netdev.contains('/') || netdev == "." || netdev == ".." {
            return Err(PageError::BadName(netdev.to_string()));
        }
        let dir = self.dir.join(netdev);
        if !dir.is_dir() {
            return Err(PageError::NoModule);
        }
        let start = usize::from(request.offset);
        let end = start + usize::from(request.length);
        if end > 2 * HALF_PAGE {
            return Err(PageError::Malformed(format!(
                "{request} runs past byte 255"
            )));
        }
        // Lower memory does not depend on the page selected.
        let mut view = Vec::with_capacity(2 * HALF_PAGE);
        if start < HALF_PAGE {
            view.extend(self.half(&dir, request, false)?);
        } else {
            view.resize(HALF_PAGE, 0);
        }
        if end > HALF_PAGE {
            view.extend(self.half(&dir, request, true)?);
        }
        Ok(view[start..end].to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_map_onto_half_page_files() {
        let dir = tempfile::tempdir().unwrap();
        let netdev = dir.path().join("eth0");
        std::fs::create_dir(&netdev).unwrap();
        std::fs::write(netdev.join("i2c50_lower.bin"), [1u8; 128]).unwrap();
        std::fs::write(netdev.join("i2c50_page11_bank0.bin"), [2u8; 128]).unwrap();
        std::fs::write(netdev.join("i2c50_page02_bank0.bin"), [3u8; 100]).unwrap();
        let pages = FilePages::new(dir.path());
        assert_eq!(
            pages.read("eth0", PageRequest::lower(0x50)).unwrap(),
            vec![1; 128]
        );
        assert_eq!(
            pages.read("eth0", PageRequest::upper(0x11, 0)).unwrap(),
            vec![2; 128]
        );
        let straddle = PageRequest {
            offset: 126,
            length: 4,
            ..PageRequest::upper(0x11, 0)
        };
        assert_eq!(pages.read("eth0", straddle).unwrap(), vec![1, 1, 2, 2]);
        assert!(matches!(
            pages.read("eth0", PageRequest::upper(0x03, 0)),
            Err(PageError::NoPage(_))
        ));
        assert!(matches!(
            pages.read("eth0", PageRequest::upper(0x02, 0)),
            Err(PageError::Malformed(_))
        ));
        assert!(matches!(
            pages.read("eth1", PageRequest::lower(0x50)),
            Err(PageError::NoModule)
        ));
        assert!(matches!(
            pages.read("../x", PageRequest::lower(0x50)),
            Err(PageError::BadName(_))
        ));
    }
}
