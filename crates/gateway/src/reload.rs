//! Reloading the whole configuration while serving (docs/CONFIG.md, "Reloading"): on
//! `SIGHUP` ([`Reloader::on_sighup`]) the config is loaded from its [`Source`] exactly as at
//! start, checked as `check-config` checks it, and a complete new configuration — registry,
//! dispatcher, front door — is built beside the running one by the start-up code path, then
//! swapped in with one store ([`oncerpc_http::Live`]). Requests already running finish on
//! the configuration they began with; every later request sees the new one. A config that
//! fails any check changes nothing: the reason is logged at `error`, counted, and shown on
//! `/healthz` (its kind only). Settings that need a restart keep their running values and
//! are named (module `restart`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use oncerpc_core::Dispatcher;
use oncerpc_http::{ConfigReport, Live};
use oncerpc_mcp_upstream::{Prepared, Upstreams};

use crate::config::{Loaded, Source};
use crate::{App, Config, ConfigError, flow, restart, upstream};

/// What is served now, and what a reload keeps from it.
struct Served {
    config: Config,
    hash: String,
    loaded_at: SystemTime,
    dispatcher: Arc<Dispatcher>,
    issuers: Option<Arc<oncerpc_http::Issuers>>,
}

/// The reloads of one serving app.
pub struct Reloader {
    live: Live,
    /// `None`: the app was built without a source (embedded, tests): a reload reads nothing
    /// and only the listener's certificate is reloaded.
    source: Option<Source>,
    /// Held for a whole reload: one at a time.
    served: Mutex<Served>,
    /// The dispatcher served now, read without waiting for a reload in progress.
    current: arc_swap::ArcSwap<Dispatcher>,
    demo: Arc<crate::demo::DemoState>,
    attempts: flow::StepAttempts,
    external: oncerpc_mcp::External,
    /// The MCP upstreams' supervisors; made by the first reload that adds one when the app
    /// started with none.
    upstreams: Mutex<Option<Arc<Upstreams>>>,
    tls: Option<Arc<oncerpc_http::tls::ListenerTls>>,
    report: ConfigReport,
    metrics: Metrics,
    /// Reloads tried so far (ok or failed): `/healthz` shows the number of the last.
    tried: std::sync::atomic::AtomicU64,
}

/// `oncerpc_config_reloads_total{outcome}`, `oncerpc_config_info{hash}` (1 for the loaded
/// config) and `oncerpc_config_loaded_timestamp_seconds`.
struct Metrics {
    reloads: prometheus::IntCounterVec,
    info: prometheus::IntGaugeVec,
    loaded: prometheus::IntGauge,
}

impl Metrics {
    fn new(into: &oncerpc_core::metrics::Metrics) -> Metrics {
        let reloads = prometheus::IntCounterVec::new(
            prometheus::Opts::new(
                "oncerpc_config_reloads_total",
                "Configuration reloads (SIGHUP) by outcome: ok (swapped in), failed (nothing changed; the reason is in the log)",
            ),
            &["outcome"],
        )
        .expect("valid metric");
        let info = prometheus::IntGaugeVec::new(
            prometheus::Opts::new(
                "oncerpc_config_info",
                "1 for the configuration being served, labelled with the SHA-256 of its file",
            ),
            &["hash"],
        )
        .expect("valid metric");
        let loaded = prometheus::IntGauge::new(
            "oncerpc_config_loaded_timestamp_seconds",
            "When the configuration being served was loaded (Unix time)",
        )
        .expect("valid metric");
        for outcome in ["ok", "failed"] {
            reloads.with_label_values(&[outcome]);
        }
        for c in [
            Box::new(reloads.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(info.clone()),
            Box::new(loaded.clone()),
        ] {
            let _ = into.register(c);
        }
        Metrics { reloads, info, loaded }
    }

    fn loaded(&self, old: Option<&str>, hash: &str, at: SystemTime) {
        if let Some(old) = old.filter(|o| *o != hash) {
            let _ = self.info.remove_label_values(&[old]);
        }
        self.info.with_label_values(&[hash]).set(1);
        self.loaded.set(at.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64));
    }
}

