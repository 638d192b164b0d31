//! A real `oncerpc serve` whose config file a test rewrites and reloads (`SIGHUP`, what
//! `systemctl reload` sends), and reads the outcome of on `/healthz`.
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use super::process::{Gateway, TempDir};

pub struct Reloadable {
    pub gw: Gateway,
    pub dir: TempDir,
    pub path: PathBuf,
    pub pid_file: PathBuf,
    /// Reloads asked for so far.
    pub asked: u64,
}

impl Reloadable {
    /// `oncerpc serve --config <toml> --pid-file …` on a loopback port, with `env`.
    pub fn start(tag: &str, toml: &str, env: &[(&str, &str)]) -> Reloadable {
        let dir = TempDir::new(tag);
        let path = dir.file("oncerpc.toml");
        let pid_file = dir.file("oncerpc.pid");
        std::fs::write(&path, toml).expect("write the config");
        let gw = Gateway::start_env(
            &["--config", &path.display().to_string(), "--pid-file", &pid_file.display().to_string()],
            env,
        );
        Reloadable { gw, dir, path, pid_file, asked: 0 }
    }

    /// Replace the config file (atomically: a rename, as editors and deploy tools do).
    pub fn write(&self, toml: &str) {
        let tmp = self.dir.file("oncerpc.toml.new");
        std::fs::write(&tmp, toml).expect("write the config");
        std::fs::rename(&tmp, &self.path).expect("replace the config");
    }

    /// `kill -HUP` the process.
    pub fn sighup(&mut self) {
        let status = std::process::Command::new("kill")
            .args(["-HUP", &self.gw.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -HUP failed");
        self.asked += 1;
    }

    /// Write `toml`, send `SIGHUP`, and wait (bounded) until `/healthz` shows this reload's
    /// outcome; that `last_reload`.
    pub async fn reload(&mut self, toml: &str) -> Value {
        self.write(toml);
        self.sighup();
        self.outcome().await
    }

    /// Wait (bounded) until `/healthz` shows the outcome of the last reload asked for.
    pub async fn outcome(&self) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(last) = self.last_reload().await
                && last["seq"].as_u64() == Some(self.asked)
            {
                return last;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no reload outcome on /healthz: {:#?}",
                self.gw.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `/healthz`'s `config`.
    pub async fn config(&self) -> Value {
        let body = self.gw.http().get("/healthz", &[]).await.json();
        body["config"].clone()
    }

    async fn last_reload(&self) -> Option<Value> {
        let c = self.config().await;
        c.get("last_reload").cloned()
    }

    /// The value of the metric line that starts with `series` (name and labels) on `/metrics`.
    pub async fn metric(&self, series: &str) -> Option<f64> {
        let text = self.gw.http().get("/metrics", &[]).await.body;
        text.lines()
            .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }
}
