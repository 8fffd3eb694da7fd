//! Stores on object storage (`s3://bucket/prefix`; docs/storage.md, "When one machine is not enough"):
//! what a store there needs that a local directory does not — the checks at open, leases instead of
//! `flock(2)`, and ([`read_cache`]) its immutable files kept in memory.
//!
//! Lance commits a table version by writing its manifest with a conditional PUT (`If-None-Match: *`,
//! object_store's `PutMode::Create`): of two writers committing the same version, the store refuses
//! the second, which then rebases onto the first and retries. A store that accepts both PUTs loses the
//! first writer's commit without an error (lance-format/lance#4205), so [`probe_conditional_writes`]
//! refuses such a store at open. What keeps an insert-if-absent from writing a row twice across
//! machines is the tables' key ([`super::rows::key_field`]), which [`check_keyed`] requires of every
//! table on object storage.

pub(super) mod read_cache;
use std::time::Duration;

use lancedb::Table;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};

use crate::store::StoreError;

/// How long a read on object storage may lag other processes' commits by default: each check for a
/// newer table version is a round trip to the bucket, so a search checks at most every half second,
/// and a write is found from another machine within a second.
pub const READ_CONSISTENCY: Duration = Duration::from_millis(500);

/// Writes one probe object twice with `If-None-Match: *` under `uri`'s prefix, then deletes it.
///
/// # Errors
/// [`StoreError::UnsafeObjectStore`] when the second write is accepted; [`StoreError::Open`] when the
/// store cannot be reached or written (credentials, endpoint, bucket), or answers the second write
/// with anything but "already exists" / "precondition failed".
pub(super) async fn probe_conditional_writes(uri: &str) -> Result<(), StoreError> {
    let open_err = |message: String| StoreError::Open { path: uri.to_string(), message };
    check_endpoint(uri)?;
    let (store, base) = lance_io::object_store::ObjectStore::from_uri(uri)
        .await
        .map_err(|e| open_err(format!("cannot reach the object store: {}", describe(&e))))?;
    let probe = base.join("_astra-mcp").join(format!("conditional-write-probe-{}", uuid::Uuid::new_v4()));
    let create = || PutOptions { mode: PutMode::Create, ..PutOptions::default() };
    store
        .inner
        .put_opts(&probe, PutPayload::from_static(b"first"), create())
        .await
        .map_err(|e| open_err(format!("cannot write to the object store: {}", describe(&e))))?;
    let second = store.inner.put_opts(&probe, PutPayload::from_static(b"second"), create()).await;
    if let Err(e) = store.inner.delete(&probe).await {
        tracing::warn!(probe = %probe, "could not delete the conditional-write probe: {e}");
    }
    match second {
        Err(e) if is_refused(&e) => Ok(()),
        Ok(_) => Err(StoreError::UnsafeObjectStore { path: uri.to_string() }),
        Err(e) => Err(open_err(format!(
            "the object store answered a conditional write (If-None-Match: *) with an error, so Lance cannot \
             commit to it: {e}"
        ))),
    }
}

/// Whether a store is under `uri`'s prefix: an object of its `meta` table (one listing request).
///
/// # Errors
/// [`StoreError::Open`] when the object store cannot be reached or listed (endpoint, credentials, bucket).
pub(super) async fn store_exists(uri: &str) -> Result<bool, StoreError> {
    use futures::StreamExt;
    let open_err = |message: String| StoreError::Open { path: uri.to_string(), message };
    check_endpoint(uri)?;
    let (store, base) = lance_io::object_store::ObjectStore::from_uri(uri)
        .await
        .map_err(|e| open_err(format!("cannot reach the object store: {}", describe(&e))))?;
    let meta = base.join(format!("{}.lance", super::tables::META_TABLE));
    match store.inner.list(Some(&meta)).next().await {
        None => Ok(false),
        Some(Ok(_)) => Ok(true),
        Some(Err(e)) => Err(open_err(format!("cannot read the object store: {}", describe(&e)))),
    }
}

