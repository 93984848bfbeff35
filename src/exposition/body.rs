//! A scrape's body: what its collectors wrote ([`BodyWriter`]), and the families encoded ahead
//! of the scrape, written into it as they are. The InfiniBand subnet's port series (millions on
//! a large subnet) change once per scan: they are encoded once per scan, and a scrape copies
//! them instead of encoding them again.
//!
//! A [`Body`] is the written text with the blocks spliced in before OpenMetrics' closing
//! `# EOF`. Its gzip is the text's gzip member followed by each block's own member, compressed
//! once per format and kept: a gzip stream may hold several members (RFC 1952, 2.2), and Go's
//! reader, which Prometheus uses, reads them all.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use axum::body::Bytes;

use super::{Families, Format};

/// Families encoded before the scrape, in both formats.
pub trait PreEncoded: Send + Sync + std::fmt::Debug {
    /// Appends the families' text in `format` (HELP and TYPE lines included) to `out`.
    fn write(&self, format: Format, out: &mut Vec<u8>);
    /// About how many bytes [`PreEncoded::write`] appends.
    fn len_hint(&self) -> usize;
    /// The gzip member of that text: compressed on first use for each format, then kept.
    fn gzip(&self, format: Format) -> Bytes;
}

/// The blocks one scrape's collectors handed over.
pub type Blocks = Vec<Arc<dyn PreEncoded>>;

/// The largest starting capacity a [`BodyWriter`] takes from earlier bodies.
const MAX_BODY_GUESS: usize = 16 << 20;

/// The largest body written so far (up to [`MAX_BODY_GUESS`]): a writer starts at that size,
/// since growing a 100 KB body from a guess copies it.
static LARGEST_BODY: AtomicUsize = AtomicUsize::new(64 * 1024);

/// One scrape's body being written: families encoded now, in the order written, and the blocks
/// encoded ahead, spliced in after them.
#[derive(Debug)]
pub struct BodyWriter {
    format: Format,
    text: Vec<u8>,
    blocks: Blocks,
}

impl BodyWriter {
    pub fn new(format: Format) -> BodyWriter {
        BodyWriter {
            format,
            text: Vec::with_capacity(LARGEST_BODY.load(Ordering::Relaxed)),
            blocks: Blocks::new(),
        }
    }

    pub fn format(&self) -> Format {
        self.format
    }

    /// Writes `families`. Each family is written once per body: a second time would give it a
    /// second HELP line.
    pub fn write(&mut self, families: &Families<'_>) {
        families.write(self.format, &mut self.text);
    }

    /// Copies families encoded before the scrape into the text, here.
    pub fn write_encoded(&mut self, encoded: &EncodedFamilies) {
        self.text.extend_from_slice(encoded.text(self.format));
    }

    /// Hands over families encoded before the scrape: the body carries them as they are.
    pub fn append(&mut self, block: Arc<dyn PreEncoded>) {
        self.blocks.push(block);
    }

    /// The body: the text written, the blocks, OpenMetrics' `# EOF`.
    pub fn finish(mut self) -> Body {
        LARGEST_BODY.fetch_max(self.text.len().min(MAX_BODY_GUESS), Ordering::Relaxed);
        if self.format == Format::OpenMetrics {
            self.text.extend_from_slice(EOF.as_bytes());
        }
        Body {
            format: self.format,
            text: Bytes::from(self.text),
            blocks: self.blocks,
        }
    }
}

/// The gzip members of a block, one per format, each made at most once.
#[derive(Debug, Default)]
pub struct GzipOnce {
    open_metrics: OnceLock<Bytes>,
    text: OnceLock<Bytes>,
}

impl GzipOnce {
    pub fn get(&self, format: Format, text: impl FnOnce() -> Vec<u8>) -> Bytes {
        let slot = match format {
            Format::OpenMetrics => &self.open_metrics,
            Format::PrometheusText => &self.text,
        };
        slot.get_or_init(|| super::gzip::compress(&text())).clone()
    }
}

/// Families encoded once, in both formats, and then copied into each body as they are: for a
/// source read once a round by a thread of its own (FEC) and scraped many times a round. Small
/// enough to copy; large ones (the InfiniBand subnet's) are [`PreEncoded`] blocks instead.
#[derive(Debug)]
pub struct EncodedFamilies {
    open_metrics: Vec<u8>,
    text: Vec<u8>,
}

impl EncodedFamilies {
    pub fn new(families: &Families<'_>) -> EncodedFamilies {
        let written = |format| {
            let mut out = Vec::new();
            families.write(format, &mut out);
            out
        };
        EncodedFamilies {
            open_metrics: written(Format::OpenMetrics),
            text: written(Format::PrometheusText),
        }
    }

    fn text(&self, format: Format) -> &[u8] {
        match format {
            Format::OpenMetrics => &self.open_metrics,
            Format::PrometheusText => &self.text,
        }
    }
}

const EOF: &str = "# EOF\n";

/// A scrape's answer: the registry's text and the blocks to splice in.
#[derive(Debug)]
pub struct Body {
    format: Format,
    text: Bytes,
    blocks: Blocks,
}

impl Body {
    pub fn new(format: Format, text: impl Into<Bytes>, blocks: Blocks) -> Body {
        Body {
            format,
            text: text.into(),
            blocks,
        }
    }

    /// A body of `blocks` alone (`/ib/switch`): no registry, OpenMetrics' `# EOF` after them.
    pub fn of_blocks(format: Format, blocks: Blocks) -> Body {
        let text = match format {
            Format::OpenMetrics => EOF,
            Format::PrometheusText => "",
        };
        Body::new(format, text, blocks)
    }

