//! The step journal of one owned execution (SPEC §14), as a handler made of steps sees it.
//!
//! The dispatcher hands a keyed execution's handler a [`StepJournal`] in
//! [`Context::journal`](crate::Context): the outputs its record already holds (a take-over of
//! an execution whose owner died finds the steps that owner finished) and a way to store the
//! next one, fenced by the owner's token, before the following step starts. A handler that
//! skips the stored steps and records each new one never calls a finished step again.
//!
//! Each entry records its step by name, with fingerprints of the step's definition and of the
//! whole flow's ([`entry`]), so that a take-over by a process running another definition (a
//! deploy between the crash and the take-over) never skips a step or feeds a step another
//! step's output: [`resume`] hands back the finished prefix only when it is still the prefix
//! of the current definition, and otherwise says why the execution cannot go on.
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::store::{Journal, RecordKey, Store, StoreError};

/// How one step of an async execution went, as `GET /v2/events/{id}` shows it (the event's
/// `steps`, a JSON array of these, one per step reached).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepView {
    pub name: String,
    pub status: StepStatus,
    /// Attempts made (0 while the first is in flight).
    pub attempts: u32,
    pub started_at_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at_ms: Option<u64>,
    /// The `X-Idempotency-Key` the step's requests carried (absent for a keyless execution).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// A succeeded step's output (JSON text, as the step answered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// A failed step's error, as the client sees it (no internals in production mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepStatus {
    Running,
    Succeeded,
    Failed,
}

/// Why a step's output could not be stored.
#[derive(Debug, Clone, thiserror::Error)]
pub enum JournalError {
    /// Another execution owns the record now (this one was taken over): stop, its outcome
    /// will not be the key's.
    #[error("the execution was taken over: its steps are no longer recorded")]
    Fenced,
    /// The store did not answer; the step will run again if the execution is taken over.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a journal entry says produced its output: a step's name and the fingerprint of its
/// definition (whatever the flow executor hashes with [`StepDef::new`]: a step's identity,
/// never where it is sent, so that replicas sending it to different URLs resume each other).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepDef {
    pub name: String,
    /// Lowercase hex SHA-256 of the definition's parts.
    pub def: String,
    /// The fingerprint an earlier release journaled the same step under, also accepted when
    /// resuming ([`StepDef::journaled_before_as`]).
    pub legacy: Option<String>,
}

fn fingerprint(name: &str, parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in std::iter::once(name).chain(parts.iter().copied()) {
        h.update(p.as_bytes());
        h.update([0u8]);
    }
    crate::idempotency::hex(&h.finalize())
}

impl StepDef {
    /// Step `name` defined by `parts` (e.g. its kind): SHA-256 of `name NUL part NUL …`.
    pub fn new(name: &str, parts: &[&str]) -> StepDef {
        StepDef { name: name.to_owned(), def: fingerprint(name, parts), legacy: None }
    }

    /// Accept, too, a journal entry an earlier release wrote for this step with the definition
    /// `parts`: an execution in flight across an upgrade resumes where it was.
    pub fn journaled_before_as(mut self, parts: &[&str]) -> StepDef {
        self.legacy = Some(fingerprint(&self.name, parts));
        self
    }

    /// Whether a journal entry of step `name` with definition `def` is this step's.
    fn journaled(&self, name: &str, def: &str) -> bool {
        self.name == name && (self.def == def || self.legacy.as_deref() == Some(def))
    }
}

/// The fingerprint of a flow made of `steps`, in order: SHA-256 of their definitions'.
pub fn flow_fingerprint(steps: &[StepDef]) -> String {
    let mut h = Sha256::new();
    for s in steps {
        h.update(s.def.as_bytes());
        h.update([0u8]);
    }
    crate::idempotency::hex(&h.finalize())
}

/// The version member of an entry; an entry without it was written before steps were
/// recorded by name.
const ENTRY_VERSION: u32 = 1;

/// A journal entry as stored: `{"oncerpc_journal":1,"step":…,"def":…,"flow":…,"output":…}`,
/// the output as a JSON string holding its text exactly.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    oncerpc_journal: u32,
    step: String,
    def: String,
    flow: String,
    output: String,
}

/// The stored text of step `step`'s `output` in flow `flow` (its [`flow_fingerprint`]).
pub fn entry(step: &StepDef, flow: &str, output: &str) -> String {
    let e = Entry {
        oncerpc_journal: ENTRY_VERSION,
        step: step.name.clone(),
        def: step.def.clone(),
        flow: flow.to_owned(),
        output: output.to_owned(),
    };
    serde_json::to_string(&e).expect("strings serialise")
}

