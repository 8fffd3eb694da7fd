//! Reads of a store's immutable files on object storage, kept in memory ([`CachedReads`]).
//!
//! Why: on a bucket every read of a file is a request. Lance caches indexes and metadata
//! ([`super::super::io::session`]) but not data: the near-duplicate search of each insert scans the vector
//! column of every fragment the vector index does not cover yet and reads its candidates' rows, and
//! the merge-insert reads the `id` column of every fragment. With eight writers on one bucket that was
//! 26 GETs per acknowledged write, 95 % of them the same bytes of the same file read again
//! (docs/internals/writes.md, "Reads of immutable files on a bucket").
//!
//! Why it is correct: Lance never changes a file once written under a table's `data/`, `_indices/` or
//! `_deletions/` (Lance's format: data files and deletion files get fresh random names, an index its
//! own UUID directory; what changes a table is a new manifest under `_versions/`, which is never
//! cached here). The bytes read once at a path are therefore the bytes at that path for as long as it
//! exists, whichever machine wrote them. A later version that no longer lists a file simply stops
//! reading it, and it ages out of the cache. A file this process writes there is kept as written, once
//! the store has taken it: the next insert's search reads the newest fragment back.
//!
//! Local directories do not need it: their reads come from the kernel's page cache.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use lance_io::object_store::{ObjectStore as LanceObjectStore, ObjectStoreParams, ObjectStoreProvider};
use object_store::path::Path;
use object_store::{
    Attributes, CopyOptions, GetOptions, GetRange, GetResult, GetResultPayload, ListResult, MultipartUpload,
    ObjectMeta, ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

/// Largest file or range kept: bigger reads (a compaction's or an export's whole data files) pass
/// through, so one of them cannot evict everything else. Lance reads a data file smaller than its
/// block size (64 KiB on object stores) whole; larger files by ranges of a few KiB to a few MiB.
pub const MAX_ENTRY_BYTES: u64 = 4 * 1024 * 1024;

/// What a read asked for: a whole file (`range` `None`) or a byte range of it, in the store of Lance's
/// store prefix `store` (scheme and bucket: one cache serves every store of a provider).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    store: Arc<str>,
    path: Path,
    range: Option<Range<u64>>,
}

/// The bytes of a [`Key`], with the object's metadata as the store answered it.
#[derive(Debug, Clone)]
pub struct Entry {
    bytes: Bytes,
    meta: ObjectMeta,
    attributes: Attributes,
}

/// The memory [`CachedReads`] keep files in: at most its capacity in bytes (moka's weigher), the least
/// useful out first (moka's TinyLFU). Cloned, it is the same cache.
pub type ReadCache = moka::sync::Cache<Key, Entry>;

/// A [`ReadCache`] of at most `capacity` bytes.
pub fn read_cache(capacity: u64) -> ReadCache {
    moka::sync::Cache::builder()
        .weigher(|_: &Key, e: &Entry| u32::try_from(e.bytes.len()).unwrap_or(u32::MAX))
        .max_capacity(capacity)
        .build()
}

/// An object store whose reads of immutable Lance files ([`is_immutable`]) are served from a
/// [`ReadCache`] after their first request, or their write through it. Everything else (writes, listings, manifests,
/// conditional or versioned reads, `HEAD`) goes to the store as it is.
#[derive(Debug)]
pub struct CachedReads {
    inner: Arc<dyn ObjectStore>,
    /// Lance's store prefix of `inner` (scheme and bucket), part of each [`Key`].
    store: Arc<str>,
    cache: ReadCache,
    /// Largest entry kept: [`MAX_ENTRY_BYTES`], or the cache's whole capacity if that is less.
    max_entry: u64,
}

impl CachedReads {
    /// `inner`, whose Lance store prefix is `store`, with its immutable files kept in `cache`.
    pub fn new(inner: Arc<dyn ObjectStore>, store: &str, cache: ReadCache) -> Self {
        let max_entry = MAX_ENTRY_BYTES.min(cache.policy().max_capacity().unwrap_or(u64::MAX));
        Self { inner, store: store.into(), cache, max_entry }
    }

    fn key(&self, path: &Path, range: Option<Range<u64>>) -> Key {
        Key { store: self.store.clone(), path: path.clone(), range }
    }

    /// Bytes held now (after moka's pending evictions ran).
    #[cfg(test)]
    fn held_bytes(&self) -> u64 {
        self.cache.run_pending_tasks();
        self.cache.weighted_size()
    }
}

impl std::fmt::Display for CachedReads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CachedReads({})", self.inner)
    }
}