    /// The registry's text before OpenMetrics' `# EOF`, and the `# EOF` (empty in text 0.0.4).
    fn split(&self) -> (Bytes, &'static str) {
        match self.format {
            Format::OpenMetrics if self.text.ends_with(EOF.as_bytes()) => {
                (self.text.slice(..self.text.len() - EOF.len()), EOF)
            }
            _ => (self.text.clone(), ""),
        }
    }

    /// The whole text as a string (tests, small bodies).
    pub fn to_text(&self) -> String {
        String::from_utf8_lossy(&self.bytes()).into_owned()
    }

    /// Whether blocks encoded ahead are spliced in (then [`Body::bytes`] copies them).
    pub fn has_blocks(&self) -> bool {
        !self.blocks.is_empty()
    }

    /// The whole text; without blocks the registry's text itself, not a copy.
    pub fn bytes(&self) -> Bytes {
        if self.blocks.is_empty() {
            return self.text.clone();
        }
        let (head, eof) = self.split();
        let size = head.len() + self.blocks.iter().map(|b| b.len_hint()).sum::<usize>();
        let mut out = Vec::with_capacity(size + eof.len());
        out.extend_from_slice(&head);
        for block in &self.blocks {
            block.write(self.format, &mut out);
        }
        out.extend_from_slice(eof.as_bytes());
        Bytes::from(out)
    }

    /// The gzip of [`Body::bytes`]: the registry's text compressed now, the blocks' kept
    /// members as they are. Call it off the async workers.
    pub fn gzip(&self) -> Bytes {
        if self.blocks.is_empty() {
            return super::gzip::compress(&self.text);
        }
        let (head, eof) = self.split();
        let mut out = super::gzip::compress(&head).to_vec();
        for block in &self.blocks {
            out.extend_from_slice(&block.gzip(self.format));
        }
        if !eof.is_empty() {
            out.extend_from_slice(&super::gzip::compress(eof.as_bytes()));
        }
        Bytes::from(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[derive(Debug, Default)]
    struct Fixed {
        gz: GzipOnce,
        compressed: std::sync::atomic::AtomicUsize,
    }

    impl Fixed {
        fn text(format: Format) -> &'static str {
            match format {
                Format::OpenMetrics => "# TYPE b gauge\nb 2\n",
                Format::PrometheusText => "# TYPE b gauge\nb 2.0\n",
            }
        }
    }

    impl PreEncoded for Fixed {
        fn write(&self, format: Format, out: &mut Vec<u8>) {
            out.extend_from_slice(Fixed::text(format).as_bytes());
        }
        fn len_hint(&self) -> usize {
            20
        }
        fn gzip(&self, format: Format) -> Bytes {
            self.gz.get(format, || {
                self.compressed
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Fixed::text(format).as_bytes().to_vec()
            })
        }
    }

    fn gunzip(gz: &[u8]) -> String {
        let mut text = String::new();
        flate2::read::MultiGzDecoder::new(gz)
            .read_to_string(&mut text)
            .unwrap();
        text
    }

    /// Encoded families are the families' text in each format, copied where they are written:
    /// no block is left to splice.
    #[test]
    fn encoded_families_are_the_families_text() {
        let mut families = Families::default();
        families.counter(
            "x_total",
            "h",
            [("a", std::borrow::Cow::Borrowed("1"))],
            crate::exposition::Value::F64(2.0),
        );
        let encoded = EncodedFamilies::new(&families);
        for format in [Format::OpenMetrics, Format::PrometheusText] {
            let mut writer = BodyWriter::new(format);
            writer.write_encoded(&encoded);
            let body = writer.finish();
            assert!(!body.has_blocks());
            let eof = if format == Format::OpenMetrics {
                EOF
            } else {
                ""
            };
            assert_eq!(body.to_text(), families.text(format) + eof, "{format:?}");
        }
        let mut writer = BodyWriter::new(Format::OpenMetrics);
        writer.write_encoded(&encoded);
        assert_eq!(
            writer.finish().to_text(),
            "# HELP x h\n# TYPE x counter\nx_total{a=\"1\"} 2.0\n# EOF\n"
        );
    }

    #[test]
    fn blocks_go_before_the_eof_and_their_gzip_is_made_once() {
        let block = Arc::new(Fixed::default());
        let om = Body::new(
            Format::OpenMetrics,
            "# TYPE a gauge\na 1\n# EOF\n",
            vec![block.clone()],
        );
        let expected = "# TYPE a gauge\na 1\n# TYPE b gauge\nb 2\n# EOF\n";
        assert_eq!(om.bytes(), expected);
        assert_eq!(gunzip(&om.gzip()), expected);
        assert_eq!(gunzip(&om.gzip()), expected);
        let text = Body::new(Format::PrometheusText, "a 1\n", vec![block.clone()]);
        assert_eq!(text.bytes(), "a 1\n# TYPE b gauge\nb 2.0\n");
        assert_eq!(gunzip(&text.gzip()), "a 1\n# TYPE b gauge\nb 2.0\n");
        // One compression per format, however many scrapes.
        assert_eq!(
            block.compressed.load(std::sync::atomic::Ordering::Relaxed),
            2
        );
        let alone = Body::of_blocks(Format::OpenMetrics, vec![block.clone()]);
        assert_eq!(alone.bytes(), "# TYPE b gauge\nb 2\n# EOF\n");
        assert_eq!(gunzip(&alone.gzip()), "# TYPE b gauge\nb 2\n# EOF\n");
        let plain = Body::new(Format::PrometheusText, "a 1\n", Vec::new());
        assert_eq!(gunzip(&plain.gzip()), "a 1\n");
        assert_eq!(plain.bytes(), "a 1\n");
    }
}
