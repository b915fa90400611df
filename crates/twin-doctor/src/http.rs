//! The doctor's HTTP client (reqwest, blocking, rustls): `/metrics`, `/version`, `/v1/models`
//! and Prometheus' `/api/v1/*`, over http or https, with the authentication production
//! Prometheus and vLLM sit behind (basic auth, bearer token, a private CA). Bodies are capped
//! so a wrong URL cannot exhaust memory.

use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

use crate::{err, DoctorError};

/// The largest body the doctor reads (a big DP deployment's scrape is a few MB; a
/// Prometheus range query over many series can be tens of MB).
pub const MAX_BODY_BYTES: usize = 256 << 20;

/// A parsed `http(s)://[user[:password]@]host[:port]/path?query` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    inner: reqwest::Url,
}

impl Url {
    pub fn parse(url: &str) -> Result<Url, DoctorError> {
        let inner = reqwest::Url::parse(url).map_err(|e| DoctorError(format!("{url}: {e}")))?;
        if !matches!(inner.scheme(), "http" | "https") {
            return err(format!("{url}: not an http:// or https:// URL"));
        }
        if inner.host_str().is_none_or(str::is_empty) {
            return err(format!("{url}: no host"));
        }
        Ok(Url { inner })
    }

    /// The same server (and credentials) with another path and query.
    pub fn with_path(&self, path_and_query: &str) -> Url {
        let mut inner = self.inner.clone();
        let (path, query) = match path_and_query.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (path_and_query, None),
        };
        inner.set_path(path);
        inner.set_query(query);
        Url { inner }
    }

    pub fn host(&self) -> &str {
        self.inner.host_str().unwrap_or_default()
    }

    pub fn port(&self) -> u16 {
        self.inner.port_or_known_default().unwrap_or(80)
    }

    /// Path and query, starting with `/`.
    pub fn path(&self) -> String {
        match self.inner.query() {
            Some(q) => format!("{}?{q}", self.inner.path()),
            None => self.inner.path().to_string(),
        }
    }

    /// The URL as shown in messages: never with its password.
    pub fn display(&self) -> String {
        let mut shown = self.inner.clone();
        if shown.password().is_some() {
            let _ = shown.set_password(Some("***"));
        }
        shown.to_string()
    }
}

/// How to reach the servers: timeouts, TLS trust and credentials (from doctor's flags).
#[derive(Clone, Debug, Default)]
pub struct HttpOptions {
    pub timeout: Duration,
    /// Extra root certificate (PEM) trusted besides the public roots: a cluster's private CA.
    pub ca_cert: Option<PathBuf>,
    /// Accept any server certificate (self-signed test setups only).
    pub insecure_skip_tls_verify: bool,
    pub basic_auth_user: Option<String>,
    /// The basic-auth password, read from a file so it stays off the command line.
    pub basic_auth_password_file: Option<PathBuf>,
    /// A bearer token, read from a file (a Kubernetes service-account token, say).
    pub bearer_token_file: Option<PathBuf>,
}

#[derive(Clone, Debug)]
enum Auth {
    None,
    Basic { user: String, password: String },
    Bearer(String),
}

/// A configured client; cheap to share by reference.
#[derive(Clone, Debug)]
pub struct HttpClient {
    client: reqwest::blocking::Client,
    auth: Auth,
}

fn read_secret(flag: &str, path: &PathBuf) -> Result<String, DoctorError> {
    let s = std::fs::read_to_string(path)
        .map_err(|e| DoctorError(format!("{flag} {}: {e}", path.display())))?;
    // Secret files usually end with a newline the secret does not contain.
    Ok(s.trim_end_matches(['\r', '\n']).to_string())
}

impl HttpClient {
    pub fn new(o: &HttpOptions) -> Result<HttpClient, DoctorError> {
        let mut b = reqwest::blocking::Client::builder()
            .timeout(o.timeout)
            .connect_timeout(o.timeout)
            .user_agent("vllm-twin-doctor")
            .use_rustls_tls();
        if let Some(path) = &o.ca_cert {
            let pem = std::fs::read(path)
                .map_err(|e| DoctorError(format!("--ca-cert {}: {e}", path.display())))?;
            let cert = reqwest::Certificate::from_pem(&pem).map_err(|e| {
                DoctorError(format!(
                    "--ca-cert {}: not a PEM certificate: {e}",
                    path.display()
                ))
            })?;
            b = b.add_root_certificate(cert);
        }
        if o.insecure_skip_tls_verify {
            b = b.danger_accept_invalid_certs(true);
        }
        let client = b
            .build()
            .map_err(|e| DoctorError(format!("cannot build the HTTP client: {e}")))?;
        let auth = match (
            &o.basic_auth_user,
            &o.basic_auth_password_file,
            &o.bearer_token_file,
        ) {
            (Some(_), _, Some(_)) => {
                return err("--bearer-token-file and --basic-auth-user exclude each other")
            }
            (None, Some(_), _) => return err("--basic-auth-password-file needs --basic-auth-user"),
            (Some(user), pw, None) => Auth::Basic {
                user: user.clone(),
                password: match pw {
                    Some(p) => read_secret("--basic-auth-password-file", p)?,
                    None => String::new(),
                },
            },
            (None, None, Some(t)) => Auth::Bearer(read_secret("--bearer-token-file", t)?),
            (None, None, None) => Auth::None,
        };
        Ok(HttpClient { client, auth })
    }