/// A configuration built and checked, not in use yet.
struct Next {
    config: Config,
    dispatcher: Arc<Dispatcher>,
    issuers: Option<Arc<oncerpc_http::Issuers>>,
    /// The restart-only settings kept at their running values.
    kept: Vec<String>,
    /// The MCP upstreams (`true`: this reload made them), and the change: the names to
    /// remove and the upstreams to add.
    upstreams: Option<(Arc<Upstreams>, bool, Vec<String>, Prepared)>,
    client: reqwest::Client,
}

/// How a reload went.
#[derive(Debug)]
pub enum Reloaded {
    /// Swapped in; the restart-only settings the file changed, kept at their running values.
    Ok { hash: String, kept: Vec<String> },
    /// No source to read: only the certificate was reloaded.
    CertificateOnly,
}

impl Reloader {
    /// The reloader of `app`, whose first door `live` serves. Registers the reload metrics
    /// and publishes the loaded config on `/healthz` (when the app has a source).
    pub fn new(app: &App, live: Live) -> Arc<Reloader> {
        let metrics = Metrics::new(app.dispatcher.metrics());
        let loaded_at = SystemTime::now();
        let hash = app.loaded.as_ref().map(|l| l.hash.clone()).unwrap_or_default();
        if app.source.is_some() {
            metrics.loaded(None, &hash, loaded_at);
        }
        let reloader = Reloader {
            current: arc_swap::ArcSwap::new(app.dispatcher.clone()),
            live,
            source: app.source.clone(),
            served: Mutex::new(Served {
                config: app.config.clone(),
                hash,
                loaded_at,
                dispatcher: app.dispatcher.clone(),
                issuers: app.issuers.clone(),
            }),
            demo: app.demo.clone(),
            attempts: app.attempts.clone(),
            external: app.external.clone(),
            upstreams: Mutex::new(app.upstreams.clone()),
            tls: app.tls.clone(),
            report: app.report.clone(),
            metrics,
            tried: Default::default(),
        };
        if reloader.source.is_some() {
            let served = reloader.served.lock().unwrap_or_else(|e| e.into_inner());
            reloader.report.set(report(&served, None, 0));
        }
        Arc::new(reloader)
    }

    /// The dispatcher of the configuration served now.
    pub fn dispatcher(&self) -> Arc<Dispatcher> {
        self.current.load_full()
    }