/// Refuses an endpoint override (`AWS_ENDPOINT_URL` and its aliases) the S3 client cannot use, with a
/// message that says why: object_store's client panics on one it cannot make a request URI of, and
/// refuses plain HTTP without `AWS_ALLOW_HTTP` with no more than "builder error".
fn check_endpoint(uri: &str) -> Result<(), StoreError> {
    let open_err = |message: String| StoreError::Open { path: uri.to_string(), message };
    for var in ["AWS_ENDPOINT_URL", "AWS_ENDPOINT", "AWS_ENDPOINT_URL_S3"] {
        if let Ok(endpoint) = std::env::var(var) {
            let valid =
                url::Url::parse(&endpoint).is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.has_host());
            if !valid {
                return Err(open_err(format!(
                    "{var}={endpoint:?} is not an http:// or https:// URL with a host (e.g. http://127.0.0.1:9000)"
                )));
            }
            if endpoint.starts_with("http://") && !is_truthy(std::env::var("AWS_ALLOW_HTTP").ok().as_deref()) {
                return Err(open_err(format!(
                    "{var}={endpoint:?} is plain http://, which the S3 client refuses unless AWS_ALLOW_HTTP=true \
                     (or use the server's https:// endpoint)"
                )));
            }
        }
    }
    Ok(())
}

/// Whether an environment value is "true" as object_store reads its boolean settings.
fn is_truthy(value: Option<&str>) -> bool {
    value.is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "on" | "yes" | "y"))
}

/// An object store error as a user reads it: a failed lookup of credentials (the AWS chain's debug
/// dump) says which settings give them.
fn describe(e: &dyn std::fmt::Display) -> String {
    let text = e.to_string();
    if text.contains("FailedToLoadToken") || text.contains("CredentialsNotLoaded") || text.contains("no credentials") {
        "no AWS credentials were found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or run where \
         an instance role gives them"
            .to_string()
    } else {
        text
    }
}

/// Refuses a table on object storage that has no key ([`super::rows::key_field`]): one created by an
/// older astra-mcp, whose concurrent inserts from two machines could write a row twice.
pub(super) async fn check_keyed(uri: &str, name: &str, table: &Table) -> Result<(), StoreError> {
    let keyed = match table.as_native() {
        Some(native) => native
            .manifest()
            .await
            .map(|m| !m.schema.unenforced_primary_key().is_empty())
            .map_err(super::handle::backend)?,
        None => false,
    };
    if keyed {
        return Ok(());
    }
    Err(StoreError::Open {
        path: uri.to_string(),
        message: format!(
            "its table `{name}` was created by an older astra-mcp, without the key that lets writers on several \
             machines detect each other's inserts; move the store: `astra-mcp memory export` it from where it is \
             and `astra-mcp memory import` the file into a new store"
        ),
    })
}

/// How long a distill run's lease on object storage lasts without renewal: a machine that dies while
/// it holds one keeps its actor's runs refused this long. The holder renews it every third of this.
pub const RUN_LEASE: Duration = Duration::from_secs(10 * 60);

/// How long the lease of a table's creation ([`super::open`]) lasts without renewal: a machine that dies
/// while creating a store's tables keeps the others waiting this long.
pub const CREATION_LEASE: Duration = Duration::from_secs(30);

