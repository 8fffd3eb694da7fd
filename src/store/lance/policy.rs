//! Upkeep's policy (docs/storage.md, "Upkeep"): what a table needs — compaction, a full-text fold, a
//! vector or scalar index, a merge of index segments — decided from its numbers alone (rows, rows an
//! index covers, fragments, writes through this handle). No I/O here: `upkeep` and `write` read the
//! numbers, ask, and run what the answer says; the cases are tested below as a table.

/// Background upkeep (compaction, index refresh, pruning) runs on a table after this many writes to it
/// through one store handle.
pub const UPKEEP_EVERY_WRITES: usize = 100;

/// Between two upkeeps, a store handle compacts a table's newest fragments (one per commit, none covered
/// by an index yet) into one every this many writes to it. Every read of a table (the id lookup, the
/// near-duplicate search and the merge-insert of each insert, every search) visits each fragment: a lone
/// writer's insert took 38 ms just after an upkeep and 57 ms 80–99 writes later (docs/internals/writes.md,
/// "Records embedded once, fragments joined between upkeeps"). Only unindexed fragments are rewritten (Lance
/// compacts fragments an index covers apart from the ones it does not), so this costs about as many rows
/// as were written.
pub const COMPACT_EVERY_WRITES: usize = 20;

/// A store handle's first write to a table runs upkeep at once when the table has more fragments than
/// this. Each commit adds a fragment, and processes that write fewer than [`UPKEEP_EVERY_WRITES`] times
/// (short sessions, hooks, operator commands) never reach that count: without this, their fragments
/// pile up, and every search and every read after an object store outage visits one more file per
/// fragment (about 200 sessions' worth on a bucket held calls for minutes once it came back).
pub const UPKEEP_FRAGMENTS: usize = 32;

/// Rows from which a searchable table gets an ANN index on its vectors and scalar indexes on its filter
/// columns (built by upkeep). Below it, an exact (flat) scan is fast enough: 6–11 ms at 10k rows of 384
/// floats here, by machine (docs/internals/search-latency.md, "Exact search below 5,000 rows").
pub const ANN_MIN_ROWS: usize = 5_000;

/// Versions younger than this are kept by background upkeep and by default by `memory optimize` (a
/// reader in another process may still be on them).
pub const PRUNE_OLDER_THAN_SECS: i64 = 60;

/// Segments a vector index may have before background upkeep merges them. Each upkeep folds the rows
/// written since the last one into the vector index as a new segment (a delta, Lance's default), and
/// Lance compacts only neighbouring fragments covered by the same index segments: without merging,
/// every upkeep leaves one more fragment and one more segment for every search to visit. Past this
/// many, upkeep merges every segment but the first (the one built over the bulk of the table) into
/// one, and compaction then joins their fragments. `memory optimize` merges down to two segments.
pub const MAX_VECTOR_INDEX_SEGMENTS: usize = 4;

/// Tables of up to this many rows fold new rows into their full-text indexes as soon as the rows the
/// index does not cover exceed [`FTS_UNINDEXED_SHARE`] of those it does; larger ones leave it to upkeep.
/// Lance 14 scores the rows an FTS index covers with the index's statistics (document count, document
/// frequency of each term) and the rows it does not cover with those statistics plus the new rows'
/// (`lance::io::exec::fts`, `residual_bm25_scorer`), so a new row sharing a rare term with an indexed
/// one scores lower for it (the term's document frequency counts the new row on one side only). While
/// such rows are a large share of a small table a passage could rank below its neighbours for its own
/// words.
pub const FTS_FOLD_MAX_ROWS: usize = 1_000;

/// Tables of up to this many rows keep their full-text indexes empty: every row is scanned and scored
/// with the same statistics (the empty index's plus all rows'), so no row is scored apart from the
/// others (with a partly filled index, a new "Use pnpm not npm" ranked below an indexed "pnpm not npm
/// use" for its own words), and no write or upkeep pays for folding rows into an index (about 20 ms per
/// insert when every write folded, docs/internals/writes.md, "Full-text fold"). The scan costs little at
/// this size.
/// An index that covers rows of such a table (a store that shrank, or one written by an earlier
/// version) is rebuilt empty after the table's next write.
pub const FTS_FLAT_MAX_ROWS: usize = 250;

/// The share of unindexed rows (against indexed ones) above which a table of more than
/// [`FTS_FLAT_MAX_ROWS`] and at most [`FTS_FOLD_MAX_ROWS`] rows folds them in: 1/8, so the folds
/// of a growing table come at every 12.5 % of growth (about 60 for its first 1,000 rows), not at every
/// write, since each fold writes a new copy of the index until upkeep prunes old versions. The first
/// fold, past [`FTS_FLAT_MAX_ROWS`], takes in every row.
pub const FTS_UNINDEXED_SHARE: f64 = 0.125;

use super::tables::TableId;