/// Why an execution cannot resume from its journal under the current definition. Its
/// finished steps are not run again and no later step is fed their outputs: the execution
/// fails with this, and a force retry starts it from the first step.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResumeError {
    /// Finished step `index` is no longer step `index` of the flow, by name or kind.
    #[error(
        "step {index} finished as {journaled:?} but the flow's step {index} is now {}",
        match current.as_deref() {
            None => "absent".to_owned(),
            Some(c) if c == journaled => format!("{c:?} of another kind (an HTTP step became an MCP tool step, or the reverse)"),
            Some(c) => format!("{c:?}"),
        }
    )]
    Changed { index: u32, journaled: String, current: Option<String> },
    /// The entry does not say which step wrote it (written before steps were recorded by
    /// name, or unreadable).
    #[error("step {index} was journaled without its name (before an upgrade)")]
    Unnamed { index: u32 },
    /// The journal skips step `index` (entries are written in order, so never by oncerpc).
    #[error("the journal has no entry for step {index} but has later ones")]
    Gap { index: u32 },
}

/// The outputs of the finished steps of `stored`, in order, for the flow `flow` made of
/// `steps`. Same flow fingerprint: resumed as journaled. Another one (a deploy changed the
/// flow): resumed only if each finished step `i` is still step `i`, with the same name and
/// definition — steps added or changed after them run as the new definition says.
pub fn resume(stored: &Journal, flow: &str, steps: &[StepDef]) -> Result<Vec<String>, ResumeError> {
    let mut outputs = Vec::with_capacity(stored.len());
    for (expected, (&index, text)) in stored.iter().enumerate() {
        if index as usize != expected {
            return Err(ResumeError::Gap { index: expected as u32 });
        }
        let e: Entry = serde_json::from_str(text)
            .ok()
            .filter(|e: &Entry| e.oncerpc_journal == ENTRY_VERSION)
            .ok_or(ResumeError::Unnamed { index })?;
        if e.flow != flow {
            let current = steps.get(expected);
            if current.is_none_or(|c| !c.journaled(&e.step, &e.def)) {
                let current = current.map(|c| c.name.clone());
                return Err(ResumeError::Changed { index, journaled: e.step, current });
            }
        }
        outputs.push(e.output);
    }
    Ok(outputs)
}

/// One execution's journal: what was stored before it started, and the writes it makes.
#[derive(Clone)]
pub struct StepJournal {
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    store: Arc<dyn Store>,
    key: RecordKey,
    token: u64,
    lease: Duration,
    stored: Journal,
    /// For an async execution: its event's id and step views.
    event: Option<(String, Arc<Mutex<Vec<StepView>>>)>,
    /// `None` until a step is sent; then the step whose request is out, if one is
    /// ([`StepJournal::sending`]).
    in_flight: Arc<Mutex<Option<Option<String>>>>,
}

