//! The store's tables, by identity: [`TableId`] names each one (its directory on disk is
//! [`TableId::name`]), so code that acts on "a table" takes a `TableId`, never a string, and a table
//! that does not exist cannot be asked for.

/// One of the store's tables (docs/storage.md). `meta` (format version and embedding model, read at
/// open) is not one of them: nothing but opening touches it ([`META_TABLE`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TableId {
    /// Confirmed fixes: `FixRecord` rows.
    Fixes,
    /// Archival memory: `Passage` rows.
    Archival,
    /// Recall (conversation) memory: `ConversationItem` rows, on disk as `session_items`.
    Conversation,
    /// Core memory: every version of every block.
    CoreBlocks,
    /// Ids of forgotten conversation items, so a re-import does not bring them back (ids only, no text).
    Forgotten,
    /// Distillation runs: which items a run of an actor read and what it wrote.
    DistillRuns,
    /// Uses of memories: returned by a search, injected by a hook, followed by passing tests (ids only).
    Uses,
}

impl TableId {
    /// Every table, in the order of the handle's array ([`Self::index`]).
    pub const ALL: [TableId; 7] = [
        Self::Fixes,
        Self::Archival,
        Self::Conversation,
        Self::CoreBlocks,
        Self::Forgotten,
        Self::DistillRuns,
        Self::Uses,
    ];
    /// The tables that hold memories, in export order.
    pub const MEMORY: [TableId; 4] = [Self::Fixes, Self::Archival, Self::Conversation, Self::CoreBlocks];
    /// The tables searched by embedding and full text (core blocks are read whole).
    pub const SEARCHABLE: [TableId; 3] = [Self::Fixes, Self::Archival, Self::Conversation];

    /// The table's name in the store (its directory `<db>/<name>.lance`, its lock file, its `table`
    /// field in an export).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Fixes => "fixes",
            Self::Archival => "archival",
            Self::Conversation => "session_items",
            Self::CoreBlocks => "core_blocks",
            Self::Forgotten => "forgotten",
            Self::DistillRuns => "distill_runs",
            Self::Uses => "uses",
        }
    }

    /// The memory tier the table holds, as users name it (`memory list --table`, messages, the
    /// `memory_forget` result): `fixes`, `archival`, `conversation`, `core`; the bookkeeping tables by
    /// their own names.
    pub const fn tier(self) -> &'static str {
        match self {
            Self::Conversation => "conversation",
            Self::CoreBlocks => "core",
            other => other.name(),
        }
    }

    /// The tier in words, for messages: "fix memory", "archival memory", "conversation memory" (MemGPT's
    /// recall memory), "core memory"; the bookkeeping tables by their own names.
    pub const fn described(self) -> &'static str {
        match self {
            Self::Fixes => "fix memory",
            Self::Archival => "archival memory",
            Self::Conversation => "conversation memory",
            Self::CoreBlocks => "core memory",
            other => other.name(),
        }
    }

    /// The tier of the table called `name` ([`Self::tier`]); `name` itself when no table is called so.
    pub fn tier_of(name: &str) -> &str {
        match Self::from_name(name) {
            Some(id) => id.tier(),
            None => name,
        }
    }

    /// The table of the tier called `name` ([`Self::tier`]), or of the table called `name`.
    pub fn from_tier(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|id| id.tier() == name).or_else(|| Self::from_name(name))
    }

    /// The table called `name` in the store, if there is one.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|id| id.name() == name)
    }

    /// Whether searches rank this table's rows ([`Self::SEARCHABLE`]).
    pub fn is_searchable(self) -> bool {
        Self::SEARCHABLE.contains(&self)
    }

    /// The table's place in [`Self::ALL`].
    pub(super) const fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for TableId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl From<TableId> for &'static str {
    fn from(id: TableId) -> Self {
        id.name()
    }
}

/// The table of the store's format version and embedding model, checked at open.
pub(crate) const META_TABLE: &str = "meta";

#[cfg(test)]
mod tests {
    use super::TableId;

    #[test]
    fn every_table_is_at_its_index_and_found_by_its_name() {
        for (i, id) in TableId::ALL.into_iter().enumerate() {
            assert_eq!(id.index(), i, "{id}");
            assert_eq!(TableId::from_name(id.name()), Some(id));
        }
        assert_eq!(TableId::from_name("session_items"), Some(TableId::Conversation));
        assert_eq!(TableId::from_name("meta"), None);
        assert!(TableId::Fixes.is_searchable() && !TableId::CoreBlocks.is_searchable());
    }
}
