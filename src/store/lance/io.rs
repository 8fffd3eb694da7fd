//! How the store reads its files: through Linux io_uring where the kernel allows it, else with Lance's
//! default local reader. Chosen per opening ([`super::OpenOptions::read_io`], `--lance-io`).
//!
//! Why: Lance's default local reader runs every read, a `pread(2)` of a few KiB, as its own task on
//! tokio's blocking pool, and a search makes about 190 of them at 10k rows (a take of 50 ranked rows
//! reads each row of each column on its own). Each costs two hand-offs between threads, which on a
//! small virtual machine cost more than the read. Lance's io_uring reader hands the reads to one ring
//! thread in batches instead: at 10k rows the rest of a search (its latency minus the query's
//! embedding) fell by 1.3 ms (archival) and 2.3 ms (fixes) (docs/internals/search-latency.md, "Reads
//! through io_uring").
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

use super::bucket::read_cache::CachedReadsProvider;

/// How the store reads its files (`--lance-io`, `ASTRA_LANCE_IO`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadIo {
    /// io_uring where this process can use it ([`uring_allowed`]), else blocking reads, said once.
    #[default]
    Auto,
    /// io_uring, or opening the store fails.
    Uring,
    /// Lance's default local reader: each read a `pread(2)` on tokio's blocking pool.
    Blocking,
}

/// Whether this process may use io_uring: a fact of the process and its kernel, probed once.
static URING_ALLOWED: OnceLock<Result<(), String>> = OnceLock::new();

/// The defaults of Lance's io_uring settings (environment variables Lance reads once, at its first
/// io_uring read), for the variables the user did not set:
/// - `LANCE_URING_THREAD_COUNT=1`: one ring thread. Two (Lance's default) were slower on a 2-core
///   machine (docs/internals/search-latency.md, "Reads through io_uring").
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

/// Default of [`super::OpenOptions::cache_mib`] (`--store-cache-mib`): room for the indexes of a store of
/// about 1M rows, and a bound a laptop can spare. Lance's own defaults (6 GiB of index cache and 1 GiB of
/// metadata cache) let a long-running server grow by gigabytes, because every commit writes a new manifest
/// and every index update new index files, each cached under its own key (docs/internals/fuzzing.md).
pub const DEFAULT_CACHE_MIB: u64 = 1024;

/// The Lance session a connection opens with: its caches bounded to `cache_mib` MiB in all, with io_uring
/// reads of a local directory ([`UringFileStoreProvider`]) where `read_io` and the kernel allow them,
/// else Lance's default readers. `local` is false for an object-store URI, whose reads never go through
/// io_uring.
///
/// Of `cache_mib`, on a local directory: three quarters for Lance's index cache (full-text and vector
/// index pages), one quarter for its metadata cache (manifests, file and fragment metadata). On an
/// `s3://` store: half for indexes, a quarter for metadata and a quarter for the immutable files read
/// from the bucket ([`super::bucket::read_cache::CachedReads`]).
///
/// # Errors
/// With [`ReadIo::Uring`] set for a local directory where this kernel refuses io_uring: the kernel's
/// error, and what to do.
pub(super) fn session(read_io: ReadIo, cache_mib: u64, local: bool) -> Result<Arc<Session>, String> {
    // `blocking` does not even set up a ring to check
    let uring = local
        && match read_io {
            ReadIo::Blocking => false,
            ReadIo::Auto => match uring_allowed() {
                Ok(()) => true,
                Err(e) => {
                    static LOGGED: std::sync::Once = std::sync::Once::new();
                    LOGGED.call_once(|| tracing::info!("the store reads with blocking reads: {e}"));
                    false
                }
            },
            ReadIo::Uring => match uring_allowed() {
                Ok(()) => true,
                Err(e) => return Err(format!("--lance-io uring: {e}; use --lance-io auto or blocking")),
            },
        };
    let registry = ObjectStoreRegistry::default();
    if uring {
        registry.insert("file", Arc::new(UringFileStoreProvider));
    }
    let bytes = usize::try_from(cache_mib.saturating_mul(1024 * 1024)).unwrap_or(usize::MAX);
    let (index, metadata) = if local {
        (bytes / 4 * 3, bytes - bytes / 4 * 3)
    } else {
        // a quarter of the budget for the immutable files read from the bucket
        let reads = bytes / 4;
        if let Some(s3) = registry.get_provider("s3") {
            registry.insert("s3", Arc::new(CachedReadsProvider::new(s3, reads as u64)));
        }
        (bytes / 2, bytes - bytes / 2 - reads)
    };
    Ok(Arc::new(Session::new(index, metadata, Arc::new(registry))))
}