impl std::fmt::Debug for StepJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepJournal")
            .field("key", &self.inner.key)
            .field("token", &self.inner.token)
            .field("stored", &self.inner.stored.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl StepJournal {
    /// The journal of the execution that owns `key` under `token`; `stored` is what the
    /// record held when it was acquired.
    pub fn new(store: Arc<dyn Store>, key: RecordKey, token: u64, lease: Duration, stored: Journal) -> Self {
        let in_flight = Arc::default();
        StepJournal { inner: Arc::new(Inner { store, key, token, lease, stored, event: None, in_flight }) }
    }

    /// The journal of an async execution: its steps are also shown in event `id`, whose
    /// views so far (an earlier owner's) are `steps`.
    pub fn with_event(self, id: &str, steps: Option<&str>) -> StepJournal {
        let mut inner = Arc::try_unwrap(self.inner).unwrap_or_else(|shared| (*shared).clone());
        let views: Vec<StepView> = steps.and_then(|s| serde_json::from_str(s).ok()).unwrap_or_default();
        inner.event = Some((id.to_owned(), Arc::new(Mutex::new(views))));
        StepJournal { inner: Arc::new(inner) }
    }

    /// Show step `n`'s progress in the event (for an async execution; nothing otherwise). The
    /// views of later steps are dropped. Best effort: a failed or fenced write is logged.
    pub async fn report(&self, n: usize, view: StepView) {
        self.write_views(|views| {
            views.truncate(n);
            views.push(view);
        })
        .await
    }

    /// Keep only the first `n` step views in the event (for an async execution that cannot
    /// resume: the steps it finished stay shown, a step an earlier owner left running goes).
    pub async fn keep_views(&self, n: usize) {
        self.write_views(|views| views.truncate(n)).await
    }

    async fn write_views(&self, change: impl FnOnce(&mut Vec<StepView>)) {
        let Some((id, views)) = &self.inner.event else { return };
        let json = {
            let Ok(mut views) = views.lock() else { return };
            change(&mut views);
            serde_json::to_string(&*views).unwrap_or_else(|_| "[]".into())
        };
        match self.inner.store.put_event_steps(id, self.inner.token, &json).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::debug!(event_id = %id, "step views not written: the event has another owner")
            }
            Err(e) => tracing::warn!(event_id = %id, error = %e, "could not write the event's step views"),
        }
    }

    /// The outputs of the steps an earlier owner finished, for the flow `flow` made of
    /// `steps` (see [`resume`]).
    pub fn resume(&self, flow: &str, steps: &[StepDef]) -> Result<Vec<String>, ResumeError> {
        resume(&self.inner.stored, flow, steps)
    }

    /// Step `name`'s request is out (until the returned guard is dropped): a deadline that
    /// fires meanwhile says so (`data.step_in_flight`), so a client knows the upstream may
    /// have acted before it retries.
    pub fn sending(&self, name: &str) -> InFlight {
        if let Ok(mut slot) = self.inner.in_flight.lock() {
            *slot = Some(Some(name.to_owned()));
        }
        InFlight(self.inner.in_flight.clone())
    }

    /// `None` when no step was sent yet (or the execution is no flow); else the step whose
    /// request is out right now, if one is.
    pub fn in_flight(&self) -> Option<Option<String>> {
        self.inner.in_flight.lock().ok()?.clone()
    }

    /// The owner's fencing token.
    pub fn token(&self) -> u64 {
        self.inner.token
    }

    /// How many steps an earlier owner finished.
    pub fn resumed_steps(&self) -> usize {
        self.inner.stored.len()
    }

    /// Store the output of step `step` (`def`, of the flow `flow`) and renew the lease, before
    /// the next step starts.
    pub async fn record(
        &self,
        step: u32,
        def: &StepDef,
        flow: &str,
        output: &str,
    ) -> Result<(), JournalError> {
        let i = &self.inner;
        match i.store.put_step(&i.key, i.token, step, &entry(def, flow, output), i.lease).await? {
            true => Ok(()),
            false => Err(JournalError::Fenced),
        }
    }
}