/// A lease on object storage (`what`: what it excludes, for the log): the object
/// `<prefix>/_astra-mcp/locks/<name>.json`, taken by [`take_lease`] so that of two machines taking it at
/// once one gets it: one actor's distill runs ([`RUN_LEASE`]), the creation of a table
/// ([`CREATION_LEASE`]). Renewed every third of `ttl` while held, each renewal conditional on the
/// version this holder wrote last, so a holder whose lease was taken over (it stalled past `ttl`) stops
/// renewing, says so in its log, and leaves the new holder's lease in place; deleted by
/// [`crate::store::RunLock::release`].
pub(super) async fn try_lease(
    uri: &str,
    name: &str,
    ttl: Duration,
    what: &'static str,
) -> Result<Option<crate::store::RunLock>, StoreError> {
    let backend = |e: object_store::Error| StoreError::Backend(format!("{what} lease {name}: {e}"));
    let (store, base) = lance_io::object_store::ObjectStore::from_uri(uri).await.map_err(super::handle::backend)?;
    let store = store.inner.clone();
    let key = base.join("_astra-mcp").join("locks").join(format!("{name}.json"));
    let holder = uuid::Uuid::new_v4().to_string();
    let Some(version) = take_lease(store.as_ref(), &key, &holder, ttl).await.map_err(backend)? else { return Ok(None) };
    // the version this holder wrote last; `None` once another holder took the lease over
    let held = std::sync::Arc::new(std::sync::Mutex::new(Some(version)));
    let renewal = {
        let (store, key, holder, held) = (store.clone(), key.clone(), holder.clone(), held.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(ttl / 3).await;
                let Some(version) = held.lock().unwrap_or_else(|p| p.into_inner()).clone() else { return };
                let renew = PutOptions { mode: PutMode::Update(version), ..PutOptions::default() };
                match store.put_opts(&key, lease_body(&holder, ttl), renew).await {
                    Ok(put) => *held.lock().unwrap_or_else(|p| p.into_inner()) = Some(put.into()),
                    Err(e) if is_refused(&e) => {
                        tracing::warn!(
                            lease = %key,
                            "the {what} lease was taken over by another machine (this process did not renew it \
                             within {} s): it no longer excludes the others",
                            ttl.as_secs()
                        );
                        *held.lock().unwrap_or_else(|p| p.into_inner()) = None;
                        return;
                    }
                    Err(e) => tracing::warn!(lease = %key, "could not renew the {what} lease: {e}"),
                }
            }
        })
    };
    let release = async move {
        renewal.abort();
        if held.lock().unwrap_or_else(|p| p.into_inner()).is_none() {
            return; // another holder's lease now
        }
        if let Err(e) = store.delete(&key).await {
            tracing::warn!(lease = %key, "could not release the {what} lease (it expires by itself): {e}");
        }
    };
    Ok(Some(crate::store::RunLock::with_release(Box::pin(release))))
}

/// Takes the lease object `key` for `holder` for `ttl`: creates it (`If-None-Match: *`), or, when the one there
/// has expired (its holder died), replaces it on condition that it is still the version read
/// ([`replace_lease`]). Of several machines that find the same expired lease, one replaces it and the
/// others are refused. Returns the version written; `None` when another holder has the lease.
///
/// # Errors
/// The object store's, but for the refusals of a conditional write.
async fn take_lease(
    store: &dyn ObjectStore,
    key: &object_store::path::Path,
    holder: &str,
    ttl: Duration,
) -> object_store::Result<Option<UpdateVersion>> {
    let create = || async {
        match store
            .put_opts(key, lease_body(holder, ttl), PutOptions { mode: PutMode::Create, ..PutOptions::default() })
            .await
        {
            Ok(put) => Ok(Some(put.into())),
            Err(e) if is_refused(&e) => Ok(None),
            Err(e) => Err(e),
        }
    };
    if let Some(version) = create().await? {
        return Ok(Some(version));
    }
    match read_lease(store, key).await? {
        Lease::Live => Ok(None),
        // released between the two requests
        Lease::Gone => create().await,
        Lease::Expired(version) => replace_lease(store, key, holder, version, ttl).await,
    }
}

/// A lease object as read.
enum Lease {
    /// None there.
    Gone,
    /// Held until a time to come.
    Live,
    /// Past its expiry (or unreadable), at this version.
    Expired(UpdateVersion),
}

async fn read_lease(store: &dyn ObjectStore, key: &object_store::path::Path) -> object_store::Result<Lease> {
    let found = match store.get(key).await {
        Ok(found) => found,
        Err(object_store::Error::NotFound { .. }) => return Ok(Lease::Gone),
        Err(e) => return Err(e),
    };
    let version = UpdateVersion { e_tag: found.meta.e_tag.clone(), version: found.meta.version.clone() };
    let lease: serde_json::Value = serde_json::from_slice(&found.bytes().await?).unwrap_or_default();
    let expired = lease["expires_at"]
        .as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .is_none_or(|t| t < chrono::Utc::now());
    Ok(if expired { Lease::Expired(version) } else { Lease::Live })
}

