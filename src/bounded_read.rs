//! Files read without blocking and with a size bound. A FIFO, a device node (`/dev/zero`) or a
//! huge file where the exporter expects a small regular file must neither wedge a thread in
//! `open(2)` or `read(2)` nor balloon its memory: such a file is an error naming its kind.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Opens `path` for reading without waiting for a writer (FIFOs) or a carrier (terminals),
/// and refuses anything that is not a regular file. Symbolic links are followed: Kubernetes
/// mounts secrets as links to regular files.
pub fn open_regular(path: &Path) -> io::Result<File> {
    open_regular_sized(path).map(|(file, _)| file)
}

/// [`open_regular`], with the length `fstat` gives.
fn open_regular_sized(path: &Path) -> io::Result<(File, u64)> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let meta = file.metadata()?;
    let kind = meta.file_type();
    if !kind.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not a regular file ({})", describe(kind)),
        ));
    }
    Ok((file, meta.len()))
}

/// The whole file, refused when it holds more than `max_bytes`.
pub fn read(path: &Path, max_bytes: u64) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    read_into(path, max_bytes, &mut bytes)?;
    Ok(bytes)
}

/// [`read`] into `bytes` (cleared first), so that a caller reading the same files again and
/// again reuses one buffer. On an error `bytes` holds what was read before it.
pub fn read_into(path: &Path, max_bytes: u64, bytes: &mut Vec<u8>) -> io::Result<()> {
    bytes.clear();
    let (file, len) = open_regular_sized(path)?;
    // The length is a capacity hint (a file on a real file system is read in one go instead
    // of growing from a small probe), never a bound.
    let hint = len.min(max_bytes).saturating_add(1);
    bytes.reserve(usize::try_from(hint).unwrap_or(0));
    // One byte more than allowed tells a file at the bound from a larger one. The length from
    // fstat is not trusted: sysfs and procfs files say 4096 or 0 whatever they hold.
    file.take(max_bytes.saturating_add(1)).read_to_end(bytes)?;
    if bytes.len() as u64 > max_bytes {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than {max_bytes} bytes"),
        ));
    }
    Ok(())
}

/// The whole file as UTF-8 text, refused when it holds more than `max_bytes`.
pub fn read_to_string(path: &Path, max_bytes: u64) -> io::Result<String> {
    String::from_utf8(read(path, max_bytes)?)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.utf8_error()))
}

/// At most the last `max_bytes` of the file.
pub fn read_tail(path: &Path, max_bytes: u64) -> io::Result<Vec<u8>> {
    let mut file = open_regular(path)?;
    let len = file.metadata()?.len();
    if len > max_bytes {
        file.seek(SeekFrom::Start(len - max_bytes))?;
    }
    let mut bytes = Vec::new();
    file.take(max_bytes).read_to_end(&mut bytes)?;
    Ok(bytes)
}

fn describe(kind: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let name = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates the node.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        // Without O_NONBLOCK this open would wait for a writer forever.
        let err = read(&fifo, 100).unwrap_err();
        assert!(err.to_string().contains("a FIFO"), "{err}");
        assert!(read_tail(&fifo, 100).is_err());
    }

    #[test]
    fn a_device_and_a_directory_are_refused() {
        let err = read(Path::new("/dev/zero"), 1 << 20).unwrap_err();
        assert!(err.to_string().contains("a character device"), "{err}");
        let err = read(Path::new("/"), 10).unwrap_err();
        assert!(err.to_string().contains("a directory"), "{err}");
    }

    #[test]
    fn the_bound_is_exact() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"0123456789").unwrap();
        assert_eq!(read(&path, 10).unwrap(), b"0123456789");
        let err = read(&path, 9).unwrap_err();
        assert!(err.to_string().contains("larger than 9 bytes"), "{err}");
        assert_eq!(read_tail(&path, 4).unwrap(), b"6789");
        assert_eq!(read_to_string(&path, 10).unwrap(), "0123456789");
        // Through a link, as Kubernetes mounts secrets.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert_eq!(read(&link, 10).unwrap(), b"0123456789");
    }

    #[test]
    fn a_reused_buffer_holds_only_the_last_file() {
        let dir = tempfile::tempdir().unwrap();
        let (long, short) = (dir.path().join("long"), dir.path().join("short"));
        std::fs::write(&long, b"0123456789").unwrap();
        std::fs::write(&short, b"ab").unwrap();
        let mut buf = Vec::new();
        read_into(&long, 10, &mut buf).unwrap();
        assert_eq!(buf, b"0123456789");
        read_into(&short, 10, &mut buf).unwrap();
        assert_eq!(buf, b"ab");
        assert!(read_into(&long, 9, &mut buf).is_err());
        assert!(read_into(&dir.path().join("gone"), 9, &mut buf).is_err());
        assert!(
            buf.is_empty(),
            "nothing of an earlier file is left: {buf:?}"
        );
    }
}
