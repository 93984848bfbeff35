//! gzip of exposition bodies. Level 1: metric text is repetitive enough that the fastest level
//! already shrinks it about tenfold, and the CPU is the node's.

use std::io::Write;

use axum::body::Bytes;
use flate2::write::GzEncoder;
use flate2::Compression;

/// The gzip member of `body`. Call it off the async workers for large bodies.
pub fn compress(body: &[u8]) -> Bytes {
    let mut encoder = GzEncoder::new(Vec::with_capacity(body.len() / 8), Compression::fast());
    // Writing to a Vec cannot fail.
    encoder.write_all(body).expect("gzip into memory");
    Bytes::from(encoder.finish().expect("gzip into memory"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let body = "rdma_port_state{device=\"mlx5_0\",port=\"1\"} 4\n".repeat(1000);
        let gz = compress(body.as_bytes());
        assert!(gz.len() * 10 < body.len(), "{} bytes", gz.len());
        let mut out = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&gz[..]), &mut out)
            .unwrap();
        assert_eq!(out, body);
    }
}
