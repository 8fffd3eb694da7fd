//! Use and usefulness of memories (docs/tools.md, "Was a memory used?"): which memories a search
//! returned or a hook injected, when, and whether the session that got them then saw its tests pass.
//! Uses are written off the request path by a task of their own; what a result shows is read only for
//! the rows it shows.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::MemoryError;
use super::revalidate::CodeCheck;
use crate::domain::{FixRecord, MemoryUse, Passage, Receipt, Usage, UseEvent};
use crate::store::UseStore;

/// The default of `--expire-after-days`.
pub const DEFAULT_EXPIRE_AFTER_DAYS: u32 = 90;

/// After how long without a use a passage, or a fix gone from the code, is expired: hidden from searches
/// and hooks, listed by `memory expired` and the browser, restorable, never deleted (docs/tools.md,
/// "Expiry"). `None`: nothing expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expiry(pub Option<chrono::Duration>);

impl Expiry {
    /// After `days` days (`--expire-after-days`); 0: never.
    pub fn days(days: u32) -> Self {
        Self((days > 0).then(|| chrono::Duration::days(days.into())))
    }

    /// Whether a memory last written (or confirmed) at `written`, used as `usage` says, has gone
    /// unused longer than this at `now`: its latest write, use or keep is older.
    pub fn expired(self, written: DateTime<Utc>, usage: Option<&Usage>, now: DateTime<Utc>) -> bool {
        let Some(after) = self.0 else { return false };
        let last =
            usage.map_or(written, |u| written.max(u.last_used_at.unwrap_or(written)).max(u.kept_at.unwrap_or(written)));
        now - last > after
    }

    /// Whether archival passage `passage` expired: unused longer than this since it was last written.
    pub fn passage_expired(self, passage: &Passage, usage: Option<&Usage>, now: DateTime<Utc>) -> bool {
        self.expired(passage.updated_at.max(passage.created_at), usage, now)
    }

    /// Whether `fix` expired: its lines are gone from the code (`code`, [`CodeCheck::gone_from_code`])
    /// and it went unused longer than this since it was written or a passing run last showed it in place
    /// ([`Receipt::last_verified_at`]).
    pub fn fix_expired(self, fix: &FixRecord, code: &CodeCheck, usage: Option<&Usage>, now: DateTime<Utc>) -> bool {
        let confirmed = fix.receipt.as_ref().map_or(fix.updated_at, Receipt::last_verified_at).max(fix.updated_at);
        code.gone_from_code() && self.expired(confirmed, usage, now)
    }
}

/// How long a server answers usage from its copy of the `uses` table before it reads the table again
/// (in the background): what other processes recorded meanwhile (a hook's injections) shows that late.
pub const USAGE_REFRESH: std::time::Duration = std::time::Duration::from_secs(300);

/// The writer commits what was recorded within this window at once (one Lance commit, one fragment).
const WRITE_WINDOW: std::time::Duration = std::time::Duration::from_millis(500);

/// The uses of one actor's memories: recorded in the background, read for the rows a result shows.
/// A long-lived server keeps the actor's usage in memory ([`Self::cached`]): a search then reads no
/// table for it.
#[derive(Clone)]
pub struct UseLog {
    store: Arc<dyn UseStore>,
    actor_id: String,
    expiry: Expiry,
    tx: tokio::sync::mpsc::UnboundedSender<Message>,
    cache: Option<Arc<UsageCache>>,
}

/// The usage of every memory of the actor, as last read from the `uses` table plus what this process
/// recorded since.
#[derive(Default)]
struct UsageCache {
    /// `None` until the first read of the table completes.
    by_id: std::sync::RwLock<Option<HashMap<Uuid, Usage>>>,
    /// The uses this process recorded since the last read of the table started: a read may not hold
    /// them yet (they are written in the background), so they are counted again on top of it unless it
    /// does.
    recent: std::sync::Mutex<Vec<MemoryUse>>,
    /// When the table was last read (or a read started); `None`: never.
    read_at: std::sync::Mutex<Option<std::time::Instant>>,
}

impl UsageCache {
    /// The usage of `ids`, when the table was read.
    fn get(&self, ids: &[Uuid]) -> Option<HashMap<Uuid, Usage>> {
        let by_id = self.by_id.read().unwrap_or_else(|p| p.into_inner());
        let by_id = by_id.as_ref()?;
        Some(ids.iter().filter_map(|id| Some((*id, by_id.get(id)?.clone()))).collect())
    }