/// A step's request is out while this lives ([`StepJournal::sending`]).
pub struct InFlight(Arc<Mutex<Option<Option<String>>>>);

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Ok(mut slot) = self.0.lock() {
            *slot = Some(None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defs(steps: &[(&str, &str)]) -> Vec<StepDef> {
        steps.iter().map(|(name, url)| StepDef::new(name, &[url])).collect()
    }

    /// The journal of a flow whose first `done` steps finished, each output `{"from":name}`.
    fn journal_of(steps: &[StepDef], done: usize) -> Journal {
        let flow = flow_fingerprint(steps);
        let out = |s: &StepDef| format!(r#"{{"from":"{}"}}"#, s.name);
        (0..done).map(|i| (i as u32, entry(&steps[i], &flow, &out(&steps[i])))).collect()
    }

    const A: (&str, &str) = ("a", "http://up/a");
    const B: (&str, &str) = ("b", "http://up/b");
    const C: (&str, &str) = ("c", "http://up/c");
    const NEW: (&str, &str) = ("new", "http://up/new");

    #[test]
    fn the_same_flow_resumes_as_journaled_with_outputs_exact() {
        let steps = defs(&[A, B, C]);
        let j = journal_of(&steps, 2);
        let got = resume(&j, &flow_fingerprint(&steps), &steps).unwrap();
        assert_eq!(got, [r#"{"from":"a"}"#, r#"{"from":"b"}"#]);
        assert_eq!(resume(&Journal::new(), &flow_fingerprint(&steps), &steps).unwrap(), Vec::<String>::new());
        // Any output text comes back byte for byte.
        let odd = "{\"x\": 1.0e+2 ,\"s\":\"\\u00e9\\n\"}";
        let j: Journal = [(0, entry(&steps[0], "f", odd))].into();
        assert_eq!(resume(&j, "f", &steps).unwrap(), [odd]);
    }

    /// A deploy inserted a step after the finished prefix: resumed by name, the new step runs
    /// (it is not in the outputs), and nothing is skipped.
    #[test]
    fn a_step_added_after_the_finished_prefix_resumes_by_name() {
        let old = defs(&[A, B, C]);
        let j = journal_of(&old, 1);
        let new = defs(&[A, NEW, B, C]);
        assert_ne!(flow_fingerprint(&old), flow_fingerprint(&new));
        assert_eq!(resume(&j, &flow_fingerprint(&new), &new).unwrap(), [r#"{"from":"a"}"#]);
        // A later step changed (not yet run): resumed, it runs as now defined.
        let changed_later = defs(&[A, B, ("c", "http://up/c2")]);
        let j2 = journal_of(&old, 2);
        assert_eq!(resume(&j2, &flow_fingerprint(&changed_later), &changed_later).unwrap().len(), 2);
    }

    /// A deploy inserted a step before a finished one: by position, `b`'s journaled output
    /// would have been fed to `b` as `new`'s; instead the execution cannot resume.
    #[test]
    fn a_step_added_before_a_finished_step_is_a_clear_error() {
        let old = defs(&[A, B, C]);
        let j = journal_of(&old, 2);
        let new = defs(&[A, NEW, B, C]);
        let e = resume(&j, &flow_fingerprint(&new), &new).unwrap_err();
        assert_eq!(e, ResumeError::Changed { index: 1, journaled: "b".into(), current: Some("new".into()) });
        assert_eq!(e.to_string(), r#"step 1 finished as "b" but the flow's step 1 is now "new""#);
        // The same name of another kind is a change too; so is a removed step.
        let other_kind = defs(&[A, ("b", "mcp"), C]);
        let e = resume(&j, &flow_fingerprint(&other_kind), &other_kind).unwrap_err();
        assert!(matches!(e, ResumeError::Changed { index: 1, .. }), "{e}");
        assert!(
            e.to_string().ends_with(
                r#"is now "b" of another kind (an HTTP step became an MCP tool step, or the reverse)"#
            ),
            "{e}"
        );
        let shorter = defs(&[A]);
        let e = resume(&j, &flow_fingerprint(&shorter), &shorter).unwrap_err();
        assert_eq!(e, ResumeError::Changed { index: 1, journaled: "b".into(), current: None });
        assert!(e.to_string().ends_with("is now absent"), "{e}");
    }

    /// Entries written before steps were recorded by name (plain outputs) are never trusted by
    /// position: the execution cannot resume, whatever the output looks like.
    #[test]
    fn plain_entries_from_before_the_upgrade_are_not_resumed() {
        let steps = defs(&[A, B]);
        let flow = flow_fingerprint(&steps);
        for plain in
            [r#"{"from":"a"}"#, "null", r#"{"oncerpc_journal":2,"step":"a","def":"","flow":"","output":""}"#]
        {
            let j: Journal = [(0, plain.to_owned())].into();
            assert_eq!(resume(&j, &flow, &steps), Err(ResumeError::Unnamed { index: 0 }), "{plain}");
        }
        let mut j = journal_of(&steps, 2);
        j.remove(&0);
        assert_eq!(resume(&j, &flow, &steps), Err(ResumeError::Gap { index: 0 }));
    }

    /// An entry an earlier release journaled under its old definition (the step's URL) is
    /// still the step's while that definition matches; a step's new definition (its kind) is
    /// the same wherever it is sent.
    #[test]
    fn an_entry_of_the_earlier_definition_resumes_across_an_upgrade() {
        let old = defs(&[A, B, C]);
        let j = journal_of(&old, 2);
        let upgraded: Vec<StepDef> = [A, B, C]
            .iter()
            .map(|(name, url)| StepDef::new(name, &["http"]).journaled_before_as(&[url]))
            .collect();
        assert_eq!(resume(&j, &flow_fingerprint(&upgraded), &upgraded).unwrap().len(), 2);
        let elsewhere: Vec<StepDef> =
            [A, B, C].iter().map(|(name, _)| StepDef::new(name, &["http"])).collect();
        let j = journal_of(&elsewhere, 2);
        let here: Vec<StepDef> = [A, B, C]
            .iter()
            .map(|(name, _)| StepDef::new(name, &["http"]).journaled_before_as(&["http://another-region/x"]))
            .collect();
        assert_eq!(
            flow_fingerprint(&elsewhere),
            flow_fingerprint(&here),
            "where a step is sent is not its identity"
        );
        assert_eq!(resume(&j, &flow_fingerprint(&here), &here).unwrap().len(), 2);
    }

    #[test]
    fn definitions_fingerprint_name_and_parts_unambiguously() {
        assert_ne!(StepDef::new("ab", &["c"]).def, StepDef::new("a", &["bc"]).def);
        assert_ne!(StepDef::new("a", &["u"]).def, StepDef::new("a", &["v"]).def);
        assert_eq!(StepDef::new("a", &["u"]), StepDef::new("a", &["u"]));
        assert_ne!(flow_fingerprint(&defs(&[A, B])), flow_fingerprint(&defs(&[B, A])));
    }
}
