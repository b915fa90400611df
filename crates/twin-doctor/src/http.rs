//! A minimal blocking HTTP/1.1 GET over `std::net::TcpStream`: enough for `/metrics`,
//! `/version`, `/v1/models` and Prometheus' `/api/v1/*`. No TLS (point the doctor at a
//! port-forward or an in-cluster http address); bodies are capped so a wrong URL cannot
//! exhaust memory.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::{err, DoctorError};

/// The largest body the doctor reads (a big DP deployment's scrape is a few MB; a
/// Prometheus range query over many series can be tens of MB).
pub const MAX_BODY_BYTES: usize = 256 << 20;

/// A parsed `http://host:port/path?query` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    pub host: String,
    pub port: u16,
    /// Path and query, starting with `/`.
    pub path: String,
}

impl Url {
    pub fn parse(url: &str) -> Result<Url, DoctorError> {
        let rest = if let Some(r) = url.strip_prefix("http://") {
            r
        } else if url.starts_with("https://") {
            return err(format!(
                "{url}: https is not supported (no TLS in the doctor); use an http address or a port-forward"
            ));
        } else {
            return err(format!("{url}: not an http:// URL"));
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => {
                let port = p
                    .parse::<u16>()
                    .map_err(|_| DoctorError(format!("{url}: bad port {p:?}")))?;
                (h.to_string(), port)
            }
            _ => (authority.to_string(), 80),
        };
        if host.is_empty() {
            return err(format!("{url}: no host"));
        }
        Ok(Url {
            host,
            port,
            path: path.to_string(),
        })
    }

    /// The same server with another path.
    pub fn with_path(&self, path: &str) -> Url {
        Url {
            path: path.to_string(),
            ..self.clone()
        }
    }

    pub fn display(&self) -> String {
        format!("http://{}:{}{}", self.host, self.port, self.path)
    }
}

/// `GET url`; returns the body of a 200 answer, an error naming the URL otherwise.
pub fn get(url: &Url, timeout: Duration) -> Result<String, DoctorError> {
    let shown = url.display();
    let addr = (url.host.as_str(), url.port)
        .to_socket_addrs()
        .map_err(|e| DoctorError(format!("{shown}: cannot resolve host: {e}")))?
        .next()
        .ok_or_else(|| DoctorError(format!("{shown}: host has no address")))?;
    let mut s = TcpStream::connect_timeout(&addr, timeout)
        .map_err(|e| DoctorError(format!("{shown}: cannot connect: {e}")))?;
    let _ = s.set_read_timeout(Some(timeout));
    let _ = s.set_write_timeout(Some(timeout));
    let req = format!(
        "GET {} HTTP/1.1\r\nHost: {}:{}\r\nAccept: text/plain, application/json\r\nUser-Agent: vllm-twin-doctor\r\nConnection: close\r\n\r\n",
        url.path, url.host, url.port
    );
    s.write_all(req.as_bytes())
        .map_err(|e| DoctorError(format!("{shown}: write failed: {e}")))?;
    let mut raw = Vec::new();
    s.take(MAX_BODY_BYTES as u64 + 65536)
        .read_to_end(&mut raw)
        .map_err(|e| DoctorError(format!("{shown}: read failed: {e}")))?;
    let head_end = find(&raw, b"\r\n\r\n")
        .ok_or_else(|| DoctorError(format!("{shown}: not an HTTP response")))?;
    let head = String::from_utf8_lossy(&raw[..head_end]).to_string();
    let body = &raw[head_end + 4..];
    let status_line = head.lines().next().unwrap_or("");
    let code: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| DoctorError(format!("{shown}: bad status line {status_line:?}")))?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let body = if chunked {
        dechunk(body).ok_or_else(|| DoctorError(format!("{shown}: bad chunked body")))?
    } else {
        body.to_vec()
    };
    if body.len() > MAX_BODY_BYTES {
        return err(format!("{shown}: body over {MAX_BODY_BYTES} bytes"));
    }
    let text = String::from_utf8_lossy(&body).to_string();
    if code != 200 {
        let snippet: String = text.chars().take(200).collect();
        return err(format!("{shown}: HTTP {code}: {snippet}"));
    }
    Ok(text)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn dechunk(mut b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = find(b, b"\r\n")?;
        let size_str = std::str::from_utf8(&b[..eol]).ok()?;
        let size = usize::from_str_radix(size_str.split(';').next()?.trim(), 16).ok()?;
        b = &b[eol + 2..];
        if size == 0 {
            return Some(out);
        }
        if b.len() < size {
            return None;
        }
        out.extend_from_slice(&b[..size]);
        b = b.get(size + 2..)?;
    }
}

/// Percent-encoding for a query parameter value.
pub fn encode_query(v: &str) -> String {
    let mut out = String::with_capacity(v.len() * 3);
    for b in v.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = Url::parse("http://h:8000/metrics").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("h", 8000, "/metrics")
        );
        let u = Url::parse("http://h").unwrap();
        assert_eq!((u.port, u.path.as_str()), (80, "/"));
        assert!(Url::parse("https://h/metrics").is_err());
        assert!(Url::parse("h:1/x").is_err());
        assert!(Url::parse("http://h:x/").is_err());
    }

    #[test]
    fn chunks() {
        assert_eq!(
            dechunk(b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n").unwrap(),
            b"abcde"
        );
        assert!(dechunk(b"9\r\nab").is_none());
        assert_eq!(encode_query("a b{c=\"d\"}"), "a%20b%7Bc%3D%22d%22%7D");
    }
}