    /// Counts `uses` in, as the table will hold them once written.
    fn apply(&self, uses: &[MemoryUse]) {
        let mut by_id = self.by_id.write().unwrap_or_else(|p| p.into_inner());
        self.recent.lock().unwrap_or_else(|p| p.into_inner()).extend_from_slice(uses);
        if let Some(by_id) = by_id.as_mut() {
            add(by_id, uses);
        }
    }

    /// Takes `read` (every use of the actor in the table) as the usage, plus the uses this process
    /// recorded that it does not hold yet.
    fn replace(&self, read: &[MemoryUse]) {
        let mut by_id = self.by_id.write().unwrap_or_else(|p| p.into_inner());
        let held: std::collections::HashSet<Uuid> = read.iter().map(|u| u.id).collect();
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        recent.retain(|u| !held.contains(&u.id));
        let mut fresh = usage(read);
        add(&mut fresh, &recent);
        *by_id = Some(fresh);
    }

    /// Whether a read of the table is due (none yet, or the last older than [`USAGE_REFRESH`]); marks
    /// one started when it is.
    fn read_due(&self) -> bool {
        let mut read_at = self.read_at.lock().unwrap_or_else(|p| p.into_inner());
        let due = read_at.is_none_or(|at| at.elapsed() > USAGE_REFRESH);
        if due {
            *read_at = Some(std::time::Instant::now());
        }
        due
    }
}

enum Message {
    Uses(Vec<MemoryUse>),
    Flush(tokio::sync::oneshot::Sender<()>),
}

impl UseLog {
    /// The uses of `actor_id`'s memories in `store`, expiring as `expiry` says; starts the writer task on
    /// the current Tokio runtime.
    pub fn start(store: Arc<dyn UseStore>, actor_id: &str, expiry: Expiry) -> Self {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Message>();
        let writer = store.clone();
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                // what is recorded within the window goes into the same commit; a flush ends it at once
                let until = tokio::time::Instant::now() + WRITE_WINDOW;
                let mut batch = vec![first];
                while !matches!(batch.last(), Some(Message::Flush(_))) {
                    match tokio::time::timeout_at(until, rx.recv()).await {
                        Ok(Some(more)) => batch.push(more),
                        Ok(None) | Err(_) => break,
                    }
                }
                let mut uses = Vec::new();
                let mut waiting = Vec::new();
                for message in batch {
                    match message {
                        Message::Uses(more) => uses.extend(more),
                        Message::Flush(done) => waiting.push(done),
                    }
                }
                if let Err(e) = writer.record_uses(&uses).await {
                    tracing::warn!("could not record {} uses of memories: {e}", uses.len());
                }
                for done in waiting {
                    let _ = done.send(());
                }
            }
        });
        Self { store, actor_id: actor_id.to_string(), expiry, tx, cache: None }
    }

    /// The same log keeping the actor's usage in memory, for a long-lived server: read from the table
    /// in the background at the first search and every [`USAGE_REFRESH`] after, and updated by what
    /// this process records.
    #[must_use]
    pub fn cached(self) -> Self {
        Self { cache: Some(Arc::default()), ..self }
    }

    /// When unused memories expire.
    pub fn expiry(&self) -> Expiry {
        self.expiry
    }

    /// Keeps each of `ids` (restores it from expiry): its expiry counts from now. Returns once written.
    ///
    /// # Errors
    /// The store's.
    pub async fn keep(&self, session_id: &str, ids: &[Uuid]) -> Result<(), MemoryError> {
        let kept: Vec<MemoryUse> =
            ids.iter().map(|&id| MemoryUse::now(id, &self.actor_id, session_id, UseEvent::Kept)).collect();
        self.store.record_uses(&kept).await?;
        if let Some(cache) = &self.cache {
            cache.apply(&kept);
        }
        Ok(())
    }

    /// Queues a use of each of `ids` in `session_id`, now.
    pub fn record(&self, session_id: &str, event: UseEvent, ids: impl IntoIterator<Item = Uuid>) {
        let uses: Vec<MemoryUse> =
            ids.into_iter().map(|id| MemoryUse::now(id, &self.actor_id, session_id, event)).collect();
        if let Some(cache) = &self.cache {
            cache.apply(&uses);
        }
        if !uses.is_empty() && self.tx.send(Message::Uses(uses)).is_err() {
            tracing::warn!("the recorder of memory uses stopped; a use was not recorded");
        }
    }

    /// Waits until every use queued so far is written (call before exiting).
    pub async fn flush(&self) {
        let (done, wait) = tokio::sync::oneshot::channel();
        if self.tx.send(Message::Flush(done)).is_ok() {
            let _ = wait.await;
        }
    }

    /// How each of `ids` has been used so far; a memory never used is absent.
    ///
    /// # Errors
    /// The store's.
    pub async fn usage(&self, ids: &[Uuid]) -> Result<HashMap<Uuid, Usage>, MemoryError> {
        if let Some(cache) = &self.cache {
            if cache.read_due() {
                self.read_in_background(cache.clone());
            }
            if let Some(found) = cache.get(ids) {
                return Ok(found);
            }
        }
        Ok(usage(&self.store.uses_of(&self.actor_id, ids).await?))
    }

    /// Reads the actor's whole `uses` table into `cache`, in a task of its own (after writing what is
    /// queued, so the read holds it).
    fn read_in_background(&self, cache: Arc<UsageCache>) {
        let log = self.clone();
        tokio::spawn(async move {
            log.flush().await;
            match log.store.actor_uses(&log.actor_id).await {
                Ok(uses) => cache.replace(&uses),
                Err(e) => tracing::warn!("could not read the uses of memories: {e}"),
            }
        });
    }

    /// A passing test run in `session_id`: credits every memory the session was given (returned or
    /// injected) and not credited yet in it. Returns how many were credited now.
    ///
    /// # Errors
    /// The store's.
    pub async fn credit_pass(&self, session_id: &str) -> Result<usize, MemoryError> {
        self.flush().await;
        let session = self.store.session_uses(&self.actor_id, session_id).await?;
        let credited: HashSet<Uuid> =
            session.iter().filter(|u| u.event == UseEvent::Helped).map(|u| u.memory_id).collect();
        let given: HashSet<Uuid> = session
            .iter()
            .filter(|u| matches!(u.event, UseEvent::Returned | UseEvent::Injected) && !credited.contains(&u.memory_id))
            .map(|u| u.memory_id)
            .collect();
        let helped: Vec<MemoryUse> =
            given.iter().map(|&id| MemoryUse::now(id, &self.actor_id, session_id, UseEvent::Helped)).collect();
        self.store.record_uses(&helped).await?;
        if let Some(cache) = &self.cache {
            cache.apply(&helped);
        }
        Ok(helped.len())
    }
}

