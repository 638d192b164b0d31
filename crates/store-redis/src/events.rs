//! Events in Redis: a hash per event, a listing index per tenant and one pending index (see
//! the crate's documentation), and the operations over them that take more than one script.

use oncerpc_core::store::{
    Event, EventFilter, EventStatus, RecordKey, StoreError, StoredOutcome, list_cursor, now_ms,
    parse_list_cursor, parse_pending_cursor,
};

use crate::{PENDING_GRACE_MS, RedisStore, err};

/// Chunks of the tenant's index one listing page reads at most before it ends early (with a
/// cursor) for want of matching events.
const LIST_SCAN_CHUNKS: usize = 8;

pub(crate) const EVENT_FIELDS: [&str; 15] = [
    "tenant",
    "method",
    "key",
    "fp",
    "params",
    "return_step",
    "tags",
    "status",
    "outcome",
    "created",
    "updated",
    "expires",
    "token",
    "steps",
    "created_by",
];

impl RedisStore {
    /// Add `e` to its tenant's listing index, which then lives at least as long as `e`.
    pub(crate) async fn index_listed(&self, e: &Event, ttl_ms: u64) -> Result<(), StoreError> {
        let mut inv = self.scripts.index_listed.prepare_invoke();
        inv.key(self.listed_key(&e.record.tenant)).arg(list_cursor(e)).arg(ttl_ms);
        self.eval::<i64>(&inv, None).await.map(|_| ())
    }

