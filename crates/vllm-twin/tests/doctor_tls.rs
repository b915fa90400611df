//! The doctor against a production-shaped Prometheus: Debian's Prometheus serving a
//! backfilled simulation over HTTPS (a certificate from a private CA made here with rcgen)
//! behind basic auth (a bcrypt hash in its web config). The doctor reads it with the CA and
//! the password from a file (or in the URL); a wrong password and a missing CA are refused
//! with errors that say which.

mod common;

use common::{free_port, need, Killer, EPOCH};
use std::net::TcpStream;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

fn twin(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vllm-twin"))
        .args(args)
        .output()
        .expect("run vllm-twin")
}

#[test]
fn doctor_reads_prometheus_over_tls_with_basic_auth() {
    let promtool = need("promtool");
    let prometheus = need("prometheus");
    let dir = std::env::temp_dir().join(format!("twin-doctor-tls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let p = |name: &str| dir.join(name).display().to_string();

    // A short simulated run, backfilled into a TSDB.
    let out = twin(&[
        "simulate",
        "--num-requests",
        "600",
        "--request-rate",
        "10",
        "--seed",
        "5",
        "--quiet",
        "--scrape-interval",
        "15s",
        "--scrapes-out",
        &p("scrapes.om"),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let st = Command::new(&promtool)
        .args([
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            &p("scrapes.om"),
            &p("tsdb"),
        ])
        .stdout(Stdio::null())
        .status()
        .expect("promtool");
    assert!(st.success(), "promtool could not backfill");

    // A private CA and a server certificate for 127.0.0.1 signed by it.
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "vllm-twin test CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &ca_cert, &ca_key)
        .unwrap();
    std::fs::write(p("ca.pem"), ca_cert.pem()).unwrap();
    std::fs::write(p("server.pem"), leaf.pem()).unwrap();
    std::fs::write(p("server.key"), leaf_key.serialize_pem()).unwrap();
    let hash = bcrypt::hash("s3cret-pw", 4).unwrap();
    std::fs::write(
        p("web.yml"),
        format!(
            "tls_server_config:\n  cert_file: {}\n  key_file: {}\nbasic_auth_users:\n  twin: '{hash}'\n",
            p("server.pem"),
            p("server.key")
        ),
    )
    .unwrap();
    std::fs::write(p("password"), "s3cret-pw\n").unwrap();
    std::fs::write(p("wrong"), "not-it\n").unwrap();
    std::fs::write(
        p("prometheus.yml"),
        "global:\n  scrape_interval: 15s\nscrape_configs: []\n",
    )
    .unwrap();

    let port = free_port();
    let child = Command::new(&prometheus)
        .arg(format!("--config.file={}", p("prometheus.yml")))
        .arg(format!("--storage.tsdb.path={}", p("tsdb")))
        .arg("--storage.tsdb.retention.time=100y")
        .arg(format!("--web.config.file={}", p("web.yml")))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start prometheus");
    let _guard = Killer(child);

    let url = format!("https://127.0.0.1:{port}");
    // The run's scrapes span well under ten minutes from EPOCH.
    let end = format!("{}", EPOCH + 600.0);
    let doctor = |extra: &[&str]| {
        let mut args = vec![
            "doctor",
            "--prometheus",
            &url,
            "--since",
            "15m",
            "--prometheus-end",
            &end,
            "--json",
            "--timeout",
            "5s",
        ];
        args.extend_from_slice(extra);
        twin(&args)
    };
    let ca = p("ca.pem");
    let pw = p("password");
    let good: [&str; 6] = [
        "--ca-cert",
        &ca,
        "--basic-auth-user",
        "twin",
        "--basic-auth-password-file",
        &pw,
    ];
    // Wait until Prometheus listens and has loaded its TSDB (it answers 503 before).
    let t0 = Instant::now();
    let ok = loop {
        let o = doctor(&good);
        if o.status.code() != Some(3) {
            break o;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the doctor never read Prometheus over TLS: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        while TcpStream::connect(("127.0.0.1", port)).is_err()
            && t0.elapsed() < Duration::from_secs(60)
        {
            std::thread::sleep(Duration::from_millis(100));
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    eprintln!(
        "doctor read Prometheus over TLS after {:?}: {} bytes",
        t0.elapsed(),
        ok.stdout.len()
    );
    let report: serde_json::Value = serde_json::from_slice(&ok.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor --json: {e}: {}",
            String::from_utf8_lossy(&ok.stdout)
        )
    });
    let ok_scrapes = report["panels"][0]["num_scrapes"].clone();
    assert!(
        report["findings"].is_array(),
        "a diagnosis of the backfilled run: {report}"
    );
    assert!(
        report["source"]
            .as_str()
            .is_some_and(|s| s.starts_with(&format!("prometheus {url}"))),
        "{}",
        report["source"]
    );
    assert!(
        report["panels"][0]["num_scrapes"]
            .as_u64()
            .is_some_and(|n| n > 1),
        "the backfilled series came through the range query: {}",
        report["panels"][0]
    );
    assert!(
        !String::from_utf8_lossy(&ok.stdout).contains("s3cret-pw"),
        "the password never reaches the report"
    );

    // user:password@ in the URL, as Prometheus' own clients take it; never echoed.
    let with_creds = format!("https://twin:s3cret-pw@127.0.0.1:{port}");
    let o = twin(&[
        "doctor",
        "--prometheus",
        &with_creds,
        "--since",
        "15m",
        "--prometheus-end",
        &end,
        "--json",
        "--ca-cert",
        &ca,
    ]);
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_ne!(o.status.code(), Some(3), "{out}");
    assert!(!out.contains("s3cret-pw"), "{out}");
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        report["panels"][0]["num_scrapes"], ok_scrapes,
        "the same data with the credentials in the URL"
    );

    // A self-signed setup without the CA at hand.
    let o = doctor(&[
        "--insecure-skip-tls-verify",
        "--basic-auth-user",
        "twin",
        "--basic-auth-password-file",
        &pw,
    ]);
    assert_ne!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    let wrong_pw = p("wrong");
    let refused = doctor(&[
        "--ca-cert",
        &ca,
        "--basic-auth-user",
        "twin",
        "--basic-auth-password-file",
        &wrong_pw,
    ]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(3), "{err}");
    assert!(
        err.contains(&format!("{url}/api/v1/query_range"))
            && err.contains("HTTP 401: the server refused the credentials"),
        "a wrong password is named as such, with the URL: {err}"
    );
    assert!(!err.contains("not-it"), "{err}");

    let untrusted = doctor(&[
        "--basic-auth-user",
        "twin",
        "--basic-auth-password-file",
        &pw,
    ]);
    let err = String::from_utf8_lossy(&untrusted.stderr);
    assert_eq!(untrusted.status.code(), Some(3), "{err}");
    assert!(
        err.contains("TLS failed (see --ca-cert") && err.contains("invalid peer certificate"),
        "an unknown CA is named as a TLS failure: {err}"
    );

    // Plain http against the TLS port fails cleanly too (no panic, exit 3).
    let plain = twin(&[
        "doctor",
        "--prometheus",
        &format!("http://127.0.0.1:{port}"),
        "--prometheus-end",
        &end,
        "--timeout",
        "5s",
    ]);
    let err = String::from_utf8_lossy(&plain.stderr);
    assert_eq!(plain.status.code(), Some(3), "{err}");
    assert!(
        err.contains("HTTP 400"),
        "Prometheus' answer to http on its TLS port: {err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