/// Counts `uses` into `by_id`.
fn add(by_id: &mut HashMap<Uuid, Usage>, uses: &[MemoryUse]) {
    for (id, usage) in usage(uses) {
        let entry = by_id.entry(id).or_default();
        entry.uses += usage.uses;
        entry.helped += usage.helped;
        entry.last_used_at = entry.last_used_at.max(usage.last_used_at);
        entry.kept_at = entry.kept_at.max(usage.kept_at);
    }
}

/// `uses` summed by memory: returns and injections counted and dated, credits counted.
pub fn usage(uses: &[MemoryUse]) -> HashMap<Uuid, Usage> {
    let mut by_memory: HashMap<Uuid, Usage> = HashMap::new();
    for u in uses {
        let entry = by_memory.entry(u.memory_id).or_default();
        match u.event {
            UseEvent::Helped => entry.helped += 1,
            UseEvent::Returned | UseEvent::Injected => {
                entry.uses += 1;
                entry.last_used_at = entry.last_used_at.max(Some(u.at));
            }
            UseEvent::Kept => entry.kept_at = entry.kept_at.max(Some(u.at)),
        }
    }
    by_memory
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    #[test]
    fn usage_counts_uses_and_credits_and_dates_the_latest_use() {
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let at = |h| Utc.with_ymd_and_hms(2026, 12, 7, h, 0, 0).unwrap();
        let used = |id, event, h| MemoryUse { at: at(h), ..MemoryUse::now(id, "me", "s1", event) };
        let uses = [
            used(a, UseEvent::Returned, 9),
            used(a, UseEvent::Injected, 11),
            used(a, UseEvent::Returned, 10),
            used(a, UseEvent::Helped, 12),
            used(b, UseEvent::Helped, 8),
        ];
        let by = usage(&uses);
        assert_eq!(by[&a], Usage { uses: 3, last_used_at: Some(at(11)), helped: 1, kept_at: None });
        // a credit is not a use
        assert_eq!(by[&b], Usage { uses: 0, last_used_at: None, helped: 1, kept_at: None });
    }

    #[test]
    fn a_memory_expires_once_its_latest_write_use_or_keep_is_older_than_the_limit() {
        let day = |d| Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap() + chrono::Duration::days(d);
        let expiry = Expiry::days(90);
        let written = day(0);
        assert!(!expiry.expired(written, None, day(90)), "90 days unused is not yet more than 90");
        assert!(expiry.expired(written, None, day(91)));
        let used = Usage { uses: 1, last_used_at: Some(day(30)), ..Usage::default() };
        assert!(!expiry.expired(written, Some(&used), day(110)), "a use renews it");
        assert!(expiry.expired(written, Some(&used), day(121)));
        let kept = Usage { kept_at: Some(day(200)), ..used };
        assert!(!expiry.expired(written, Some(&kept), day(250)), "a keep renews it");
        assert!(!Expiry::days(0).expired(written, None, day(10_000)), "0: never");
    }

    #[test]
    fn a_fix_expires_only_when_its_lines_are_gone_and_it_went_unused() {
        use super::super::revalidate::CodeState;
        let day = |d| Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap() + chrono::Duration::days(d);
        let fix = FixRecord {
            memory_id: Uuid::new_v4(),
            actor_id: "me".into(),
            project: "p".into(),
            session_id: "s".into(),
            created_at: day(0),
            updated_at: day(0),
            fix_description: "f".into(),
            error_type: "E".into(),
            file_paths: vec!["a.py".into()],
            outcome: "1 passed".into(),
            verified: true,
            receipt: None,
            embedded_text: "f".into(),
        };
        let check = |state| CodeCheck { state, why: String::new(), files_gone: false };
        let expiry = Expiry::days(90);
        assert!(expiry.fix_expired(&fix, &check(CodeState::Reverted), None, day(91)));
        assert!(!expiry.fix_expired(&fix, &check(CodeState::Reverted), None, day(90)), "not unused long enough");
        for state in [CodeState::InPlace, CodeState::ChangedAround, CodeState::Unknown] {
            assert!(!expiry.fix_expired(&fix, &check(state), None, day(1_000)), "{state:?}: its lines may be there");
        }
        let gone = CodeCheck { files_gone: true, ..check(CodeState::Unknown) };
        assert!(expiry.fix_expired(&fix, &gone, None, day(91)), "every file gone");
        let used = Usage { uses: 1, last_used_at: Some(day(50)), ..Usage::default() };
        assert!(!expiry.fix_expired(&fix, &gone, Some(&used), day(91)), "a use renews it");
        let rewritten = FixRecord { updated_at: day(60), ..fix };
        assert!(!expiry.fix_expired(&rewritten, &gone, None, day(91)), "a write renews it");
    }

    #[test]
    fn a_read_of_the_table_keeps_the_uses_it_does_not_hold_yet() {
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let cache = UsageCache::default();
        let first = MemoryUse::now(a, "me", "s1", UseEvent::Returned);
        // recorded before the first read completes: counted once that read is in
        cache.apply(std::slice::from_ref(&first));
        assert_eq!(cache.get(&[a]), None, "nothing read yet");
        cache.replace(&[]);
        assert_eq!(cache.get(&[a]).unwrap()[&a].uses, 1, "not written yet when the table was read");
        let second = MemoryUse::now(a, "me", "s1", UseEvent::Returned);
        cache.apply(std::slice::from_ref(&second));
        assert_eq!(cache.get(&[a]).unwrap()[&a].uses, 2);
        // the next read holds the first use (written meanwhile) and another process's: none counted twice
        let other = MemoryUse::now(b, "me", "hook:x", UseEvent::Injected);
        cache.replace(&[first, other]);
        let got = cache.get(&[a, b]).unwrap();
        assert_eq!((got[&a].uses, got[&b].uses), (2, 1));
        cache.replace(&[]);
        assert_eq!(cache.get(&[a]).unwrap()[&a].uses, 1, "only what is recorded and not read yet stays on top");
    }

    #[test]
    fn a_session_credits_a_memory_under_one_id() {
        let m = Uuid::new_v4();
        let once = MemoryUse::now(m, "me", "s1", UseEvent::Helped);
        assert_eq!(once.id, MemoryUse::now(m, "me", "s1", UseEvent::Helped).id);
        assert_ne!(once.id, MemoryUse::now(m, "me", "s2", UseEvent::Helped).id);
        assert_ne!(
            MemoryUse::now(m, "me", "s1", UseEvent::Returned).id,
            MemoryUse::now(m, "me", "s1", UseEvent::Returned).id
        );
    }
}