    /// Reload on every `SIGHUP` until the task is aborted (Unix; elsewhere nothing). The
    /// handler is installed before this returns, so a `SIGHUP` never ends the process.
    pub fn on_sighup(self: Arc<Self>) -> tokio::task::JoinHandle<()> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            match signal(SignalKind::hangup()) {
                Ok(mut hup) => tokio::spawn(async move {
                    while hup.recv().await.is_some() {
                        tracing::info!("SIGHUP: reloading the configuration");
                        let this = self.clone();
                        let _ = tokio::task::spawn_blocking(move || this.reload_logged()).await;
                    }
                }),
                Err(e) => {
                    tracing::error!(error = %e, "cannot install the SIGHUP handler: the configuration cannot be reloaded");
                    tokio::spawn(async {})
                }
            }
        }
        #[cfg(not(unix))]
        tokio::spawn(async {})
    }

    /// [`reload`](Self::reload), logged, counted and shown on `/healthz`.
    pub fn reload_logged(&self) -> Result<Reloaded, ConfigError> {
        let outcome = self.reload();
        let seq = self.tried.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        match &outcome {
            Ok(Reloaded::Ok { hash, kept }) => {
                self.metrics.reloads.with_label_values(&["ok"]).inc();
                if !kept.is_empty() {
                    tracing::warn!(settings = %kept.join(", "), "these settings need a restart: left as they were");
                }
                tracing::info!(hash = %hash, "configuration reloaded");
                let served = self.served.lock().unwrap_or_else(|e| e.into_inner());
                self.report.set(report(&served, Some("ok"), seq));
            }
            Ok(Reloaded::CertificateOnly) => {}
            Err(e) => {
                self.metrics.reloads.with_label_values(&["failed"]).inc();
                tracing::error!(error = %without_source_lines(&e.to_string()), "configuration not reloaded: the running one stays");
                let served = self.served.lock().unwrap_or_else(|e| e.into_inner());
                self.report.set(report(&served, Some(kind(e)), seq));
            }
        }
        outcome
    }

    /// Load the configuration again and swap it in, or change nothing.
    pub fn reload(&self) -> Result<Reloaded, ConfigError> {
        let Some(source) = &self.source else {
            self.reload_certificate();
            return Ok(Reloaded::CertificateOnly);
        };
        let Loaded { mut config, hash } = source.load()?;
        // The documents are read again, as at start (this runs on a blocking thread of the
        // runtime: `reload_logged` is sent there).
        tokio::runtime::Handle::current().block_on(crate::expand_openapi(&mut config))?;
        let mut served = self.served.lock().unwrap_or_else(|e| e.into_inner());
        let next = self.build(&served, config)?;
        let changed = restart::changed(&served.config, &next.config);
        tracing::info!(changed = %changed.join(", "), "configuration checked: swapping it in");
        let Next { config, dispatcher, issuers, kept, upstreams, client } = next;
        if let Some((upstreams, made, removed, added)) = upstreams {
            if made {
                for c in upstreams.metrics().collectors() {
                    let _ = dispatcher.metrics().register(c);
                }
                upstreams.start(dispatcher.clone(), self.external.clone(), client);
            }
            upstreams.change(&removed, added);
            *self.upstreams.lock().unwrap_or_else(|e| e.into_inner()) = Some(upstreams);
        }
        let http = crate::http_config(&config, issuers.clone(), self.external.clone(), self.report.clone());
        let door = self.live.current().successor(dispatcher.clone(), http);
        let tools_changed = ["demo", "mcp", "methods"].iter().any(|s| changed.iter().any(|c| c == s));
        self.live.replace(door);
        if tools_changed {
            // After the swap: a client that lists the tools on hearing it gets the new list.
            self.live.current().tools_changed();
        }
        self.current.store(dispatcher.clone());
        if served.config.log.level != config.log.level {
            set_log_level(&config.log.level);
        }
        self.reload_certificate();
        let loaded_at = SystemTime::now();
        self.metrics.loaded(Some(&served.hash), &hash, loaded_at);
        *served = Served { config, hash: hash.clone(), loaded_at, dispatcher, issuers };
        Ok(Reloaded::Ok { hash, kept })
    }

    /// Everything of the next configuration, checked as `check-config` and a start check
    /// it, nothing of it in use yet.
    fn build(&self, served: &Served, mut config: Config) -> Result<Next, ConfigError> {
        crate::check_methods(&config)?;
        if let (Some(t), Some(_)) = (&config.tls, &self.tls) {
            // The listener's certificate is counted as its own reloads are.
            oncerpc_http::tls::ListenerTls::load(&t.cert_file, &t.key_file, None).map_err(|e| {
                served.dispatcher.metrics().tls_reload("failed");
                ConfigError::Invalid(e.to_string())
            })?;
        }
        crate::check_tls_files(&config)?;
        let kept = restart::keep(&served.config, &mut config);
        if !kept.is_empty() {
            // The running values of the kept settings, with the rest of the new file.
            config.validate()?;
            crate::check_methods(&config)?;
        }
        let (removed, added) = crate::mcp_upstreams::changes(&served.config, &config)?;
        let running = self.upstreams.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let upstreams = match running {
            Some(u) => Some((u, false)),
            None if !added.is_empty() => {
                Some((Arc::new(Upstreams::new(Vec::new()).map_err(ConfigError::Invalid)?), true))
            }
            None => None,
        };
        let upstreams = match upstreams {
            Some((u, made)) => {
                let added = u.prepare(added).map_err(ConfigError::Invalid)?;
                Some((u, made, removed, added))
            }
            None => None,
        };
        let client = upstream::client(&config.upstream).map_err(ConfigError::Invalid)?;
        let mcp = upstreams.as_ref().map(|(u, ..)| u);
        let registry = crate::build_registry(&config, &self.demo, &client, &self.attempts, mcp)?;
        crate::check_app(&config, &registry)?;
        let same_identity = serde_json::to_value(&served.config.auth).ok()
            == serde_json::to_value(&config.auth).ok()
            && tenant_names(&served.config) == tenant_names(&config);
        let issuers =
            if same_identity { served.issuers.clone() } else { crate::start_issuers(&config, &client) };
        let dispatcher = Arc::new(served.dispatcher.successor(registry, crate::dispatcher_config(&config)));
        Ok(Next { config, dispatcher, issuers, kept, upstreams, client })
    }

    fn reload_certificate(&self) {
        if let Some(tls) = &self.tls {
            match tls.reload() {
                Ok(()) => tracing::info!("TLS certificate reloaded"),
                Err(e) => tracing::error!(error = %e, "TLS certificate not reloaded, the previous one stays"),
            }
        }
    }

    /// Resume unfinished async events every `interval`, each pass by the configuration
    /// served then.
    pub async fn resume_events(self: Arc<Self>, interval: Duration) {
        loop {
            if let Err(e) = self.dispatcher().resume_once().await {
                tracing::warn!(error = %e, "resuming events failed; will try again");
            }
            tokio::time::sleep(interval).await;
        }
    }
}

