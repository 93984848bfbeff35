//! This machine's host name: what LLDP on its switch ports calls it, what its probe ports are
//! published under. One read of it, through `uname` (the UTS namespace's nodename: the same
//! name `gethostname` and `/proc/sys/kernel/hostname` give, without `unsafe` or a file).

/// The host name, `localhost` if it is empty or not UTF-8.
pub fn name() -> String {
    let uname = rustix::system::uname();
    match uname.nodename().to_str() {
        Ok(name) if !name.is_empty() => name.to_string(),
        _ => "localhost".into(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_name_is_the_kernels() {
        let name = super::name();
        assert!(!name.is_empty());
        if let Ok(kernel) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
            let kernel = kernel.trim();
            assert_eq!(
                name,
                if kernel.is_empty() {
                    "localhost"
                } else {
                    kernel
                }
            );
        }
    }
}