/// Whether Lance never rewrites the file at `path`: a file in the `data/`, `_indices/` or
/// `_deletions/` directory of a table (a directory named `<name>.lance`).
pub fn is_immutable(path: &Path) -> bool {
    let parts: Vec<_> = path.parts().collect();
    parts
        .windows(3)
        .any(|w| w[0].as_ref().ends_with(".lance") && matches!(w[1].as_ref(), "data" | "_indices" | "_deletions"))
}

/// A plain read: no condition, version or `HEAD`, so its answer depends on the path and range alone.
fn plain(options: &GetOptions) -> bool {
    options.if_match.is_none()
        && options.if_none_match.is_none()
        && options.if_modified_since.is_none()
        && options.if_unmodified_since.is_none()
        && options.version.is_none()
        && !options.head
}

/// `entry`'s bytes `range` (of the entry's own bytes) as the answer of a read.
fn answer(entry: Entry, range: Range<u64>, offset: u64) -> GetResult {
    let bytes = entry.bytes.slice((range.start - offset) as usize..(range.end - offset) as usize);
    GetResult {
        payload: GetResultPayload::Stream(futures::stream::once(async move { Ok(bytes) }).boxed()),
        meta: entry.meta,
        range,
        attributes: entry.attributes,
        extensions: Default::default(),
    }
}

#[async_trait::async_trait]
impl ObjectStore for CachedReads {
    async fn get_opts(&self, location: &Path, options: GetOptions) -> object_store::Result<GetResult> {
        if !plain(&options) || !is_immutable(location) {
            return self.inner.get_opts(location, options).await;
        }
        // the whole file, when an earlier read took it whole
        if let Some(entry) = self.cache.get(&self.key(location, None)) {
            let size = entry.meta.size;
            let range = match &options.range {
                None => Some(0..size),
                Some(r) => r.as_range(size).ok(),
            };
            // a range past the end: the store answers it, with its own error
            if let Some(range) = range {
                return Ok(answer(entry, range, 0));
            }
        }
        let key = match &options.range {
            None => self.key(location, None),
            Some(GetRange::Bounded(r)) if r.end > r.start && r.end - r.start <= self.max_entry => {
                let key = self.key(location, Some(r.clone()));
                if let Some(entry) = self.cache.get(&key) {
                    return Ok(answer(entry, r.clone(), r.start));
                }
                key
            }
            Some(_) => return self.inner.get_opts(location, options).await,
        };
        let result = self.inner.get_opts(location, options).await?;
        let len = result.range.end - result.range.start;
        let whole = key.range.is_none();
        if len > self.max_entry || (whole && result.range != (0..result.meta.size)) {
            return Ok(result);
        }
        let (meta, attributes, range) = (result.meta.clone(), result.attributes.clone(), result.range.clone());
        let bytes = result.bytes().await?;
        let entry = Entry { bytes, meta, attributes };
        self.cache.insert(key, entry.clone());
        let offset = range.start;
        Ok(answer(entry, range, offset))
    }

    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        // a file this process writes it soon reads back (the next insert's near-duplicate search scans
        // the newest fragment): kept as written, once the store has taken it
        let keep = is_immutable(location) && payload.content_length() as u64 <= self.max_entry;
        let written = keep.then(|| (payload.clone(), opts.attributes.clone()));
        let result = self.inner.put_opts(location, payload, opts).await?;
        if let Some((payload, attributes)) = written {
            let bytes = Bytes::from(payload);
            let meta = ObjectMeta {
                location: location.clone(),
                last_modified: chrono::Utc::now(),
                size: bytes.len() as u64,
                e_tag: result.e_tag.clone(),
                version: result.version.clone(),
            };
            self.cache.insert(self.key(location, None), Entry { bytes, meta, attributes });
        }
        Ok(result)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// Lance's provider for a scheme (`s3`), with the reads of the stores it builds through
/// [`CachedReads`], all stores of one provider sharing one [`ReadCache`] of `capacity` bytes (Lance
/// builds a store per bucket and set of options, and may build several for one connection).
#[derive(Debug)]
pub struct CachedReadsProvider {
    provider: Arc<dyn ObjectStoreProvider>,
    cache: ReadCache,
}

impl CachedReadsProvider {
    pub fn new(provider: Arc<dyn ObjectStoreProvider>, capacity: u64) -> Self {
        Self { provider, cache: read_cache(capacity) }
    }
}

#[async_trait::async_trait]
impl ObjectStoreProvider for CachedReadsProvider {
    async fn new_store(&self, base_path: url::Url, params: &ObjectStoreParams) -> lance::Result<LanceObjectStore> {
        let mut store = self.provider.new_store(base_path, params).await?;
        store.inner = Arc::new(CachedReads::new(store.inner.clone(), &store.store_prefix, self.cache.clone()));
        Ok(store)
    }

