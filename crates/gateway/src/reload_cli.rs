//! `oncerpc reload`: ask a running `oncerpc serve` to reload its configuration, on hosts
//! without systemd (`systemctl reload` sends the same `SIGHUP`). The process is named by its
//! pid file (`serve --pid-file`) or its pid; with `--healthz URL` the command waits (bounded)
//! for the outcome that `/healthz` shows and exits non-zero when the reload failed. No
//! endpoint is involved in the reload itself: only a user allowed to signal the process can
//! reload it.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["pid_file", "pid"])))]
pub struct ReloadArgs {
    /// The pid file `oncerpc serve --pid-file` wrote.
    #[arg(long)]
    pid_file: Option<PathBuf>,
    /// The pid of the `oncerpc serve` process.
    #[arg(long)]
    pid: Option<u32>,
    /// The gateway's base URL (e.g. http://127.0.0.1:8080): wait for the outcome on its
    /// `/healthz` and exit 1 if the new configuration was refused.
    #[arg(long)]
    healthz: Option<String>,
    /// How long to wait for the outcome.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

pub fn reload(args: ReloadArgs) -> ExitCode {
    let pid = match (&args.pid_file, args.pid) {
        (_, Some(pid)) => pid,
        (Some(file), None) => match std::fs::read_to_string(file) {
            Ok(text) => match text.trim().parse::<u32>() {
                Ok(pid) => pid,
                Err(_) => {
                    eprintln!("oncerpc: {}: not a pid: {:?}", file.display(), text.trim());
                    return ExitCode::from(2);
                }
            },
            Err(e) => {
                eprintln!("oncerpc: cannot read {}: {e}", file.display());
                return ExitCode::from(2);
            }
        },
        (None, None) => unreachable!("clap requires one of them"),
    };
    let Some(url) = args.healthz else {
        return match hangup(pid) {
            Ok(()) => {
                eprintln!(
                    "oncerpc: asked process {pid} to reload; the outcome is in its log and on /healthz"
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("oncerpc: cannot signal process {pid}: {e}");
                ExitCode::FAILURE
            }
        };
    };
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("oncerpc: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(async move {
        let client = match oncerpc::upstream::client(&Default::default()) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("oncerpc: {e}");
                return ExitCode::FAILURE;
            }
        };
        let url = format!("{}/healthz", url.trim_end_matches('/'));
        let before = last_reload(&client, &url).await;
        if let Err(e) = hangup(pid) {
            eprintln!("oncerpc: cannot signal process {pid}: {e}");
            return ExitCode::FAILURE;
        }
        let deadline = tokio::time::Instant::now() + args.timeout;
        while tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let now = last_reload(&client, &url).await;
            if now.is_some() && now != before {
                let now = now.unwrap_or_default();
                println!("{now}");
                return if now["outcome"] == "ok" { ExitCode::SUCCESS } else { ExitCode::from(1) };
            }
        }
        eprintln!("oncerpc: {url} showed no new reload within {:?}", args.timeout);
        ExitCode::FAILURE
    })
}

/// `config.last_reload` of `/healthz`, when it answers with one.
async fn last_reload(client: &reqwest::Client, url: &str) -> Option<serde_json::Value> {
    let resp = client.get(url).timeout(Duration::from_secs(2)).send().await.ok()?;
    let body: serde_json::Value = resp.json().await.ok()?;
    body.get("config")?.get("last_reload").cloned()
}

#[cfg(unix)]
fn hangup(pid: u32) -> std::io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| std::io::Error::other("pid out of range"))?;
    if pid <= 0 {
        return Err(std::io::Error::other("not a process id"));
    }
    // SAFETY: kill(2) with a positive pid and a valid signal number has no memory effects.
    if unsafe { libc::kill(pid, libc::SIGHUP) } == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

#[cfg(not(unix))]
fn hangup(_pid: u32) -> std::io::Result<()> {
    Err(std::io::Error::other("signals are Unix only"))
}