    pub(crate) async fn index_pending(&self, id: &str, created_ms: u64) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        redis::cmd("ZADD")
            .arg(self.pending_key())
            .arg(created_ms)
            .arg(id)
            .query_async(&mut conn)
            .await
            .map_err(err)
    }

    /// Remove `id` from the pending index, then look again: an event that turned processing
    /// meanwhile (a concurrent restart) is put back, so no interleaving loses its entry.
    /// Whether the entry stays removed.
    pub(crate) async fn unindex_pending(&self, id: &str) -> Result<bool, StoreError> {
        let mut conn = self.conn.clone();
        redis::cmd("ZREM").arg(self.pending_key()).arg(id).query_async::<()>(&mut conn).await.map_err(err)?;
        match self.load_event(id).await? {
            Some(e) if e.status == EventStatus::Processing => {
                self.index_pending(id, e.created_at_ms).await?;
                Ok(false)
            }
            _ => Ok(true),
        }
    }

    pub(crate) async fn load_event(&self, id: &str) -> Result<Option<Event>, StoreError> {
        let mut conn = self.conn.clone();
        let v: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(self.event_key(id))
            .arg(&EVENT_FIELDS[..])
            .query_async(&mut conn)
            .await
            .map_err(err)?;
        let field = |i: usize| v.get(i).cloned().flatten();
        let number = |i: usize| field(i).and_then(|c| c.parse().ok()).unwrap_or(0);
        let Some(tenant) = field(0) else { return Ok(None) };
        let status = field(7).and_then(|s| EventStatus::parse(&s)).unwrap_or(EventStatus::Processing);
        let outcome = match status {
            EventStatus::Processing => None,
            EventStatus::Succeeded => field(8).map(StoredOutcome::Succeeded),
            EventStatus::Failed | EventStatus::Cancelled => field(8).map(StoredOutcome::Failed),
        };
        Ok(Some(Event {
            id: id.to_owned(),
            record: RecordKey::new(tenant, field(1).unwrap_or_default(), field(2).unwrap_or_default()),
            fingerprint: field(3).unwrap_or_default(),
            params: field(4),
            return_step: field(5),
            tags: field(6).and_then(|t| serde_json::from_str(&t).ok()).unwrap_or_default(),
            status,
            outcome,
            created_at_ms: number(9),
            updated_at_ms: number(10),
            expires_at_ms: number(11),
            token: number(12),
            steps: field(13),
            created_by: field(14),
        }))
    }

    /// [`Store::put_event`](oncerpc_core::Store::put_event): the index entries first (a crash
    /// between them and the hash leaves entries without a hash, dropped after the grace, never
    /// a pending event that no listing reaches), then the hash, written by one script only if
    /// no live event of a token at least as high is there, keeping a live event's creation
    /// time and creator. The entries are made with the creation time read before; when the script kept
    /// another (a concurrent creation won), they are made again with that one.
    pub(crate) async fn write_event(&self, e: &Event) -> Result<bool, StoreError> {
        let mut conn = self.conn.clone();
        let (token, created): (Option<u64>, Option<u64>) = redis::cmd("HMGET")
            .arg(self.event_key(&e.id))
            .arg("token")
            .arg("created")
            .query_async(&mut conn)
            .await
            .map_err(err)?;
        if token.is_some_and(|t| t >= e.token) {
            return Ok(false);
        }
        let created = created.unwrap_or(e.created_at_ms);
        let pending = e.status == EventStatus::Processing;
        let ttl = e.expires_at_ms.saturating_sub(now_ms()).max(1);
        self.index_event(e, created, pending, ttl).await?;
        let tags = serde_json::to_string(&e.tags).unwrap_or_else(|_| "[]".into());
        let mut fields: Vec<(&str, String)> = vec![
            ("tenant", e.record.tenant.to_string()),
            ("method", e.record.method.to_string()),
            ("key", e.record.key.to_string()),
            ("fp", e.fingerprint.clone()),
            ("tags", tags),
            ("status", e.status.as_str().to_owned()),
            ("updated", e.updated_at_ms.to_string()),
            ("expires", e.expires_at_ms.to_string()),
        ];
        fields.extend(e.params.clone().map(|p| ("params", p)));
        fields.extend(e.return_step.clone().map(|r| ("return_step", r)));
        fields.extend(e.outcome.as_ref().map(|o| ("outcome", o.json().to_owned())));
        fields.extend(e.steps.clone().map(|s| ("steps", s)));
        fields.extend(e.created_by.clone().map(|s| ("created_by", s)));
        let mut inv = self.scripts.put_event.prepare_invoke();
        inv.key(self.event_key(&e.id)).arg(ttl).arg(e.token).arg(created);
        for (name, value) in &fields {
            inv.arg(*name).arg(value);
        }
        let Some(kept) = self.eval::<Option<u64>>(&inv, None).await?.0 else {
            return Ok(false);
        };
        if kept != created {
            let stale = list_cursor(&Event { created_at_ms: created, ..e.clone() });
            let _: Result<i64, _> = redis::cmd("ZREM")
                .arg(self.listed_key(&e.record.tenant))
                .arg(stale)
                .query_async(&mut conn)
                .await;
            self.index_event(e, kept, pending, ttl).await?;
        }
        if !pending {
            self.unindex_pending(&e.id).await?;
        }
        Ok(true)
    }

    /// Index `e` as created at `created`: in its tenant's listing, and as pending if it is.
    async fn index_event(&self, e: &Event, created: u64, pending: bool, ttl: u64) -> Result<(), StoreError> {
        if pending {
            self.index_pending(&e.id, created).await?;
        }
        self.index_listed(&Event { created_at_ms: created, ..e.clone() }, ttl).await
    }

    /// [`Store::restart_event`](oncerpc_core::Store::restart_event).
    pub(crate) async fn rerun_event(&self, id: &str, token: u64) -> Result<bool, StoreError> {
        let mut conn = self.conn.clone();
        let created: Option<u64> = redis::cmd("HGET")
            .arg(self.event_key(id))
            .arg("created")
            .query_async(&mut conn)
            .await
            .map_err(err)?;
        let Some(created) = created else { return Ok(false) };
        // Indexed before (a crash right after the restart leaves it listed) and after (a
        // concurrent listing may have dropped the entry while the event was finished).
        // A refused restart leaves a stale entry, which the next listing drops.
        self.index_pending(id, created).await?;
        let mut inv = self.scripts.restart_event.prepare_invoke();
        inv.key(self.event_key(id)).arg(token).arg(now_ms());
        let landed = self.eval::<i64>(&inv, None).await?.0 == 1;
        if landed {
            self.index_pending(id, created).await?;
        }
        Ok(landed)
    }

    /// [`Store::list_events`](oncerpc_core::Store::list_events).
    pub(crate) async fn list_page(
        &self,
        tenant: &str,
        filter: &EventFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<Event>, Option<String>), StoreError> {
        let mut page = Vec::new();
        if limit == 0 {
            return Ok((page, None));
        }
        let key = self.listed_key(tenant);
        let mut conn = self.conn.clone();
        // Index entries before the cursor, newest first, a chunk at a time; events that do
        // not match are read past. After LIST_SCAN_CHUNKS chunks the page ends early.
        let chunk = limit.clamp(16, 256);
        let mut from = cursor.filter(|c| parse_list_cursor(c).is_some()).map(|c| format!("({c}"));
        for _ in 0..LIST_SCAN_CHUNKS {
            let members: Vec<String> = redis::cmd("ZREVRANGEBYLEX")
                .arg(&key)
                .arg(from.as_deref().unwrap_or("+"))
                .arg("-")
                .arg("LIMIT")
                .arg(0)
                .arg(chunk)
                .query_async(&mut conn)
                .await
                .map_err(err)?;
            let ids: Vec<(&str, u64)> =
                members.iter().filter_map(|m| parse_list_cursor(m).map(|(at, id)| (id, at))).collect();
            let events = futures::future::try_join_all(ids.iter().map(|(id, _)| self.load_event(id))).await?;
            let now = now_ms();
            for ((member, (_, created)), event) in members.iter().zip(&ids).zip(events) {
                match event {
                    // An entry left by a creation time the event no longer has (a write
                    // that lost a race to create it): the event is listed under its own.
                    Some(e) if e.created_at_ms != *created => {
                        let _: Result<i64, _> =
                            redis::cmd("ZREM").arg(&key).arg(member).query_async(&mut conn).await;
                    }
                    Some(e) if *e.record.tenant == *tenant && e.expires_at_ms > now && filter.matches(&e) => {
                        page.push(e);
                        if page.len() == limit {
                            return Ok((page, Some(member.clone())));
                        }
                    }
                    Some(_) => {}
                    // Expired, or being created (its index entry is written first): dropped
                    // once past the grace.
                    None if created.saturating_add(PENDING_GRACE_MS) < now => {
                        let _: Result<i64, _> =
                            redis::cmd("ZREM").arg(&key).arg(member).query_async(&mut conn).await;
                    }
                    None => {}
                }
            }
            match members.last() {
                Some(last) if members.len() == chunk => from = Some(format!("({last}")),
                _ => return Ok((page, None)),
            }
        }
        let next = from.map(|f| f[1..].to_owned());
        Ok((page, next))
    }

    /// [`Store::pending_events`](oncerpc_core::Store::pending_events).
    pub(crate) async fn pending_page(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<Event>, Option<String>), StoreError> {
        let mut page = Vec::new();
        if limit == 0 {
            return Ok((page, None));
        }
        let after = cursor.and_then(parse_pending_cursor);
        let min = after.map_or_else(|| "-inf".to_owned(), |(at, _)| at.to_string());
        let mut conn = self.conn.clone();
        // Index entries from the cursor's score on, in (score, id) order, `limit` at a
        // time; `offset` counts the entries examined and still in the index.
        let mut offset = 0usize;
        loop {
            let batch: Vec<(String, f64)> = redis::cmd("ZRANGEBYSCORE")
                .arg(self.pending_key())
                .arg(&min)
                .arg("+inf")
                .arg("WITHSCORES")
                .arg("LIMIT")
                .arg(offset)
                .arg(limit)
                .query_async(&mut conn)
                .await
                .map_err(err)?;
            let fetched = batch.len();
            offset += fetched;
            let entries: Vec<(String, u64)> = batch
                .into_iter()
                .map(|(id, score)| (id, score as u64))
                .filter(|(id, score)| after.is_none_or(|(at, last)| (*score, id.as_str()) > (at, last)))
                .collect();
            let events =
                futures::future::try_join_all(entries.iter().map(|(id, _)| self.load_event(id))).await?;
            let now = now_ms();
            for ((id, score), event) in entries.iter().zip(events) {
                match event {
                    Some(e) if e.status == EventStatus::Processing => {
                        page.push(e);
                        if page.len() == limit {
                            return Ok((page, Some(format!("{score}:{id}"))));
                        }
                    }
                    // Finished, or gone (expired) for longer than a creation takes.
                    Some(_) => offset -= usize::from(self.unindex_pending(id).await?),
                    None if score.saturating_add(PENDING_GRACE_MS) < now => {
                        offset -= usize::from(self.unindex_pending(id).await?)
                    }
                    None => {}
                }
            }
            if fetched < limit {
                return Ok((page, None));
            }
        }
    }
}
