//! The log level a reload can change (`[log] level`, docs/CONFIG.md): the process's filter is
//! a plain list of levels and targets (`Targets`) behind an `ArcSwap`, read only when tracing
//! registers a callsite and when it asks about one whose interest it has not cached. A new
//! level is stored and tracing's interest cache rebuilt, so every callsite is asked again once;
//! between reloads an event or span costs what a fixed `Targets` filter costs (the interest is
//! `always` or `never`, cached at the callsite). The access line's direct path follows the
//! level through a flag.
//!
//! `RUST_LOG` or `--log-level` pin the level: the file's then does not apply, at start or on a
//! reload (the log says so once per reload that changes it).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use arc_swap::ArcSwap;
use tracing::subscriber::Interest;
use tracing::{Level, Metadata, Subscriber};
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::{Context, Filter, Layer};

/// The filter of the process's log, as a global filter (a layer) or a per-layer filter.
#[derive(Clone)]
pub(crate) struct LiveTargets(Arc<ArcSwap<Targets>>);

impl LiveTargets {
    fn allows(&self, m: &Metadata<'_>) -> bool {
        self.0.load().would_enable(m.target(), m.level())
    }

    fn interest(&self, m: &Metadata<'_>) -> Interest {
        if self.allows(m) { Interest::always() } else { Interest::never() }
    }

    fn hint(&self) -> Option<LevelFilter> {
        Layer::<tracing_subscriber::Registry>::max_level_hint(&**self.0.load())
    }
}

impl<S: Subscriber> Layer<S> for LiveTargets {
    fn register_callsite(&self, m: &'static Metadata<'static>) -> Interest {
        self.interest(m)
    }

    fn enabled(&self, m: &Metadata<'_>, _: Context<'_, S>) -> bool {
        self.allows(m)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        self.hint()
    }
}

impl<S> Filter<S> for LiveTargets {
    fn enabled(&self, m: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        self.allows(m)
    }

    fn callsite_enabled(&self, m: &'static Metadata<'static>) -> Interest {
        self.interest(m)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        self.hint()
    }
}

/// The process's live level.
struct Live {
    filter: LiveTargets,
    /// The level's text, as last set.
    spec: Mutex<String>,
    /// Whether the access line's direct path writes (its target enabled at `info`).
    direct: Arc<AtomicBool>,
    /// What pins the level (`RUST_LOG`, `--log-level`, a filter with span directives).
    pinned: Option<&'static str>,
}

static LIVE: OnceLock<Live> = OnceLock::new();

/// The filter for `spec` (a plain list of levels and targets), installed as the process's
/// live level (the first call wins) unless `pinned` says what fixes it; and the flag the
/// access line's direct path reads.
pub(crate) fn install(
    targets: Targets,
    spec: &str,
    pinned: Option<&'static str>,
) -> (LiveTargets, Arc<AtomicBool>) {
    let direct = Arc::new(AtomicBool::new(access_on(&targets)));
    let filter = LiveTargets(Arc::new(ArcSwap::from_pointee(targets)));
    let live =
        Live { filter: filter.clone(), spec: Mutex::new(spec.to_owned()), direct: direct.clone(), pinned };
    let _ = LIVE.set(live);
    (filter, direct)
}

/// Record that the level is fixed by `why` (a filter this module cannot hold).
pub(crate) fn pin(why: &'static str) {
    let (filter, direct) = (LiveTargets(Arc::new(ArcSwap::from_pointee(Targets::new()))), Arc::default());
    let _ = LIVE.set(Live { filter, spec: Mutex::default(), direct, pinned: Some(why) });
}

fn access_on(t: &Targets) -> bool {
    t.would_enable(oncerpc_core::access_log::TARGET, &Level::INFO)
}

/// Whether `spec` is a level the file may set; the error says why not.
pub fn check(spec: &str) -> Result<(), String> {
    parse(spec).map(|_| ())
}

fn parse(spec: &str) -> Result<Targets, String> {
    spec.parse::<Targets>().map_err(|e| {
        format!(
            "log.level {spec:?} is not a list of levels and targets (\"info\", \"warn,oncerpc_core=debug\"): {e}; \
             filters with span fields go in RUST_LOG"
        )
    })
}

/// How setting a level went.
#[derive(Debug, PartialEq, Eq)]
pub enum LevelSet {
    /// The level is now `spec`.
    Changed,
    /// It was `spec` already (or the process has no live log: tests, embedders).
    Same,
    /// Fixed by this (`RUST_LOG`, `--log-level`): left as it is.
    Pinned(&'static str),
}

/// Make `spec` the process's log level (a reload's `[log] level`).
pub fn set(spec: &str) -> Result<LevelSet, String> {
    let targets = parse(spec)?;
    let Some(live) = LIVE.get() else { return Ok(LevelSet::Same) };
    let mut current = live.spec.lock().unwrap_or_else(|e| e.into_inner());
    if *current == spec {
        return Ok(LevelSet::Same);
    }
    if let Some(why) = live.pinned {
        return Ok(LevelSet::Pinned(why));
    }
    live.direct.store(access_on(&targets), Ordering::Relaxed);
    live.filter.0.store(Arc::new(targets));
    spec.clone_into(&mut current);
    // Every callsite is asked again, under the new filter.
    tracing::callsite::rebuild_interest_cache();
    Ok(LevelSet::Changed)
}
