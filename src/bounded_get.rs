//! One HTTP/1.1 GET on hyper (the one the exporter serves with), bounded in time and in the
//! size of its answer: for the few plain-HTTP calls the exporter makes itself (peers'
//! `/probe-address`, `ecn-tune`'s and `doctor`'s queries). One connection per request, closed
//! when the answer has been read.

use std::time::Duration;

use hyper::body::Body as _;
use hyper::header::{HeaderName, ACCEPT, HOST};
use thiserror::Error;

/// What to ask.
#[derive(Debug, Clone, Copy)]
pub struct Get<'a> {
    /// The path and query.
    pub path: &'a str,
    /// The `Host` header.
    pub host: &'a str,
    pub accept: &'a str,
    /// Further headers (User-Agent, Authorization).
    pub headers: &'a [(HeaderName, &'a str)],
    /// An answer larger than this is refused.
    pub max_bytes: usize,
    /// The whole exchange, connecting included, ends within this.
    pub timeout: Duration,
}

/// Why a GET gave no answer. Their messages are what the callers print after the server's name.
#[derive(Debug, Error)]
pub enum GetError {
    /// The request could not be built (a header or path that is not valid HTTP).
    #[error("{0}")]
    Request(hyper::http::Error),
    #[error("{0}")]
    Connect(std::io::Error),
    #[error("{0}")]
    Http(hyper::Error),
    #[error("reading the answer: {0}")]
    Body(hyper::Error),
    #[error("the answer is larger than {0} bytes")]
    TooLarge(usize),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// What a server answered: its status, headers and body.
#[derive(Debug)]
pub struct Answer {
    pub status: hyper::StatusCode,
    pub headers: hyper::HeaderMap,
    pub body: Vec<u8>,
}

/// The status and the body `address` answers `get` with.
pub async fn get(
    address: impl tokio::net::ToSocketAddrs,
    get: &Get<'_>,
) -> Result<(hyper::StatusCode, Vec<u8>), GetError> {
    get_answer(address, get).await.map(|a| (a.status, a.body))
}

/// The whole answer, headers too (a peer's `ETag`).
pub async fn get_answer(
    address: impl tokio::net::ToSocketAddrs,
    get: &Get<'_>,
) -> Result<Answer, GetError> {
    tokio::time::timeout(get.timeout, unbounded_in_time(address, get))
        .await
        .unwrap_or(Err(GetError::Timeout(get.timeout)))
}

async fn unbounded_in_time(
    address: impl tokio::net::ToSocketAddrs,
    get: &Get<'_>,
) -> Result<Answer, GetError> {
    let mut request = hyper::Request::get(get.path)
        .header(HOST, get.host)
        .header(ACCEPT, get.accept);
    for (name, value) in get.headers {
        request = request.header(name, *value);
    }
    let request = request.body(String::new()).map_err(GetError::Request)?;
    let stream = tokio::net::TcpStream::connect(address)
        .await
        .map_err(GetError::Connect)?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake::<_, String>(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(GetError::Http)?;
    let driver = tokio::spawn(async move {
        // Its error shows as the request's error below.
        let _ = connection.await;
    });
    // Ends the connection however the exchange ends.
    let _abort = AbortOnDrop(driver);
    let response = sender.send_request(request).await.map_err(GetError::Http)?;
    let status = response.status();
    let (parts, mut body) = response.into_parts();
    let mut bytes = Vec::new();
    while let Some(frame) =
        std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await
    {
        let frame = frame.map_err(GetError::Body)?;
        if let Ok(data) = frame.into_data() {
            if bytes.len() + data.len() > get.max_bytes {
                return Err(GetError::TooLarge(get.max_bytes));
            }
            bytes.extend_from_slice(&data);
        }
    }
    Ok(Answer {
        status,
        headers: parts.headers,
        body: bytes,
    })
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// A server that answers one request with `answer` and hands back what it was sent.
    fn serve_once(answer: &'static [u8]) -> (String, std::thread::JoinHandle<String>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let served = std::thread::spawn(move || {
            let (mut socket, _) = listener.accept().unwrap();
            let mut request = Vec::new();
            let mut buffer = [0u8; 1024];
            while !request.ends_with(b"\r\n\r\n") {
                match socket.read(&mut buffer) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buffer[..n]),
                }
            }
            let _ = socket.write_all(answer);
            String::from_utf8(request).unwrap()
        });
        (address, served)
    }

    fn ask<'a>(headers: &'a [(HeaderName, &'a str)], max_bytes: usize) -> Get<'a> {
        Get {
            path: "/x?y=1",
            host: "agent:9866",
            accept: "application/json",
            headers,
            max_bytes,
            timeout: Duration::from_secs(5),
        }
    }

    #[tokio::test]
    async fn an_answer_within_its_bound_comes_back_with_its_status() {
        let (address, served) =
            serve_once(b"HTTP/1.1 404 Not Found\r\ncontent-length: 5\r\n\r\nnope!");
        let headers = [(hyper::header::USER_AGENT, "test/1")];
        let (status, body) = get(address.as_str(), &ask(&headers, 5)).await.unwrap();
        assert_eq!((status.as_u16(), body.as_slice()), (404, &b"nope!"[..]));
        let request = served.join().unwrap().to_ascii_lowercase();
        for line in [
            "get /x?y=1 http/1.1",
            "host: agent:9866",
            "accept: application/json",
            "user-agent: test/1",
        ] {
            assert!(request.contains(line), "{request}");
        }
    }

    #[tokio::test]
    async fn a_larger_answer_is_refused() {
        let (address, _served) = serve_once(b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\n123456");
        let error = get(address.as_str(), &ask(&[], 5)).await.unwrap_err();
        assert_eq!(error.to_string(), "the answer is larger than 5 bytes");
    }

    #[tokio::test]
    async fn a_server_that_never_answers_costs_the_timeout() {
        // Accepted by the kernel's backlog, never answered.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let get = Get {
            timeout: Duration::from_millis(200),
            ..ask(&[], 5)
        };
        let error = super::get(address.as_str(), &get).await.unwrap_err();
        assert!(matches!(error, GetError::Timeout(_)), "{error}");
        drop(listener);
    }
}