/// The reloaded file's `[log] level`, unless `RUST_LOG` or `--log-level` fix the level.
fn set_log_level(level: &str) {
    match crate::log_level::set(level) {
        Ok(crate::log_level::LevelSet::Changed) => tracing::warn!(level, "log level changed"),
        Ok(crate::log_level::LevelSet::Same) => {}
        Ok(crate::log_level::LevelSet::Pinned(by)) => {
            tracing::warn!(
                level,
                by,
                "log.level changed in the file, but the level is set by {by}: left as it is"
            )
        }
        // The file was checked: a level it has passes.
        Err(e) => tracing::error!(error = %e, "log level not changed"),
    }
}

fn tenant_names(config: &Config) -> Vec<&str> {
    config.tenants.iter().map(|t| t.name.as_str()).collect()
}

/// The kind of a failed load, for `/healthz` (its text stays in the log).
fn kind(e: &ConfigError) -> &'static str {
    match e {
        ConfigError::Read { .. } => "read",
        ConfigError::Parse { .. } => "parse",
        ConfigError::Invalid(_) => "invalid",
    }
}

/// A TOML error quotes the offending line of the file, which may hold a secret: the log
/// keeps the message, line and column, not the line itself.
fn without_source_lines(message: &str) -> String {
    message
        .lines()
        .filter(|l| {
            let t = l.trim_start();
            let digits = t.chars().take_while(char::is_ascii_digit).count();
            !(t.starts_with('|') || digits > 0 && t[digits..].trim_start().starts_with('|'))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// What `/healthz` shows as `"config"`.
fn report(served: &Served, last: Option<&str>, seq: u64) -> serde_json::Value {
    let at = |t: SystemTime| humantime::format_rfc3339_seconds(t).to_string();
    let mut report = serde_json::json!({ "hash": served.hash, "loaded_at": at(served.loaded_at) });
    if let Some(outcome) = last {
        report["last_reload"] = match outcome {
            "ok" => serde_json::json!({ "outcome": "ok", "at": at(served.loaded_at), "seq": seq }),
            error => serde_json::json!({
                "outcome": "failed", "error": error, "at": at(SystemTime::now()), "seq": seq
            }),
        };
    }
    report
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_toml_errors_quoted_line_stays_out_of_the_log() {
        let err = toml::from_str::<toml::Value>("a = 1\napi_keys = [\"s3cret-value\"\n").unwrap_err();
        let shown = super::without_source_lines(&err.to_string());
        assert!(err.to_string().contains("s3cret-value"), "the quote is there to remove: {err}");
        assert!(!shown.contains("s3cret-value"), "{shown}");
        assert!(shown.contains("line 2"), "{shown}");
    }
}
