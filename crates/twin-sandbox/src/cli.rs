//! `vllm-twin sandbox [--host 127.0.0.1] [--port 8080]`.

use std::process::ExitCode;

const USAGE: &str = "usage: vllm-twin sandbox [--host 127.0.0.1] [--port 8080]

Serves the interactive parameter→metric simulator: open the printed URL in a browser.
Everything (page, scripts, styles) is embedded; nothing is fetched from the network.
  --host HOST   address to listen on (default 127.0.0.1; use 0.0.0.0 to share on a LAN)
  --port PORT   port (default 8080; 0 picks a free one)
";

#[derive(Debug, PartialEq)]
struct Args {
    host: String,
    port: u16,
}

fn parse(args: &[String]) -> Result<Option<Args>, String> {
    let mut a = Args {
        host: "127.0.0.1".into(),
        port: 8080,
    };
    let mut i = 0;
    while i < args.len() {
        let raw = args[i].as_str();
        i += 1;
        let (name, inline) = match raw.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (raw, None),
        };
        let mut value = |flag: &str| -> Result<String, String> {
            if let Some(v) = inline.clone() {
                return Ok(v);
            }
            let v = args
                .get(i)
                .cloned()
                .ok_or_else(|| format!("{flag} expects a value"))?;
            i += 1;
            Ok(v)
        };
        match name {
            "-h" | "--help" => return Ok(None),
            "--host" => a.host = value("--host")?,
            "--port" => {
                let v = value("--port")?;
                a.port = v
                    .parse()
                    .map_err(|_| format!("--port {v:?}: expected a port number 0-65535"))?;
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Some(a))
}

/// `vllm-twin sandbox [--host 127.0.0.1] [--port 8080]`.
pub fn sandbox_main(args: &[String]) -> ExitCode {
    let a = match parse(args) {
        Ok(Some(a)) => a,
        Ok(None) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    rt.block_on(async move {
        let addr = format!("{}:{}", a.host, a.port);
        let listener = match tokio::net::TcpListener::bind(&addr).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("error: cannot listen on {addr}: {e}");
                return ExitCode::from(1);
            }
        };
        let shown = listener.local_addr().map(|l| l.to_string()).unwrap_or(addr);
        println!("vllm-twin sandbox: open http://{shown}/ (ctrl-c to stop)");
        match crate::server::serve(listener, true).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(1)
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn parses_host_and_port() {
        let a = parse(&s(&["--host", "0.0.0.0", "--port=9000"]))
            .unwrap()
            .unwrap();
        assert_eq!(
            a,
            Args {
                host: "0.0.0.0".into(),
                port: 9000
            }
        );
        assert!(parse(&s(&["--port", "x"])).unwrap_err().contains("--port"));
        assert!(parse(&s(&["--bogus"])).unwrap_err().contains("--bogus"));
        assert!(parse(&s(&["--help"])).unwrap().is_none());
    }
}
