//! How the store reads its files: through Linux io_uring where the kernel allows it, else with Lance's
//! default local reader. Chosen once per process (`--lance-io`).
//!
//! Why: Lance's default local reader runs every read, a `pread(2)` of a few KiB, as its own task on
//! tokio's blocking pool, and a search makes about 190 of them at 10k rows (a take of 50 ranked rows
//! reads each row of each column on its own). Each costs two hand-offs between threads, which on a
//! small virtual machine cost more than the read. Lance's io_uring reader hands the reads to one ring
//! thread in batches instead: at 10k rows the rest of a search (its latency minus the query's
//! embedding) fell by 1.3 ms (archival) and 2.3 ms (fixes) (BENCHMARKS.md, 2026-12-02 08:20 UTC).
//!
//! How: Lance reads through io_uring when a store's URI has the scheme `file+uring://`. That scheme
//! cannot be given to lancedb: lancedb then creates a stray directory named after the URI in the
//! working directory, and Lance commits to a scheme it does not know with its `UnsafeCommitHandler`,
//! which does not check that another commit took the version first, so of two concurrent commits one
//! is lost (the test `concurrent_writers_on_one_directory_lose_nothing` lost rows that way). So the
//! store stays a plain path, and its connection gets a [`Session`] whose registry builds `file://`
//! stores as Lance builds `file+uring://` ones ([`UringFileStoreProvider`]): the same local file
//! system for writes, listings, deletions and the atomic commit, with reads through io_uring.

use std::sync::{Arc, OnceLock};

use lance::session::Session;
use lance_io::object_store::providers::local::FileStoreProvider;
use lance_io::object_store::{ObjectStore, ObjectStoreParams, ObjectStoreProvider, ObjectStoreRegistry};

/// How the store reads its files (`--lance-io`, `ASTRA_LANCE_IO`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ReadIo {
    /// io_uring where this kernel allows it (checked once per process by setting up a ring), else
    /// `blocking`. io_uring is often switched off: `sysctl kernel.io_uring_disabled`, or the seccomp
    /// profile of a container (Docker's default blocks it).
    #[default]
    Auto,
    /// Linux io_uring: Lance's ring threads (`LANCE_URING_THREAD_COUNT`, 1 unless set) read the files.
    /// Opening the store fails where io_uring is not allowed.
    Uring,
    /// Lance's default local reader: each read a `pread(2)` on tokio's blocking pool.
    Blocking,
}

static READ_IO: OnceLock<ReadIo> = OnceLock::new();
static URING_ALLOWED: OnceLock<Result<(), String>> = OnceLock::new();

/// Sets how every store this process opens reads its files. The first call wins; without one,
/// [`ReadIo::Auto`].
pub fn set_read_io(io: ReadIo) {
    let _ = READ_IO.set(io);
}

/// The defaults of Lance's io_uring settings (environment variables Lance reads once, at its first
/// io_uring read), for the variables the user did not set:
/// - `LANCE_URING_THREAD_COUNT=1`: one ring thread. Two (Lance's default) were slower on a 2-core
///   machine (BENCHMARKS.md).
/// - `LANCE_URING_POLL_TIMEOUT_MS=1000`: how often an idle ring thread wakes up (Lance's default,
///   10 ms, wakes an idle server 100 times a second). A request wakes it at once either way.
///
/// # Safety
/// Sets environment variables: call it before any other thread starts (at the top of `main`).
pub unsafe fn set_uring_defaults() {
    for (name, value) in [("LANCE_URING_THREAD_COUNT", "1"), ("LANCE_URING_POLL_TIMEOUT_MS", "1000")] {
        if std::env::var_os(name).is_none() {
            // SAFETY: the caller guarantees no other thread exists yet.
            unsafe { std::env::set_var(name, value) };
        }
    }
}

