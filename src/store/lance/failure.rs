//! What a failed call into Lance means to the store, read from the error's variants along its source
//! chain, never from its text: a commit that lost to another writer (run it again on the latest
//! version), a file of the version read that is gone (read again), or anything else. The one place
//! that looks inside Lance's errors (`StoreError::Engine` keeps the error itself as its source).

use std::error::Error;

use crate::store::EngineFailure;

/// Classifies `e` by the first error along its `source()` chain that says what happened: Lance's
/// commit conflicts (`CommitConflict`, `RetryableCommitConflict`, `IncompatibleTransaction`) and its
/// `TooMuchWriteContention`; a missing object (Lance's `NotFound`, `DatasetNotFound`, or a typed source
/// that is not found: `lance::Error::is_not_found`, object_store's `NotFound`, an I/O `NotFound`).
pub(crate) fn classify(e: &(dyn Error + 'static)) -> EngineFailure {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(lance) = err.downcast_ref::<lance::Error>() {
            match lance.find_root() {
                lance::Error::CommitConflict { .. }
                | lance::Error::RetryableCommitConflict { .. }
                | lance::Error::IncompatibleTransaction { .. } => return EngineFailure::Conflict,
                lance::Error::TooMuchWriteContention { .. } => return EngineFailure::Contention,
                lance::Error::DatasetNotFound { .. } => return EngineFailure::MissingFile,
                root if root.is_not_found() || lance.is_not_found() => return EngineFailure::MissingFile,
                _ => {}
            }
        }
        // lancedb's `External` is transparent: its `source()` skips the error it carries, read that next
        if let Some(lancedb::Error::External { source }) = err.downcast_ref::<lancedb::Error>() {
            next = Some(source.as_ref());
            continue;
        }
        if matches!(err.downcast_ref::<object_store::Error>(), Some(object_store::Error::NotFound { .. })) {
            return EngineFailure::MissingFile;
        }
        if err.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound) {
            return EngineFailure::MissingFile;
        }
        next = err.source();
    }
    EngineFailure::Other
}

/// Whether `e` is a commit that lost to another writer: safe to run again, nothing of it was committed
/// (an unknown commit outcome is not one).
pub(super) fn is_conflict(e: &lancedb::Error) -> bool {
    matches!(classify(e), EngineFailure::Conflict | EngineFailure::Contention)
}

/// Whether `e` says a file the read needed does not exist.
pub(super) fn is_missing_file(e: &lancedb::Error) -> bool {
    classify(e) == EngineFailure::MissingFile
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boxed(e: impl Error + Send + Sync + 'static) -> Box<dyn Error + Send + Sync> {
        Box::new(e)
    }

    /// Each kind as Lance and lancedb return it, also wrapped: by variant, whatever the message says.
    #[test]
    fn errors_are_read_by_their_variants_along_the_source_chain() {
        let io_missing = || std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let cases: Vec<(lancedb::Error, EngineFailure)> = vec![
            (lance::Error::commit_conflict_source(3, boxed(io_missing())).into(), EngineFailure::Conflict),
            (lance::Error::retryable_commit_conflict_source(3, boxed(std::fmt::Error)).into(), EngineFailure::Conflict),
            (lance::Error::too_much_write_contention("busy").into(), EngineFailure::Contention),
            (lance::Error::not_found("data/x.lance").into(), EngineFailure::MissingFile),
            (lance::Error::io_source(boxed(io_missing())).into(), EngineFailure::MissingFile),
            (
                lancedb::Error::ObjectStore {
                    source: object_store::Error::NotFound { path: "x".into(), source: boxed(io_missing()) },
                },
                EngineFailure::MissingFile,
            ),
            (lancedb::Error::External { source: boxed(lance::Error::not_found("y")) }, EngineFailure::MissingFile),
            // the words alone mean nothing
            (lancedb::Error::Runtime { message: "commit conflict: file not found".into() }, EngineFailure::Other),
            (lance::Error::io("no such file").into(), EngineFailure::Other),
            (lance::Error::index_not_found("vector_idx").into(), EngineFailure::Other),
        ];
        for (e, want) in cases {
            assert_eq!(classify(&e), want, "{e}");
        }
    }
}