/// What a store handle starts in the background after a write to a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Chore {
    /// Upkeep of the table: fold new rows into its indexes, merge index segments, compact, prune.
    Upkeep,
    /// Join the newest fragments, which no index covers yet.
    Compact,
}

/// Whether this is the handle's first write to the table, the one write at which [`chore_after_write`]
/// needs the table's fragment count (a read of its manifest).
pub(super) fn counts_fragments(writes: usize) -> bool {
    writes == 1
}

/// The chore after the handle's `writes`th write to a table (counting this one), `fragments` being the
/// table's fragments when [`counts_fragments`] asked for them: upkeep every [`UPKEEP_EVERY_WRITES`]
/// writes and at a first write to a table of more than [`UPKEEP_FRAGMENTS`] fragments, compaction every
/// [`COMPACT_EVERY_WRITES`] writes in between.
pub(super) fn chore_after_write(writes: usize, fragments: Option<usize>) -> Option<Chore> {
    if writes.is_multiple_of(UPKEEP_EVERY_WRITES) || fragments.is_some_and(|f| f > UPKEEP_FRAGMENTS) {
        Some(Chore::Upkeep)
    } else if writes.is_multiple_of(COMPACT_EVERY_WRITES) {
        Some(Chore::Compact)
    } else {
        None
    }
}

/// What a write's full-text check does with a table of `rows` rows.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum FtsChore {
    /// Nothing now.
    Nothing,
    /// The table is past [`FTS_FOLD_MAX_ROWS`]: upkeep folds its rows from now on, and this handle stops
    /// checking it after writes.
    LeaveToUpkeep,
    /// Rebuild its indexes empty: the table is small enough to be scanned ([`FTS_FLAT_MAX_ROWS`]) and
    /// an index covers rows.
    Empty,
    /// Fold the unindexed rows into these indexes ([`fts_fold_due`]).
    Fold(Vec<String>),
}

/// One full-text index of a table: its name, the rows it covers, the table's rows it does not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FtsCoverage {
    pub index: String,
    pub indexed: usize,
    pub unindexed: usize,
}

/// Whether a write's full-text check of a table of `rows` rows needs its indexes' coverage (a read of
/// their statistics): only up to [`FTS_FOLD_MAX_ROWS`] rows, past which [`fts_chore`] leaves the table
/// to upkeep.
pub(super) fn reads_fts_coverage(rows: usize) -> bool {
    rows <= FTS_FOLD_MAX_ROWS
}

/// What a write's full-text check does with a table of `rows` rows whose indexes cover what `coverage`
/// says (empty when [`reads_fts_coverage`] did not ask for it).
pub(super) fn fts_chore(rows: usize, coverage: &[FtsCoverage]) -> FtsChore {
    if !reads_fts_coverage(rows) {
        return FtsChore::LeaveToUpkeep;
    }
    if rows <= FTS_FLAT_MAX_ROWS {
        return if coverage.iter().any(|c| c.indexed > 0) { FtsChore::Empty } else { FtsChore::Nothing };
    }
    let due: Vec<String> =
        coverage.iter().filter(|c| fts_fold_due(rows, c.indexed, c.unindexed)).map(|c| c.index.clone()).collect();
    if due.is_empty() { FtsChore::Nothing } else { FtsChore::Fold(due) }
}

/// Whether a write to a table of `rows` rows folds the rows its full-text index does not cover
/// (`unindexed`) into it, the index covering `indexed`: see [`FTS_FLAT_MAX_ROWS`] (never while the
/// table is that small) and [`FTS_UNINDEXED_SHARE`]. Larger tables than [`FTS_FOLD_MAX_ROWS`] leave the
/// fold to upkeep.
pub(super) fn fts_fold_due(rows: usize, indexed: usize, unindexed: usize) -> bool {
    if unindexed == 0 || rows <= FTS_FLAT_MAX_ROWS || rows > FTS_FOLD_MAX_ROWS {
        false
    } else {
        unindexed as f64 > FTS_UNINDEXED_SHARE * indexed as f64
    }
}

/// Whether a table of `rows` rows is large enough for an ANN index and scalar indexes ([`ANN_MIN_ROWS`]).
pub(super) fn needs_large_table_indexes(rows: usize) -> bool {
    rows >= ANN_MIN_ROWS
}

/// Whether to (re)build the vector index of a table of `rows` rows whose index covers `indexed` rows
/// (`None`: it has none): built at [`ANN_MIN_ROWS`] rows, rebuilt once the table has doubled since, so
/// its partitions follow the data.
pub(super) fn vector_index_due(rows: usize, indexed: Option<usize>) -> bool {
    needs_large_table_indexes(rows) && indexed.is_none_or(|indexed| indexed.saturating_mul(2) <= rows)
}

