//! Rows to values and back: records, events and their state codes in the PostgreSQL tables.

use std::time::Duration;

use oncerpc_core::store::{
    Event, EventStatus, Record, RecordKey, RecordState, StoredOutcome, TakeOver, journal_from_json,
};
use tokio_postgres::Row;

/// The first column of the only row as a count (statements ending in `SELECT count(*) …`).
pub(crate) fn count(rows: &[Row]) -> i64 {
    rows.first().map_or(0, |r| r.get(0))
}

pub(crate) fn ms(d: Duration) -> i64 {
    d.as_millis().min(i64::MAX as u128) as i64
}

pub(crate) fn row_record(row: &Row) -> Record {
    let state: i16 = row.get("state");
    let outcome: Option<String> = row.get("outcome");
    let state = match (state, outcome) {
        (1, Some(o)) => RecordState::Done(StoredOutcome::Succeeded(o)),
        (2, Some(o)) => RecordState::Done(StoredOutcome::Failed(o)),
        _ => RecordState::Processing { lease_until_ms: row.get::<_, i64>("lease_until") as u64 },
    };
    let takeover =
        match (row.get::<_, Option<i64>>("takeover_token"), row.get::<_, Option<i64>>("takeover_until")) {
            (Some(token), Some(until)) => Some(TakeOver { token: token as u64, until_ms: until as u64 }),
            _ => None,
        };
    Record {
        fingerprint: row.get("fingerprint"),
        state,
        token: row.get::<_, i64>("token") as u64,
        expires_at_ms: row.get::<_, i64>("expires_at") as u64,
        takeover,
        steps: journal_from_json(row.get::<_, Option<&str>>("steps")),
    }
}

/// `state`, `outcome`, `lease_until` of a record state.
pub(crate) fn state_columns(state: &RecordState) -> (i16, Option<&str>, i64) {
    match state {
        RecordState::Processing { lease_until_ms } => (0, None, *lease_until_ms as i64),
        RecordState::Done(outcome) => (outcome_state(outcome), Some(outcome.json()), 0),
    }
}

/// The `state` code of a finished record: 1 succeeded, 2 failed (a cancellation is a failed
/// outcome; only its event says `cancelled`).
pub(crate) fn outcome_state(outcome: &StoredOutcome) -> i16 {
    match outcome {
        StoredOutcome::Succeeded(_) => 1,
        StoredOutcome::Failed(_) => 2,
    }
}

pub(crate) fn event_row(row: &Row) -> Event {
    let status = match row.get::<_, i16>("status") {
        1 => EventStatus::Succeeded,
        2 => EventStatus::Failed,
        3 => EventStatus::Cancelled,
        _ => EventStatus::Processing,
    };
    let outcome: Option<String> = row.get("outcome");
    let outcome = match (status, outcome) {
        (EventStatus::Succeeded, Some(o)) => Some(StoredOutcome::Succeeded(o)),
        (EventStatus::Failed | EventStatus::Cancelled, Some(o)) => Some(StoredOutcome::Failed(o)),
        _ => None,
    };
    let tags: String = row.get("tags");
    Event {
        id: row.get("id"),
        record: RecordKey::new(
            row.get::<_, String>("tenant"),
            row.get::<_, String>("method"),
            row.get::<_, String>("key"),
        ),
        fingerprint: row.get("fingerprint"),
        params: row.get("params"),
        return_step: row.get("return_step"),
        tags: serde_json::from_str(&tags).unwrap_or_default(),
        status,
        outcome,
        created_at_ms: row.get::<_, i64>("created_at") as u64,
        updated_at_ms: row.get::<_, i64>("updated_at") as u64,
        expires_at_ms: row.get::<_, i64>("expires_at") as u64,
        token: row.get::<_, i64>("token") as u64,
        steps: row.get("steps"),
        created_by: row.get("created_by"),
    }
}

pub(crate) fn status_code(status: EventStatus) -> i16 {
    match status {
        EventStatus::Processing => 0,
        EventStatus::Succeeded => 1,
        EventStatus::Failed => 2,
        EventStatus::Cancelled => 3,
    }
}