/// Replaces the expired lease `key` read at `version` with one of `holder`, on condition that it is
/// still that version (`If-Match` its ETag): `None` when another machine replaced or renewed it first.
async fn replace_lease(
    store: &dyn ObjectStore,
    key: &object_store::path::Path,
    holder: &str,
    version: UpdateVersion,
    ttl: Duration,
) -> object_store::Result<Option<UpdateVersion>> {
    let replace = PutOptions { mode: PutMode::Update(version), ..PutOptions::default() };
    match store.put_opts(key, lease_body(holder, ttl), replace).await {
        Ok(put) => {
            tracing::warn!(lease = %key, "took over an expired lease (its holder stopped renewing it)");
            Ok(Some(put.into()))
        }
        Err(e) if is_refused(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The body of a lease held by `holder`: who, and until when (now + `ttl`).
fn lease_body(holder: &str, ttl: Duration) -> PutPayload {
    let expires = chrono::Utc::now() + ttl;
    PutPayload::from(serde_json::json!({"holder": holder, "expires_at": expires.to_rfc3339()}).to_string())
}

/// A conditional write refused: the object exists (`If-None-Match: *`) or is not the version named
/// (`If-Match`).
fn is_refused(e: &object_store::Error) -> bool {
    matches!(e, object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. })
}

#[cfg(test)]
mod tests {
    //! The lease's conditional writes on object_store's in-memory store, which checks `If-None-Match`
    //! and `If-Match` as S3 does (tests/it/bucket.rs runs distill on the S3 test server).

    use object_store::memory::InMemory;

    use super::*;

    fn key() -> object_store::path::Path {
        object_store::path::Path::from("db/_astra-mcp/locks/distill-0123456789abcdef.json")
    }

    /// Writes a lease of `holder` that expires at `expires_at` (in the past: its holder died).
    async fn plant(store: &InMemory, holder: &str, expires_at: chrono::DateTime<chrono::Utc>) {
        let body = serde_json::json!({"holder": holder, "expires_at": expires_at.to_rfc3339()}).to_string();
        store.put(&key(), PutPayload::from(body)).await.unwrap();
    }

    async fn holder(store: &InMemory) -> String {
        let bytes = store.get(&key()).await.unwrap().bytes().await.unwrap();
        serde_json::from_slice::<serde_json::Value>(&bytes).unwrap()["holder"].as_str().unwrap().to_string()
    }

    #[tokio::test]
    async fn a_held_lease_is_refused_and_an_expired_one_is_taken() {
        let store = InMemory::new();
        assert!(take_lease(&store, &key(), "a", RUN_LEASE).await.unwrap().is_some(), "no lease yet: created");
        assert!(take_lease(&store, &key(), "b", RUN_LEASE).await.unwrap().is_none(), "a holds it");
        assert_eq!(holder(&store).await, "a");
        plant(&store, "dead", chrono::Utc::now() - chrono::Duration::seconds(1)).await;
        assert!(take_lease(&store, &key(), "c", RUN_LEASE).await.unwrap().is_some(), "expired: taken over");
        assert_eq!(holder(&store).await, "c");
        assert!(take_lease(&store, &key(), "d", RUN_LEASE).await.unwrap().is_none(), "c holds it until it expires");
    }

    /// Two machines read the same expired lease, then both replace it: the second replacement is
    /// refused, since the lease is no longer the version it read (a delete then a create would let
    /// the second delete the first one's new lease and take it too).
    #[tokio::test]
    async fn of_two_machines_that_found_the_same_expired_lease_one_takes_it() {
        let store = InMemory::new();
        plant(&store, "dead", chrono::Utc::now() - chrono::Duration::seconds(1)).await;
        let (Lease::Expired(first), Lease::Expired(second)) =
            (read_lease(&store, &key()).await.unwrap(), read_lease(&store, &key()).await.unwrap())
        else {
            panic!("both read the lease as expired");
        };
        assert!(replace_lease(&store, &key(), "a", first, RUN_LEASE).await.unwrap().is_some(), "the first takes it");
        assert!(
            replace_lease(&store, &key(), "b", second, RUN_LEASE).await.unwrap().is_none(),
            "the second is refused"
        );
        assert_eq!(holder(&store).await, "a");
    }
}