/// How many of a vector index's `segments` to merge into one when it may have `max_segments` (at
/// least 2): all but the first, once there are more; `None`: none.
pub(super) fn segments_to_merge(segments: usize, max_segments: usize) -> Option<usize> {
    (segments > max_segments.max(2)).then(|| segments - 1)
}

/// The filter columns of `table` that get a scalar index at scale, each with whether it is a bitmap
/// (few distinct values) or a B-tree: `actor_id` filters every search; `superseded_by IS NULL` every
/// archival search.
pub(super) fn scalar_index_columns(table: TableId) -> &'static [(&'static str, bool)] {
    match table {
        TableId::Archival => &[("actor_id", true), ("superseded_by", false)],
        TableId::Fixes | TableId::Conversation => &[("actor_id", true)],
        TableId::CoreBlocks | TableId::Forgotten | TableId::DistillRuns | TableId::Uses => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chore_after_a_write() {
        let cases = [
            // (writes through this handle, fragments at the first write, chore)
            (1, Some(3), None),
            (1, Some(UPKEEP_FRAGMENTS), None),
            (1, Some(UPKEEP_FRAGMENTS + 1), Some(Chore::Upkeep)),
            (2, None, None),
            (COMPACT_EVERY_WRITES - 1, None, None),
            (COMPACT_EVERY_WRITES, None, Some(Chore::Compact)),
            (3 * COMPACT_EVERY_WRITES, None, Some(Chore::Compact)),
            (UPKEEP_EVERY_WRITES, None, Some(Chore::Upkeep)),
            (UPKEEP_EVERY_WRITES + 1, None, None),
            (2 * UPKEEP_EVERY_WRITES, None, Some(Chore::Upkeep)),
        ];
        for (writes, fragments, chore) in cases {
            assert_eq!(chore_after_write(writes, fragments), chore, "write {writes}, {fragments:?} fragments");
        }
        assert!(counts_fragments(1) && !counts_fragments(2));
    }

    #[test]
    fn the_full_text_chore_after_a_write() {
        let ix = |index: &str, indexed, unindexed| FtsCoverage { index: index.into(), indexed, unindexed };
        let fold = |names: &[&str]| FtsChore::Fold(names.iter().map(|n| n.to_string()).collect());
        let cases = [
            // (rows, coverage, chore)
            (10, vec![ix("a", 0, 10)], FtsChore::Nothing),
            (FTS_FLAT_MAX_ROWS, vec![ix("a", 0, FTS_FLAT_MAX_ROWS)], FtsChore::Nothing),
            (200, vec![ix("a", 150, 50)], FtsChore::Empty),
            (FTS_FLAT_MAX_ROWS + 1, vec![ix("a", 0, FTS_FLAT_MAX_ROWS + 1)], fold(&["a"])),
            // 1/8 of the indexed rows unindexed: not yet; one more: fold
            (900, vec![ix("a", 800, 100)], FtsChore::Nothing),
            (901, vec![ix("a", 800, 101)], fold(&["a"])),
            (901, vec![ix("a", 800, 101), ix("b", 900, 1)], fold(&["a"])),
            (FTS_FOLD_MAX_ROWS, vec![ix("a", 500, 500)], fold(&["a"])),
            (FTS_FOLD_MAX_ROWS + 1, vec![ix("a", 0, FTS_FOLD_MAX_ROWS + 1)], FtsChore::LeaveToUpkeep),
        ];
        for (rows, coverage, chore) in cases {
            assert_eq!(fts_chore(rows, &coverage), chore, "{rows} rows, {coverage:?}");
        }
        assert!(reads_fts_coverage(FTS_FOLD_MAX_ROWS) && !reads_fts_coverage(FTS_FOLD_MAX_ROWS + 1));
    }

    #[test]
    fn the_indexes_a_large_table_needs() {
        let cases = [
            // (rows, rows the vector index covers, build it)
            (ANN_MIN_ROWS - 1, None, false),
            (ANN_MIN_ROWS, None, true),
            (ANN_MIN_ROWS, Some(ANN_MIN_ROWS), false),
            (2 * ANN_MIN_ROWS - 1, Some(ANN_MIN_ROWS), false),
            (2 * ANN_MIN_ROWS, Some(ANN_MIN_ROWS), true),
        ];
        for (rows, indexed, due) in cases {
            assert_eq!(vector_index_due(rows, indexed), due, "{rows} rows, index over {indexed:?}");
        }
        let merges = [(1, 4, None), (4, 4, None), (5, 4, Some(4)), (2, 0, None), (3, 0, Some(2)), (3, 2, Some(2))];
        for (segments, max, merged) in merges {
            assert_eq!(segments_to_merge(segments, max), merged, "{segments} segments, at most {max}");
        }
        assert_eq!(scalar_index_columns(TableId::Archival), &[("actor_id", true), ("superseded_by", false)]);
        assert!(scalar_index_columns(TableId::CoreBlocks).is_empty());
    }
}
