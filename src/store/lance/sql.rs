//! Lance SQL: literals quoted for a filter, `IN` lists, timestamps, and the filter of a search (by actor,
//! sessions, tags, roles, supersession and time). A broad filter, one that keeps most of a table, also
//! comes in a form checked here ([`Broad`]), so a ranking can run unfiltered and its rows be checked
//! after; a narrow one is left to Lance's prefilter.

/// [`filter_sql`] with its [`Broad`] form when it is broad (see [`Filter`]).
pub(super) fn search_filter(filter: &crate::store::SearchFilter, has_tags: bool, has_roles: bool) -> Filter {
    let narrow = filter.session_ids.is_some()
        || (has_tags && !filter.tags_any.is_empty())
        || (has_roles && !filter.roles.is_empty())
        || filter.start.is_some()
        || filter.end.is_some();
    let broad = (!narrow)
        .then(|| Broad { actor_id: filter.actor_id.clone(), current_only: has_tags && !filter.include_superseded });
    Filter { sql: filter_sql(filter, has_tags, has_roles), broad }
}

/// A SQL filter over a table's `actor_id`, `session_id`, time, and (where the table has them) tags,
/// roles and supersession.
pub(super) fn filter_sql(filter: &crate::store::SearchFilter, has_tags: bool, has_roles: bool) -> String {
    let mut parts = vec![format!("actor_id = {}", sql_literal(&filter.actor_id))];
    if let Some(sessions) = &filter.session_ids {
        parts.push(in_list("session_id", sessions.iter().map(String::as_str)));
    }
    if has_tags && !filter.tags_any.is_empty() {
        let any = filter
            .tags_any
            .iter()
            .map(|t| format!("array_has(tags, {})", sql_literal(t)))
            .collect::<Vec<_>>()
            .join(" OR ");
        parts.push(format!("({any})"));
    }
    if has_tags && !filter.include_superseded {
        parts.push("superseded_by IS NULL".to_string());
    }
    if has_roles && !filter.roles.is_empty() {
        parts.push(in_list("role", filter.roles.iter().map(|r| r.as_str())));
    }
    if let Some(start) = filter.start {
        parts.push(format!("created_at >= {}", timestamp_literal(start)));
    }
    if let Some(end) = filter.end {
        parts.push(format!("created_at <= {}", timestamp_literal(end)));
    }
    parts.join(" AND ")
}

/// `column IN ('a', 'b')`; `FALSE` for an empty list.
pub(super) fn in_list<'a>(column: &str, values: impl IntoIterator<Item = &'a str>) -> String {
    let values: Vec<String> = values.into_iter().map(sql_literal).collect();
    if values.is_empty() { "FALSE".to_string() } else { format!("{column} IN ({})", values.join(", ")) }
}

/// A timestamp literal Lance's SQL compares with a `Timestamp(µs, UTC)` column.
pub(super) fn timestamp_literal(t: chrono::DateTime<chrono::Utc>) -> String {
    format!("arrow_cast('{}', 'Timestamp(Microsecond, Some(\"UTC\"))')", t.format("%Y-%m-%dT%H:%M:%S%.6fZ"))
}

/// The filter of a search as Lance SQL, and, when it is broad (the actor's rows, current ones only
/// where the table has supersession), the same filter in a form checked here ([`Broad`]). A narrow
/// filter (tags, times, sessions, roles, an error type) keeps a small part of the table; it has no
/// `broad` form and is always applied by Lance, before ranking.
pub(super) struct Filter {
    pub sql: String,
    pub broad: Option<Broad>,
}

/// A broad filter: the rows of `actor_id`, and with `current_only` only those no newer memory
/// superseded (`superseded_by IS NULL`). Equal to its [`Filter::sql`].
pub(super) struct Broad {
    pub actor_id: String,
    pub current_only: bool,
}

impl Broad {
    /// Does a row of `actor_id`, superseded or not, pass?
    pub(super) fn passes(&self, actor_id: &str, superseded: bool) -> bool {
        actor_id == self.actor_id && !(self.current_only && superseded)
    }
}

/// `'` doubled, for a string literal inside a Lance SQL filter.
pub(super) fn sql_literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

/// `actor_id = '…'` for the rows of `actor`; `None` (every row) without one.
pub(super) fn actor_filter(actor: Option<&str>) -> Option<String> {
    actor.map(|a| format!("actor_id = {}", sql_literal(a)))
}
