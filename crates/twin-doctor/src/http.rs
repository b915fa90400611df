//! The doctor's HTTP client (reqwest, blocking, rustls): `/metrics`, `/version`, `/v1/models`
//! and Prometheus' `/api/v1/*`, over http or https, with the authentication production
//! Prometheus and vLLM sit behind (basic auth, bearer token, a private CA). Bodies are capped
//! so a wrong URL cannot exhaust memory.

use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

/// The largest body the doctor reads (a big DP deployment's scrape is a few MB; a
/// Prometheus range query over many series can be tens of MB).
pub const MAX_BODY_BYTES: usize = 256 << 20;

/// Per request, connect to last body byte, unless `--timeout` says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// How much of a non-200 body an error quotes (Prometheus and vLLM put the reason there).
const ERROR_BODY_CHARS: usize = 200;

/// What failed while setting up the client or fetching one URL. Every variant about a
/// request names the URL (never its password); the cause, where there is one, is the
/// error's source.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("{url}: not a URL")]
    BadUrl {
        url: String,
        #[source]
        source: url::ParseError,
    },
    #[error("{url}: not an http:// or https:// URL")]
    NotHttp { url: String },
    #[error("{url}: no host")]
    NoHost { url: String },
    #[error("{flag} {}: cannot read", path.display())]
    ReadFile {
        flag: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--ca-cert {}: not a PEM certificate", path.display())]
    BadCaCert {
        path: PathBuf,
        #[source]
        source: reqwest::Error,
    },
    #[error("--bearer-token-file and --basic-auth-user exclude each other")]
    AuthConflict,
    #[error("--basic-auth-password-file needs --basic-auth-user")]
    PasswordWithoutUser,
    #[error("cannot build the HTTP client")]
    Client(#[source] reqwest::Error),
    #[error("{url}: cannot resolve host")]
    Dns {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("{url}: cannot connect")]
    Connect {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("{url}: TLS failed (see --ca-cert, --insecure-skip-tls-verify)")]
    Tls {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("{url}: timed out after {timeout_s}s (see --timeout)")]
    Timeout {
        url: String,
        timeout_s: f64,
        /// `None` when the whole-read deadline passed between reads of a body.
        #[source]
        source: Option<reqwest::Error>,
    },
    #[error("{url}: request failed")]
    Request {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("{url}: HTTP {status}: the server refused the credentials (see --basic-auth-user, --basic-auth-password-file, --bearer-token-file)")]
    Unauthorized { url: String, status: u16 },
    #[error("{url}: HTTP {status}: {body_start}")]
    Status {
        url: String,
        status: u16,
        /// The first characters of the body: the server's reason.
        body_start: String,
    },
    #[error("{url}: body over {limit_bytes} bytes")]
    TooBig { url: String, limit_bytes: usize },
    #[error("{url}: reading the body failed")]
    Body {
        url: String,
        #[source]
        source: std::io::Error,
    },
}

/// A parsed `http(s)://[user[:password]@]host[:port]/path?query` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    inner: reqwest::Url,
}

impl Url {
    pub fn parse(url: &str) -> Result<Url, HttpError> {
        let inner = reqwest::Url::parse(url).map_err(|source| HttpError::BadUrl {
            url: mask_password(url),
            source,
        })?;
        let u = Url { inner };
        if !matches!(u.inner.scheme(), "http" | "https") {
            return Err(HttpError::NotHttp { url: u.display() });
        }
        if u.inner.host_str().is_none_or(str::is_empty) {
            return Err(HttpError::NoHost { url: u.display() });
        }
        Ok(u)
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

/// `scheme://user:secret@rest` → `scheme://user:***@rest`, for a URL that did not parse.
fn mask_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_string();
    };
    match rest[..at].split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***{}", &rest[at..]),
        None => url.to_string(),
    }
}

/// How to reach the servers: timeouts, TLS trust and credentials (from doctor's flags).
#[derive(Clone, Debug)]
pub struct HttpOptions {
    pub timeout: Duration,
    /// Bodies past this are refused (tests lower it; the CLI keeps [`MAX_BODY_BYTES`]).
    pub max_body_bytes: usize,
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

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            timeout: DEFAULT_TIMEOUT,
            max_body_bytes: MAX_BODY_BYTES,
            ca_cert: None,
            insecure_skip_tls_verify: false,
            basic_auth_user: None,
            basic_auth_password_file: None,
            bearer_token_file: None,
        }
    }
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
    timeout: Duration,
    max_body_bytes: usize,
}

fn read_secret(flag: &'static str, path: &PathBuf) -> Result<String, HttpError> {
    let s = std::fs::read_to_string(path).map_err(|source| HttpError::ReadFile {
        flag,
        path: path.clone(),
        source,
    })?;
    // Secret files usually end with a newline the secret does not contain.
    Ok(s.trim_end_matches(['\r', '\n']).to_string())
}