/// The Lance session a connection to a local store directory opens with: `Some` with io_uring reads
/// ([`UringFileStoreProvider`], Lance's default cache sizes), `None` for Lance's default (blocking
/// reads).
///
/// # Errors
/// With [`ReadIo::Uring`] set where this kernel refuses io_uring: the kernel's error, and what to do.
pub(super) fn session() -> Result<Option<Arc<Session>>, String> {
    // `blocking` does not even set up a ring to check
    let uring = match READ_IO.get().copied().unwrap_or_default() {
        ReadIo::Blocking => false,
        ReadIo::Auto => uring_allowed().is_ok(),
        ReadIo::Uring => match uring_allowed() {
            Ok(()) => true,
            Err(e) => {
                return Err(format!(
                    "--lance-io uring: this system does not allow io_uring ({e}); use --lance-io auto or blocking"
                ));
            }
        },
    };
    if !uring {
        return Ok(None);
    }
    let registry = ObjectStoreRegistry::default();
    registry.insert("file", Arc::new(UringFileStoreProvider));
    Ok(Some(Arc::new(Session::new(
        lance::dataset::DEFAULT_INDEX_CACHE_SIZE,
        lance::dataset::DEFAULT_METADATA_CACHE_SIZE,
        Arc::new(registry),
    ))))
}

/// Whether this process may set up an io_uring of the depth Lance's ring threads use (checked once);
/// the kernel's error when it may not.
pub fn uring_allowed() -> &'static Result<(), String> {
    URING_ALLOWED.get_or_init(|| {
        let result = probe_uring();
        match &result {
            Ok(()) => tracing::debug!("the store reads through io_uring"),
            Err(e) => tracing::info!("io_uring is not available ({e}): the store reads with blocking reads"),
        }
        result
    })
}

#[cfg(target_os = "linux")]
fn probe_uring() -> Result<(), String> {
    // Lance's ring depth (`LANCE_URING_QUEUE_DEPTH`, default 16K entries): a lower memlock limit can
    // refuse this depth and allow a smaller one
    let depth = std::env::var("LANCE_URING_QUEUE_DEPTH").ok().and_then(|d| d.parse().ok()).unwrap_or(16 * 1024);
    io_uring::IoUring::new(depth).map(drop).map_err(|e| e.to_string())
}

#[cfg(not(target_os = "linux"))]
fn probe_uring() -> Result<(), String> {
    Err("io_uring is Linux only".into())
}

/// Lance's local file store (`file://`) with its reads through io_uring: for a `file://` URL it builds
/// the store Lance builds for the same path as `file+uring://`. Everything but the reads is that of a
/// plain local store, and lancedb and Lance's commit still see a `file://` URL.
#[derive(Debug)]
pub struct UringFileStoreProvider;

#[async_trait::async_trait]
impl ObjectStoreProvider for UringFileStoreProvider {
    async fn new_store(&self, base_path: url::Url, params: &ObjectStoreParams) -> lance::Result<ObjectStore> {
        // the path is already percent-encoded, and keeps its encoding
        let uring = url::Url::parse(&format!("file+uring://{}", base_path.path()))
            .map_err(|e| lance::Error::invalid_input(format!("{base_path} as a file+uring URL: {e}")))?;
        FileStoreProvider.new_store(uring, params).await
    }

    fn calculate_object_store_prefix(
        &self,
        url: &url::Url,
        storage_options: Option<&std::collections::HashMap<String, String>>,
    ) -> lance::Result<String> {
        FileStoreProvider.calculate_object_store_prefix(url, storage_options)
    }
}

#[cfg(test)]
mod tests {
    use lance_io::object_store::{ObjectStoreParams, ObjectStoreProvider};

    #[tokio::test]
    async fn a_file_url_gets_lance_s_io_uring_store_for_the_same_path() {
        let url = url::Url::from_directory_path("/tmp/my stores/#1 100%").unwrap();
        let store = super::UringFileStoreProvider.new_store(url.clone(), &ObjectStoreParams::default()).await.unwrap();
        assert_eq!(store.scheme(), "file+uring", "Lance reads it through io_uring");
        assert!(store.is_local() && store.has_direct_local_paths(), "and treats it as a local directory");
        let path = super::UringFileStoreProvider.extract_path(&url).unwrap();
        assert_eq!(path.as_ref(), "tmp/my stores/#1 100%", "the path decoded, not its URL spelling");
    }
}
