//! The doctor's HTTP client over real sockets: credentials reach the server as the flags
//! say, and each way a fetch fails is its own error naming the URL (a non-200, a refusal,
//! a body over the cap with or without Content-Length, a server that never answers).
//! TLS and a real server's basic auth are tested against Debian's Prometheus in
//! crates/vllm-twin/tests/doctor_tls.rs.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use twin_doctor::http::{HttpClient, HttpError, HttpOptions, Url};

/// A loopback server answering `n` connections: `answer` gets the request head (request
/// line and headers) and returns the raw bytes to send back. `None` sends nothing and
/// waits for the client to hang up.
fn serve(n: usize, answer: impl Fn(&str) -> Option<Vec<u8>> + Send + 'static) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in l.incoming().take(n) {
            let Ok(mut s) = stream else { continue };
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut head = String::new();
            loop {
                let mut line = String::new();
                if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                head.push_str(&line);
            }
            match answer(&head) {
                Some(bytes) => {
                    let _ = s.write_all(&bytes);
                }
                // Until the client gives up and closes its end.
                None => {
                    let _ = r.read_to_end(&mut Vec::new());
                }
            }
        }
    });
    port
}

fn response(status: u16, body: &str) -> Option<Vec<u8>> {
    Some(
        format!(
            "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

/// The request's Authorization header value, as the body of a 200.
fn echo_authorization(head: &str) -> Option<Vec<u8>> {
    let auth = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("authorization").then(|| v.trim())
        })
        .unwrap_or("none");
    response(200, auth)
}

fn url(port: u16, path: &str) -> Url {
    Url::parse(&format!("http://127.0.0.1:{port}{path}")).unwrap()
}

#[test]
fn credentials_reach_the_server() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let token = dir.join("doctor-http-token");
    // Token files end in a newline (kubectl, echo); the header must not.
    std::fs::write(&token, "tok-123\n").unwrap();
    let port = serve(3, echo_authorization);
    let bearer = HttpClient::new(&HttpOptions {
        bearer_token_file: Some(token),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(
        bearer.get(&url(port, "/metrics")).unwrap(),
        "Bearer tok-123"
    );

    let pw = dir.join("doctor-http-password");
    std::fs::write(&pw, "pw\n").unwrap();
    let basic = HttpClient::new(&HttpOptions {
        basic_auth_user: Some("twin".into()),
        basic_auth_password_file: Some(pw),
        ..Default::default()
    })
    .unwrap();
    // base64("twin:pw")
    assert_eq!(
        basic.get(&url(port, "/metrics")).unwrap(),
        "Basic dHdpbjpwdw=="
    );

    // user:password@ in the URL is basic auth and wins over the flags, as in Prometheus.
    let in_url = Url::parse(&format!("http://u:p@127.0.0.1:{port}/metrics")).unwrap();
    assert_eq!(basic.get(&in_url).unwrap(), "Basic dTpw");
}

#[test]
fn each_failure_is_named() {
    let client = HttpClient::new(&HttpOptions {
        max_body_bytes: 1000,
        timeout: Duration::from_millis(300),
        ..Default::default()
    })
    .unwrap();
    let big = "x".repeat(2000);
    let port = serve(6, move |head| {
        let path = head.split_whitespace().nth(1).unwrap_or("/");
        match path {
            "/missing" => response(404, "no such page"),
            "/refused" => response(401, "Unauthorized"),
            "/forbidden" => response(403, "Forbidden"),
            "/big" => response(200, &big),
            // No Content-Length: the cap must hold while reading.
            "/big-stream" => {
                Some(format!("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{big}").into_bytes())
            }
            _ => None,
        }
    });
    let shown = |path: &str| format!("http://127.0.0.1:{port}{path}");
    match client.get(&url(port, "/missing")).unwrap_err() {
        HttpError::Status {
            url,
            status: 404,
            body_start,
        } => assert_eq!(
            (url, body_start.as_str()),
            (shown("/missing"), "no such page")
        ),
        e => panic!("{e:?}"),
    }
    for (path, code) in [("/refused", 401), ("/forbidden", 403)] {
        let e = client.get(&url(port, path)).unwrap_err();
        assert!(
            matches!(&e, HttpError::Unauthorized { status, .. } if *status == code),
            "{e:?}"
        );
        assert!(
            e.to_string().starts_with(&format!(
                "{}: HTTP {code}: the server refused the credentials",
                shown(path)
            )),
            "{e}"
        );
    }
    for path in ["/big", "/big-stream"] {
        let e = client.get(&url(port, path)).unwrap_err();
        assert!(
            matches!(&e, HttpError::TooBig { limit_bytes: 1000, url } if *url == shown(path)),
            "{e:?}"
        );
    }
    let e = client.get(&url(port, "/silent")).unwrap_err();
    assert!(matches!(e, HttpError::Timeout { .. }), "{e:?}");
    assert!(e.to_string().contains("see --timeout"), "{e}");
}

#[test]
fn https_to_a_plain_http_server_is_a_tls_error() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        if let Ok((mut s, _)) = l.accept() {
            // The ClientHello is binary: answer the first bytes as a plain server would.
            let _ = s.read(&mut [0u8; 4096]);
            let _ = s.write_all(
                &response(400, "Client sent an HTTP request to an HTTPS server.").unwrap(),
            );
        }
    });
    let client = HttpClient::new(&HttpOptions::default()).unwrap();
    let u = Url::parse(&format!("https://127.0.0.1:{port}/metrics")).unwrap();
    let e = client.get(&u).unwrap_err();
    assert!(
        matches!(e, HttpError::Tls { .. }),
        "{}",
        twin_doctor::error_chain(&e)
    );
}

#[test]
fn timeout_bounds_the_whole_read_of_a_dripping_body() {
    // Headers at once, then one body byte every 100 ms: 1,000 bytes would take 100 s, so
    // only a timeout over the whole read (not per read) ends this fetch.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let Ok((mut s, _)) = l.accept() else { return };
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut line = String::new();
        while r.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
            line.clear();
        }
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n");
        for _ in 0..1000 {
            if s.write_all(b"#").is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    let client = HttpClient::new(&HttpOptions {
        timeout: Duration::from_millis(500),
        ..Default::default()
    })
    .unwrap();
    let e = client.get(&url(port, "/metrics")).unwrap_err();
    assert!(matches!(e, HttpError::Timeout { .. }), "{e:?}");
}
