//! Stores on object storage (`s3://bucket/prefix`; docs/storage.md, "When one machine is not enough"):
//! what a store there needs that a local directory does not.
//!
//! Lance commits a table version by writing its manifest with a conditional PUT (`If-None-Match: *`,
//! object_store's `PutMode::Create`): of two writers committing the same version, the store refuses
//! the second, which then rebases onto the first and retries. A store that accepts both PUTs loses the
//! first writer's commit without an error (lance-format/lance#4205), so [`probe_conditional_writes`]
//! refuses such a store at open. What keeps an insert-if-absent from writing a row twice across
//! machines is the tables' key ([`super::rows::key_field`]), which [`check_keyed`] requires of every
//! table on object storage.

use std::time::Duration;

use lancedb::Table;
use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload};

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
    // object_store's client panics on an endpoint it cannot make a request URI of
    for var in ["AWS_ENDPOINT_URL", "AWS_ENDPOINT", "AWS_ENDPOINT_URL_S3"] {
        if let Ok(endpoint) = std::env::var(var) {
            let valid =
                url::Url::parse(&endpoint).is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.has_host());
            if !valid {
                return Err(open_err(format!(
                    "{var}={endpoint:?} is not an http:// or https:// URL with a host (e.g. http://127.0.0.1:9000)"
                )));
            }
        }
    }
    let (store, base) = lance_io::object_store::ObjectStore::from_uri(uri)
        .await
        .map_err(|e| open_err(format!("cannot reach the object store: {e}")))?;
    let probe = base.join("_astra-mcp").join(format!("conditional-write-probe-{}", uuid::Uuid::new_v4()));
    let create = || PutOptions { mode: PutMode::Create, ..PutOptions::default() };
    store
        .inner
        .put_opts(&probe, PutPayload::from_static(b"first"), create())
        .await
        .map_err(|e| open_err(format!("cannot write to the object store: {e}")))?;
    let second = store.inner.put_opts(&probe, PutPayload::from_static(b"second"), create()).await;
    if let Err(e) = store.inner.delete(&probe).await {
        tracing::warn!(probe = %probe, "could not delete the conditional-write probe: {e}");
    }
    match second {
        Err(object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. }) => Ok(()),
        Ok(_) => Err(StoreError::UnsafeObjectStore { path: uri.to_string() }),
        Err(e) => Err(open_err(format!(
            "the object store answered a conditional write (If-None-Match: *) with an error, so Lance cannot \
             commit to it: {e}"
        ))),
    }
}

/// Refuses a table on object storage that has no key ([`super::rows::key_field`]): one created by an
/// older astra-mcp, whose concurrent inserts from two machines could write a row twice.
pub(super) async fn check_keyed(uri: &str, name: &str, table: &Table) -> Result<(), StoreError> {
    let keyed = match table.as_native() {
        Some(native) => {
            native.manifest().await.map(|m| !m.schema.unenforced_primary_key().is_empty()).map_err(super::backend)?
        }
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

/// The lease of one actor's distill runs on object storage: the object
/// `<prefix>/_astra-mcp/locks/<name>.json`, created with `If-None-Match: *` so that of two machines
/// starting a run at once one gets it. It records when it expires; a lease found expired (its holder
/// died) is deleted and taken. Renewed while held; deleted by [`crate::store::RunLock::release`].
///
/// Takeover of an expired lease is a delete then a conditional create, so two machines finding the
/// same expired lease cannot both take it; a holder that stalled past the expiry (not renewed in
/// [`RUN_LEASE`]) can find its lease taken, and says so in its log.
pub(super) async fn try_lease(uri: &str, name: &str) -> Result<Option<crate::store::RunLock>, StoreError> {
    let backend = |e: object_store::Error| StoreError::Backend(format!("distill run lease {name}: {e}"));
    let (store, base) = lance_io::object_store::ObjectStore::from_uri(uri).await.map_err(super::backend)?;
    let store = store.inner.clone();
    let key = base.join("_astra-mcp").join("locks").join(format!("{name}.json"));
    let holder = uuid::Uuid::new_v4().to_string();
    let body = |holder: &str| {
        let expires = chrono::Utc::now() + RUN_LEASE;
        PutPayload::from(serde_json::json!({"holder": holder, "expires_at": expires.to_rfc3339()}).to_string())
    };
    let create = || PutOptions { mode: PutMode::Create, ..PutOptions::default() };
    let mut taken = store.put_opts(&key, body(&holder), create()).await;
    if matches!(taken, Err(object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. })) {
        let expired = match store.get(&key).await {
            Ok(found) => {
                let bytes = found.bytes().await.map_err(backend)?;
                let lease: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
                lease["expires_at"]
                    .as_str()
                    .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                    .is_none_or(|t| t < chrono::Utc::now())
            }
            // released between our two requests
            Err(object_store::Error::NotFound { .. }) => true,
            Err(e) => return Err(backend(e)),
        };
        if !expired {
            return Ok(None);
        }
        tracing::warn!(lease = %key, "taking over an expired distill run lease (its holder stopped renewing it)");
        match store.delete(&key).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(backend(e)),
        }
        taken = store.put_opts(&key, body(&holder), create()).await;
    }
    match taken {
        Ok(_) => {}
        Err(object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. }) => return Ok(None),
        Err(e) => return Err(backend(e)),
    }
    let renewal = {
        let (store, key, holder) = (store.clone(), key.clone(), holder.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(RUN_LEASE / 3).await;
                if let Err(e) = store.put(&key, body(&holder)).await {
                    tracing::warn!(lease = %key, "could not renew the distill run lease: {e}");
                }
            }
        })
    };
    let release = async move {
        renewal.abort();
        if let Err(e) = store.delete(&key).await {
            tracing::warn!(lease = %key, "could not release the distill run lease (it expires by itself): {e}");
        }
    };
    Ok(Some(crate::store::RunLock::with_release(Box::pin(release))))
}