    fn extract_path(&self, url: &url::Url) -> lance::Result<Path> {
        self.provider.extract_path(url)
    }

    fn calculate_object_store_prefix(
        &self,
        url: &url::Url,
        storage_options: Option<&std::collections::HashMap<String, String>>,
    ) -> lance::Result<String> {
        self.provider.calculate_object_store_prefix(url, storage_options)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use object_store::memory::InMemory;
    use object_store::{ObjectStoreExt, PutPayload};

    use super::*;

    /// An in-memory store that counts the reads that reach it.
    #[derive(Debug, Default)]
    struct Counted {
        store: InMemory,
        reads: Mutex<Vec<String>>,
    }

    impl std::fmt::Display for Counted {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Counted")
        }
    }

    #[async_trait::async_trait]
    impl ObjectStore for Counted {
        async fn get_opts(&self, location: &Path, options: GetOptions) -> object_store::Result<GetResult> {
            self.reads.lock().unwrap().push(format!("{location} {:?}", options.range));
            self.store.get_opts(location, options).await
        }
        async fn put_opts(&self, l: &Path, p: PutPayload, o: PutOptions) -> object_store::Result<PutResult> {
            self.store.put_opts(l, p, o).await
        }
        async fn put_multipart_opts(
            &self,
            l: &Path,
            o: PutMultipartOptions,
        ) -> object_store::Result<Box<dyn MultipartUpload>> {
            self.store.put_multipart_opts(l, o).await
        }
        fn delete_stream(
            &self,
            l: BoxStream<'static, object_store::Result<Path>>,
        ) -> BoxStream<'static, object_store::Result<Path>> {
            self.store.delete_stream(l)
        }
        fn list(&self, p: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
            self.store.list(p)
        }
        fn list_with_offset(&self, p: Option<&Path>, o: &Path) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
            self.store.list_with_offset(p, o)
        }
        async fn list_with_delimiter(&self, p: Option<&Path>) -> object_store::Result<ListResult> {
            self.store.list_with_delimiter(p).await
        }
        async fn copy_opts(&self, f: &Path, t: &Path, o: CopyOptions) -> object_store::Result<()> {
            self.store.copy_opts(f, t, o).await
        }
    }

    async fn setup(capacity: u64) -> (Arc<Counted>, CachedReads) {
        let counted = Arc::new(Counted::default());
        let cached = CachedReads::new(counted.clone(), "s3$bucket", read_cache(capacity));
        for (path, body) in [
            ("store/archival.lance/data/a1.lance", &b"0123456789"[..]),
            ("store/archival.lance/_versions/2.manifest", b"manifest"),
        ] {
            counted.store.put(&Path::from(path), PutPayload::from_static(body)).await.unwrap();
        }
        (counted, cached)
    }

    fn reads(counted: &Counted) -> usize {
        counted.reads.lock().unwrap().len()
    }

    #[tokio::test]
    async fn a_data_file_read_twice_is_requested_once_and_its_ranges_come_from_the_first_read() {
        let (counted, cached) = setup(1 << 20).await;
        let data = Path::from("store/archival.lance/data/a1.lance");
        assert_eq!(cached.get(&data).await.unwrap().bytes().await.unwrap(), &b"0123456789"[..]);
        assert_eq!(cached.get(&data).await.unwrap().bytes().await.unwrap(), &b"0123456789"[..]);
        assert_eq!(reads(&counted), 1, "the second whole read came from memory");
        let part = cached.get_range(&data, 3..7).await.unwrap();
        assert_eq!(part, &b"3456"[..], "a range sliced from the whole file");
        let result = cached.get_opts(&data, GetOptions { range: Some((2..5).into()), ..Default::default() }).await;
        let result = result.unwrap();
        assert_eq!(
            (result.range.clone(), result.meta.size),
            (2..5, 10),
            "the range and the file's size as S3 gives them"
        );
        assert_eq!(result.bytes().await.unwrap(), &b"234"[..]);
        assert_eq!(reads(&counted), 1, "no request for either range");
        // past the end as the store answers it: a range running past it ends there, one starting past it fails
        assert_eq!(cached.get_range(&data, 8..20).await.unwrap(), counted.store.get_range(&data, 8..20).await.unwrap());
        assert!(
            cached.get_range(&data, 12..20).await.is_err() && counted.store.get_range(&data, 12..20).await.is_err()
        );
    }

    #[tokio::test]
    async fn ranges_of_a_file_never_read_whole_are_kept_by_range() {
        let (counted, cached) = setup(1 << 20).await;
        let data = Path::from("store/archival.lance/data/a1.lance");
        assert_eq!(cached.get_range(&data, 1..4).await.unwrap(), &b"123"[..]);
        assert_eq!(cached.get_range(&data, 1..4).await.unwrap(), &b"123"[..]);
        assert_eq!(reads(&counted), 1);
        assert_eq!(cached.get_range(&data, 4..6).await.unwrap(), &b"45"[..]);
        assert_eq!(reads(&counted), 2, "another range is another request");
    }

    #[tokio::test]
    async fn manifests_conditional_reads_and_files_beyond_the_cache_go_to_the_store() {
        let (counted, cached) = setup(1 << 20).await;
        let manifest = Path::from("store/archival.lance/_versions/2.manifest");
        cached.get(&manifest).await.unwrap();
        cached.get(&manifest).await.unwrap();
        assert_eq!(reads(&counted), 2, "a manifest is read from the store every time");
        let data = Path::from("store/archival.lance/data/a1.lance");
        let conditional = GetOptions { if_none_match: Some("\"x\"".into()), ..Default::default() };
        cached.get_opts(&data, conditional.clone()).await.unwrap();
        cached.get_opts(&data, conditional).await.unwrap();
        assert_eq!(reads(&counted), 4, "a conditional read is the store's to answer");

        let (counted, small) = setup(4).await;
        small.get(&data).await.unwrap();
        small.get(&data).await.unwrap();
        assert!(small.held_bytes() <= 4, "a 4-byte cache holds no 10-byte file: {}", small.held_bytes());
        assert_eq!(reads(&counted), 2, "what does not fit is read again");
    }

    /// The stores of two buckets share one cache (one bound for the process) and each reads its own
    /// bytes at the same path.
    #[tokio::test]
    async fn two_buckets_share_one_cache_and_keep_their_own_files() {
        let cache = read_cache(1 << 20);
        let path = Path::from("store/archival.lance/data/a1.lance");
        let mut stores = Vec::new();
        for (bucket, body) in [("s3$one", "in the first bucket"), ("s3$two", "in the second")] {
            let counted = Arc::new(Counted::default());
            counted.store.put(&path, PutPayload::from(body.as_bytes().to_vec())).await.unwrap();
            stores.push((counted.clone(), CachedReads::new(counted, bucket, cache.clone()), body));
        }
        for _ in 0..2 {
            for (_, cached, body) in &stores {
                assert_eq!(cached.get(&path).await.unwrap().bytes().await.unwrap(), body.as_bytes());
            }
        }
        for (counted, _, _) in &stores {
            assert_eq!(reads(counted), 1, "each bucket's file requested once");
        }
        cache.run_pending_tasks();
        assert_eq!(cache.weighted_size(), 19 + 13, "both files in the one cache");
    }

    /// A data file written through the cache is read back without a request; a manifest written
    /// through it is not kept, and a write the store refuses keeps nothing.
    #[tokio::test]
    async fn a_file_written_through_the_cache_is_read_back_from_memory() {
        let (counted, cached) = setup(1 << 20).await;
        let data = Path::from("store/archival.lance/data/b2.lance");
        cached.put(&data, PutPayload::from_static(b"new fragment")).await.unwrap();
        let read = cached.get(&data).await.unwrap();
        assert_eq!((read.meta.size, read.range.clone()), (12, 0..12));
        assert_eq!(read.bytes().await.unwrap(), &b"new fragment"[..]);
        assert_eq!(cached.get_range(&data, 4..12).await.unwrap(), &b"fragment"[..]);
        assert_eq!(reads(&counted), 0, "no request to read back what was written");

        let manifest = Path::from("store/archival.lance/_versions/3.manifest");
        cached.put(&manifest, PutPayload::from_static(b"v3")).await.unwrap();
        cached.get(&manifest).await.unwrap();
        assert_eq!(reads(&counted), 1, "a manifest is read from the store");

        let taken = Path::from("store/archival.lance/data/a1.lance");
        let create = PutOptions { mode: object_store::PutMode::Create, ..Default::default() };
        assert!(cached.put_opts(&taken, PutPayload::from_static(b"other bytes"), create).await.is_err());
        assert_eq!(cached.get(&taken).await.unwrap().bytes().await.unwrap(), &b"0123456789"[..], "the stored bytes");
    }

    #[test]
    fn only_a_table_s_data_index_and_deletion_files_are_immutable() {
        for (path, immutable) in [
            ("store/archival.lance/data/a1.lance", true),
            ("archival.lance/_indices/5f0c/part_0.lance", true),
            ("p/fixes.lance/_deletions/3-7-99.arrow", true),
            ("data/store/archival.lance/_versions/18446744073709551614.manifest", false),
            ("store/archival.lance/_transactions/1-x.txn", false),
            ("store/data/file", false),
            ("probe/data", false),
        ] {
            assert_eq!(is_immutable(&Path::from(path)), immutable, "{path}");
        }
    }
}
