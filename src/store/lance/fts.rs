//! The full-text (BM25) indexes: which columns each table indexes, the name of this version's index
//! of a column, and the indexes an earlier version built (with another analyzer) that open and upkeep
//! replace.

use lancedb::Table;

use super::tables::TableId;

/// The name of the full-text index of `name.column`: Lance's default (`{column}_idx`), but for the fixes
/// table's code-analysed index with positions `{column}_code_pos_idx`, so that an index built by an
/// earlier version (with the text analyzer, or without positions) is told apart and rebuilt
/// ([`super::LanceStore::open`]).
pub(super) fn fts_index_name(name: TableId, column: &str) -> String {
    if name == TableId::Fixes { format!("{column}_code_pos_idx") } else { format!("{column}_idx") }
}

/// Has `table` (named `name`) this version's full-text index of `column` ([`fts_index_name`])?
pub(super) async fn has_fts_index(table: &Table, name: TableId, column: &str) -> lancedb::Result<bool> {
    let wanted = fts_index_name(name, column);
    Ok(table
        .list_indices()
        .await?
        .iter()
        .any(|ix| ix.index_type == lancedb::index::IndexType::FTS && ix.name == wanted))
}

/// The full-text indexes of `column` in `table` (named `name`) other than this version's: built with
/// another analyzer.
pub(super) async fn stale_fts_indexes(table: &Table, name: TableId, column: &str) -> lancedb::Result<Vec<String>> {
    let wanted = fts_index_name(name, column);
    Ok(table
        .list_indices()
        .await?
        .into_iter()
        .filter(|ix| ix.index_type == lancedb::index::IndexType::FTS && ix.columns.iter().any(|c| c == column))
        .filter(|ix| ix.name != wanted)
        .map(|ix| ix.name)
        .collect())
}

pub(super) async fn has_stale_fts_index(table: &Table, name: TableId, column: &str) -> lancedb::Result<bool> {
    Ok(!stale_fts_indexes(table, name, column).await?.is_empty())
}

/// The columns a table's full-text indexes cover: for conversation items `search_text` (the item in its
/// context) and `embedded_text` (the item alone); `embedded_text` for the other searchable tables; none
/// for the rest.
pub(super) fn fts_columns(name: TableId) -> &'static [&'static str] {
    match name {
        TableId::Conversation => &["search_text", "embedded_text"],
        _ if name.is_searchable() => &["embedded_text"],
        // the bookkeeping tables and core blocks are never searched by text
        _ => &[],
    }
}