/// Open files (`ulimit -n`) a process reading through io_uring needs: Lance's io_uring reader keeps every
/// file it reads open, up to 10,000, until 60 s after its last read (`lance-io` `uring::reader`
/// `HANDLE_CACHE`), so a burst of writes (a manifest and a data file per commit) runs past the common
/// soft limit of 1,024 (a helper's server failed at its 158th call with "Too many open files").
pub const URING_OPEN_FILES: u64 = 16_384;

/// Whether this process may read through io_uring (checked once): the kernel sets up a ring of the
/// depth Lance's ring threads use, Lance's settings are usable, and the open-files limit is at least
/// [`URING_OPEN_FILES`] (the soft limit is raised to it where the hard limit allows). The reason when
/// it may not.
pub fn uring_allowed() -> &'static Result<(), String> {
    URING_ALLOWED.get_or_init(probe_uring)
}

#[cfg(target_os = "linux")]
fn probe_uring() -> Result<(), String> {
    // Lance's settings as Lance reads them (`uring::thread`): a number, else the default
    let setting = |name: &str, default: usize| match std::env::var(name) {
        Ok(v) => v.parse::<usize>().unwrap_or(default),
        Err(_) => default,
    };
    if setting("LANCE_URING_THREAD_COUNT", 2) == 0 {
        return Err("LANCE_URING_THREAD_COUNT=0 leaves no ring thread".into());
    }
    // a lower memlock limit can refuse Lance's depth (default 16K entries) and allow a smaller one
    let depth = setting("LANCE_URING_QUEUE_DEPTH", 16 * 1024);
    let depth = u32::try_from(depth).map_err(|_| format!("LANCE_URING_QUEUE_DEPTH={depth} is not a ring depth"))?;
    io_uring::IoUring::new(depth).map(drop).map_err(|e| format!("this system does not allow io_uring ({e})"))?;
    raise_open_files_limit(URING_OPEN_FILES)
}

/// Raises this process's soft open-files limit to `want` where the hard limit allows (children, such as
/// the test commands `run_tests` runs, inherit it; 16,384 is harmless to them).
#[cfg(target_os = "linux")]
fn raise_open_files_limit(want: u64) -> Result<(), String> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(format!("cannot read the open-files limit ({})", std::io::Error::last_os_error()));
    }
    if limit.rlim_cur >= want {
        return Ok(());
    }
    if limit.rlim_max < want {
        return Err(format!(
            "io_uring reads keep up to 10,000 files open, and the open-files hard limit (ulimit -Hn) is {}; \
             raise it to {want}",
            limit.rlim_max
        ));
    }
    let raised = libc::rlimit { rlim_cur: want, rlim_max: limit.rlim_max };
    // SAFETY: setrlimit reads the struct it is given.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        return Err(format!("cannot raise the open-files limit to {want} ({})", std::io::Error::last_os_error()));
    }
    tracing::debug!(from = limit.rlim_cur, to = want, "raised the open-files limit for io_uring reads");
    Ok(())
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
    #[cfg(target_os = "linux")]
    #[test]
    fn the_open_files_limit_is_raised_for_io_uring_reads_within_the_hard_limit() {
        let get = || {
            let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) }, 0);
            limit
        };
        let before = get();
        let want = before.rlim_max.min(8192);
        let low = libc::rlimit { rlim_cur: 1024.min(want), rlim_max: before.rlim_max };
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &low) }, 0);
        super::raise_open_files_limit(want).unwrap();
        assert_eq!(get().rlim_cur, want, "the soft limit raised to what io_uring reads need");
        if before.rlim_max < libc::RLIM_INFINITY {
            let refused = super::raise_open_files_limit(before.rlim_max + 1).unwrap_err();
            assert!(refused.contains("ulimit -Hn") && refused.contains("raise it to"), "{refused}");
        }
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &before) }, 0);
    }

    // Lance registers `file+uring` on Linux only
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_file_url_gets_lance_s_io_uring_store_for_the_same_path() {
        use lance_io::object_store::{ObjectStoreParams, ObjectStoreProvider};
        let url = url::Url::from_directory_path("/tmp/my stores/#1 100%").unwrap();
        let store = super::UringFileStoreProvider.new_store(url.clone(), &ObjectStoreParams::default()).await.unwrap();
        assert_eq!(store.scheme(), "file+uring", "Lance reads it through io_uring");
        assert!(store.is_local() && store.has_direct_local_paths(), "and treats it as a local directory");
        let path = super::UringFileStoreProvider.extract_path(&url).unwrap();
        assert_eq!(path.as_ref(), "tmp/my stores/#1 100%", "the path decoded, not its URL spelling");
    }
}