impl HttpClient {
    pub fn new(o: &HttpOptions) -> Result<HttpClient, HttpError> {
        let mut b = reqwest::blocking::Client::builder()
            .timeout(o.timeout)
            .connect_timeout(o.timeout)
            .user_agent("vllm-twin-doctor")
            .use_rustls_tls();
        if let Some(path) = &o.ca_cert {
            let pem = std::fs::read(path).map_err(|source| HttpError::ReadFile {
                flag: "--ca-cert",
                path: path.clone(),
                source,
            })?;
            let cert =
                reqwest::Certificate::from_pem(&pem).map_err(|source| HttpError::BadCaCert {
                    path: path.clone(),
                    source,
                })?;
            b = b.add_root_certificate(cert);
        }
        if o.insecure_skip_tls_verify {
            b = b.danger_accept_invalid_certs(true);
        }
        let client = b.build().map_err(HttpError::Client)?;
        let auth = match (
            &o.basic_auth_user,
            &o.basic_auth_password_file,
            &o.bearer_token_file,
        ) {
            (Some(_), _, Some(_)) => return Err(HttpError::AuthConflict),
            (None, Some(_), _) => return Err(HttpError::PasswordWithoutUser),
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
        Ok(HttpClient {
            client,
            auth,
            timeout: o.timeout,
            max_body_bytes: o.max_body_bytes,
        })
    }

    /// `GET url`; returns the body of a 200 answer, an error naming the URL (never its
    /// password) and what failed otherwise.
    pub fn get(&self, url: &Url) -> Result<String, HttpError> {
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
        // --timeout bounds the whole fetch: a server dripping its body a byte at a time
        // passes every per-read timeout, so the deadline is checked between reads too.
        let started = std::time::Instant::now();
        let resp = req
            .send()
            .map_err(|e| self.classify(shown.clone(), e.without_url()))?;
        let status = resp.status().as_u16();
        let too_big = || HttpError::TooBig {
            url: shown.clone(),
            limit_bytes: self.max_body_bytes,
        };
        if resp
            .content_length()
            .is_some_and(|n| n > self.max_body_bytes as u64)
        {
            return Err(too_big());
        }
        let mut body = Vec::new();
        let mut reader = resp.take(self.max_body_bytes as u64 + 1);
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            if started.elapsed() > self.timeout {
                return Err(HttpError::Timeout {
                    url: shown,
                    timeout_s: self.timeout.as_secs_f64(),
                    source: None,
                });
            }
            match reader.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => body.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(HttpError::Body {
                        url: shown.clone(),
                        source,
                    })
                }
            }
        }
        if body.len() > self.max_body_bytes {
            return Err(too_big());
        }
        let text = String::from_utf8_lossy(&body).into_owned();
        match status {
            200 => Ok(text),
            401 | 403 => Err(HttpError::Unauthorized { url: shown, status }),
            _ => Err(HttpError::Status {
                url: shown,
                status,
                body_start: text.chars().take(ERROR_BODY_CHARS).collect(),
            }),
        }
    }

    /// What went wrong, in the terms a user can act on (DNS, connect, TLS, timeout).
    fn classify(&self, url: String, source: reqwest::Error) -> HttpError {
        if source.is_timeout() {
            return HttpError::Timeout {
                url,
                timeout_s: self.timeout.as_secs_f64(),
                source: Some(source),
            };
        }
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&source);
        let (mut tls, mut dns) = (false, false);
        while let Some(c) = cause {
            tls |= is_rustls(c);
            // hyper-util's connector error type is private; its resolver failures read so.
            dns |= c.to_string() == "dns error";
            cause = c.source();
        }
        if tls {
            HttpError::Tls { url, source }
        } else if dns {
            HttpError::Dns { url, source }
        } else if source.is_connect() {
            HttpError::Connect { url, source }
        } else {
            HttpError::Request { url, source }
        }
    }
}

/// A rustls error, possibly inside io::Errors: rustls and tokio-rustls each wrap it in
/// one, and io::Error's `source()` skips what it wraps, so the layers are opened by hand.
fn is_rustls(mut e: &(dyn std::error::Error + 'static)) -> bool {
    loop {
        if e.is::<rustls::Error>() {
            return true;
        }
        match e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => e = inner,
            None => return false,
        }
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
        assert!(matches!(
            Url::parse("h:1/x"),
            Err(HttpError::NotHttp { .. } | HttpError::BadUrl { .. })
        ));
        assert!(matches!(
            Url::parse("ftp://h/x"),
            Err(HttpError::NotHttp { .. })
        ));
        assert!(matches!(
            Url::parse("http://h:x/"),
            Err(HttpError::BadUrl { .. })
        ));
    }

    #[test]
    fn passwords_never_shown() {
        let u = Url::parse("https://admin:s3cret@prom:9090/").unwrap();
        assert!(!u.display().contains("s3cret"), "{}", u.display());
        assert!(u.display().contains("admin"));
        // Nor when the URL does not parse.
        let e = Url::parse("https://admin:s3cret@prom:bad/").unwrap_err();
        assert!(!e.to_string().contains("s3cret"), "{e}");
        assert!(e.to_string().contains("admin:***@prom:bad"), "{e}");
        assert_eq!(mask_password("http://h/a@b"), "http://h/a@b");
        assert_eq!(mask_password("http://u@h/"), "http://u@h/");
    }

    #[test]
    fn query_encoding() {
        assert_eq!(encode_query("a b{c=\"d\"}"), "a%20b%7Bc%3D%22d%22%7D");
    }

    #[test]
    fn auth_flags_are_checked() {
        let o = HttpOptions {
            basic_auth_user: Some("u".into()),
            bearer_token_file: Some("/t".into()),
            ..Default::default()
        };
        assert!(matches!(HttpClient::new(&o), Err(HttpError::AuthConflict)));
        let o = HttpOptions {
            basic_auth_password_file: Some("/p".into()),
            ..Default::default()
        };
        assert!(matches!(
            HttpClient::new(&o),
            Err(HttpError::PasswordWithoutUser)
        ));
        let o = HttpOptions {
            bearer_token_file: Some("/nonexistent/token".into()),
            ..Default::default()
        };
        let e = HttpClient::new(&o).unwrap_err();
        assert!(
            e.to_string() == "--bearer-token-file /nonexistent/token: cannot read",
            "{e}"
        );
    }
}