    /// `GET url`; returns the body of a 200 answer, an error naming the URL (never its
    /// password) and what failed otherwise.
    pub fn get(&self, url: &Url) -> Result<String, DoctorError> {
        let shown = url.display();
        let mut target = url.inner.clone();
        // Credentials in the URL (user:password@host) are basic auth, as Prometheus reads them.
        let url_auth = (!target.username().is_empty()).then(|| {
            (
                target.username().to_string(),
                target.password().map(str::to_string),
            )
        });
        let _ = target.set_username("");
        let _ = target.set_password(None);
        let mut req = self
            .client
            .get(target)
            .header("Accept", "text/plain, application/json");
        req = match (&self.auth, url_auth) {
            (_, Some((user, password))) => req.basic_auth(user, password),
            (Auth::Basic { user, password }, None) => req.basic_auth(user, Some(password)),
            (Auth::Bearer(token), None) => req.bearer_auth(token),
            (Auth::None, None) => req,
        };
        let resp = req.send().map_err(|e| DoctorError(describe(&shown, &e)))?;
        let status = resp.status();
        if resp
            .content_length()
            .is_some_and(|n| n > MAX_BODY_BYTES as u64)
        {
            return err(format!("{shown}: body over {MAX_BODY_BYTES} bytes"));
        }
        let mut body = Vec::new();
        resp.take(MAX_BODY_BYTES as u64 + 1)
            .read_to_end(&mut body)
            .map_err(|e| DoctorError(format!("{shown}: read failed: {e}")))?;
        if body.len() > MAX_BODY_BYTES {
            return err(format!("{shown}: body over {MAX_BODY_BYTES} bytes"));
        }
        let text = String::from_utf8_lossy(&body).into_owned();
        if status.as_u16() == 401 || status.as_u16() == 403 {
            return err(format!(
                "{shown}: HTTP {status}: the server refused the credentials (see --basic-auth-user, --bearer-token-file)"
            ));
        }
        if status.as_u16() != 200 {
            let snippet: String = text.chars().take(200).collect();
            return err(format!("{shown}: HTTP {}: {snippet}", status.as_u16()));
        }
        Ok(text)
    }
}

/// What went wrong, in the terms a user can act on (DNS, connect, TLS, timeout).
fn describe(shown: &str, e: &reqwest::Error) -> String {
    let mut causes = Vec::new();
    let mut src: Option<&dyn std::error::Error> = std::error::Error::source(e);
    while let Some(s) = src {
        causes.push(s.to_string());
        src = s.source();
    }
    let chain = causes.join(": ");
    let lower = chain.to_ascii_lowercase();
    let what = if e.is_timeout() {
        "timed out (see --timeout)"
    } else if lower.contains("certificate") || lower.contains("tls") || lower.contains("handshake")
    {
        "TLS failed (see --ca-cert, --insecure-skip-tls-verify)"
    } else if lower.contains("dns") || lower.contains("resolve") || lower.contains("lookup") {
        "cannot resolve host"
    } else if e.is_connect() {
        "cannot connect"
    } else {
        "request failed"
    };
    format!("{shown}: {what}: {chain}")
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
            (u.host(), u.port(), u.path().as_str()),
            ("h", 8000, "/metrics")
        );
        let u = Url::parse("http://h").unwrap();
        assert_eq!((u.port(), u.path().as_str()), (80, "/"));
        let u = Url::parse("https://h/metrics").unwrap();
        assert_eq!(u.port(), 443);
        assert_eq!(
            u.with_path("/api/v1/query?query=up").path(),
            "/api/v1/query?query=up"
        );
        assert!(Url::parse("h:1/x").is_err());
        assert!(Url::parse("ftp://h/x").is_err());
        assert!(Url::parse("http://h:x/").is_err());
    }

    #[test]
    fn passwords_never_shown() {
        let u = Url::parse("https://admin:s3cret@prom:9090/").unwrap();
        assert!(!u.display().contains("s3cret"), "{}", u.display());
        assert!(u.display().contains("admin"));
    }

    #[test]
    fn query_encoding() {
        assert_eq!(encode_query("a b{c=\"d\"}"), "a%20b%7Bc%3D%22d%22%7D");
    }
}
