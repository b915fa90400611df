//! `vllm-twin sandbox [--host 127.0.0.1] [--port 8080]`.

use std::process::ExitCode;

/// `vllm-twin sandbox`'s flags.
#[derive(clap::Parser, Debug, PartialEq)]
#[command(
    name = "vllm-twin sandbox",
    no_binary_name = true,
    about = "Serves the interactive parameter→metric simulator: open the printed URL in a browser.\n\
             Everything (page, scripts, styles) is embedded; nothing is fetched from the network."
)]
struct Args {
    /// Address to listen on (use 0.0.0.0 to share on a LAN).
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port (0 picks a free one).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// A profile from `vllm-twin calibrate`: every run is priced with the deployment's
    /// fitted cost model (the page's commands carry it).
    #[arg(long, value_name = "FILE")]
    calibration: Option<String>,
}

/// `Ok(None)`: help was asked for (printed by the caller).
fn parse(args: &[String]) -> Result<Option<Args>, clap::Error> {
    use clap::Parser;
    match Args::try_parse_from(args) {
        Ok(a) => Ok(Some(a)),
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp => Ok(None),
        Err(e) => Err(e),
    }
}

/// `sandbox`'s clap command (shell completions and man pages are made from it).
pub fn sandbox_command() -> clap::Command {
    <Args as clap::CommandFactory>::command()
}

fn usage() -> String {
    <Args as clap::CommandFactory>::command()
        .render_help()
        .to_string()
}

/// `vllm-twin sandbox [--host 127.0.0.1] [--port 8080]`.
pub fn sandbox_main(args: &[String]) -> ExitCode {
    let a = match parse(args) {
        Ok(Some(a)) => a,
        Ok(None) => {
            print!("{}", usage());
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // clap's message names the argument and suggests the closest one.
            eprint!("{}", e.render());
            return ExitCode::from(2);
        }
    };
    let calibration = match a.calibration.as_deref().map(crate::runs::Calibration::load) {
        None => None,
        Some(Ok(c)) => Some(c),
        Some(Err(e)) => {
            eprintln!("error: {e}");
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
        if let Some(c) = &calibration {
            println!(
                "every run is priced with the calibration profile {}",
                c.path
            );
        }
        match crate::server::serve(listener, calibration, true).await {
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
                port: 9000,
                calibration: None,
            }
        );
        let e = parse(&s(&["--port", "x"])).unwrap_err().to_string();
        assert!(e.contains("--port"), "{e}");
        let e = parse(&s(&["--bogus"])).unwrap_err().to_string();
        assert!(e.contains("--bogus"), "{e}");
        let e = parse(&s(&["--prot", "1"])).unwrap_err().to_string();
        assert!(e.contains("--port"), "a typo gets a suggestion: {e}");
        assert!(parse(&s(&["--help"])).unwrap().is_none());
        assert!(usage().contains("--host"));
    }
}
