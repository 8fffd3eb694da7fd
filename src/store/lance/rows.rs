//! Small Arrow helpers shared by the tables: column builders for one batch of rows, and a typed reader
//! of a decoded batch. Every table maps its rows through these, so column types stay consistent
//! (strings `Utf8`, times `Timestamp(µs, UTC)`, vectors `FixedSizeList<Float32, 384>`).

use std::sync::Arc;

use arrow_array::builder::{ListBuilder, StringBuilder};
use arrow_array::types::Float32Type;
use arrow_array::{
    Array, ArrayRef, FixedSizeListArray, Float32Array, Int64Array, ListArray, RecordBatch, StringArray,
    TimestampMicrosecondArray,
};
use arrow_schema::{DataType, Field, TimeUnit};
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::embed::DIMENSION;
use crate::store::StoreError;

pub(super) fn timestamp_type() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
}

pub(super) fn string_list_type() -> DataType {
    DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)))
}

pub(super) fn vector_type() -> DataType {
    DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, true)), DIMENSION as i32)
}

/// The metadata that makes a field the table's key for Lance (its "unenforced primary key").
pub(super) const PRIMARY_KEY_METADATA: &str = "lance-schema:unenforced-primary-key";

/// A table's key column `name` (`Utf8`, not null), marked as the table's primary key. Lance does not
/// enforce uniqueness, but a merge-insert keyed on it records the keys it inserted (a Bloom filter in
/// its transaction), and two merge-inserts that commit at once with a key in common conflict: the
/// second is retried against the first's version, where the key now exists
/// (`lance::io::commit::conflict_resolver`, `check_update_txn`). That, not a lock, keeps an
/// insert-if-absent from writing a row twice when its writers share nothing but the store.
pub(super) fn key_field(name: &str) -> Field {
    Field::new(name, DataType::Utf8, false)
        .with_metadata([(PRIMARY_KEY_METADATA.to_string(), "true".to_string())].into())
}

/// The columns every table starts with (docs/storage.md: every row carries its owner and provenance):
/// `id`, `actor_id`, `project`, `session_id`, then `extra`.
pub(super) fn schema_with_provenance(extra: Vec<Field>) -> arrow_schema::SchemaRef {
    let mut fields = vec![
        key_field("id"),
        Field::new("actor_id", DataType::Utf8, false),
        Field::new("project", DataType::Utf8, false),
        Field::new("session_id", DataType::Utf8, false),
    ];
    fields.extend(extra);
    Arc::new(arrow_schema::Schema::new(fields))
}

pub(super) fn strings<'a>(values: impl IntoIterator<Item = &'a str>) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(values))
}

pub(super) fn opt_strings<'a>(values: impl IntoIterator<Item = Option<&'a str>>) -> ArrayRef {
    Arc::new(values.into_iter().collect::<StringArray>())
}

pub(super) fn times(values: impl IntoIterator<Item = DateTime<Utc>>) -> ArrayRef {
    Arc::new(
        TimestampMicrosecondArray::from(values.into_iter().map(|t| t.timestamp_micros()).collect::<Vec<_>>())
            .with_timezone("UTC"),
    )
}

pub(super) fn ints(values: impl IntoIterator<Item = Option<i64>>) -> ArrayRef {
    Arc::new(values.into_iter().collect::<Int64Array>())
}

pub(super) fn string_lists<'a, I>(values: impl IntoIterator<Item = I>) -> ArrayRef
where
    I: IntoIterator<Item = &'a str>,
{
    let mut builder = ListBuilder::new(StringBuilder::new());
    for list in values {
        for item in list {
            builder.values().append_value(item);
        }
        builder.append(true);
    }
    Arc::new(builder.finish())
}

/// The vector column of a batch. Each vector must hold [`DIMENSION`] floats.
pub(super) fn vectors<'a>(values: impl IntoIterator<Item = &'a [f32]>) -> Result<ArrayRef, StoreError> {
    let mut rows = Vec::new();
    for v in values {
        if v.len() != DIMENSION {
            return Err(StoreError::Backend(format!("vector has {} floats, expected {DIMENSION}", v.len())));
        }
        rows.push(Some(v.iter().copied().map(Some).collect::<Vec<_>>()));
    }
    Ok(Arc::new(FixedSizeListArray::from_iter_primitive::<Float32Type, _, _>(rows, DIMENSION as i32)))
}

/// Typed access to the columns of one decoded batch of `table`.
pub(super) struct Rows<'a> {
    pub batch: &'a RecordBatch,
    pub table: &'static str,
}

impl<'a> Rows<'a> {
    pub fn new(batch: &'a RecordBatch, table: impl Into<&'static str>) -> Self {
        let table = table.into();
        Self { batch, table }
    }

    pub fn len(&self) -> usize {
        self.batch.num_rows()
    }

    fn corrupt(&self, column: &'static str, message: impl Into<String>) -> StoreError {
        StoreError::Corrupt { table: self.table, column, message: message.into() }
    }

    fn col<T: 'static>(&self, name: &'static str) -> Result<&'a T, StoreError> {
        self.batch
            .column_by_name(name)
            .and_then(|c| c.as_any().downcast_ref::<T>())
            .ok_or_else(|| self.corrupt(name, "missing or of the wrong type"))
    }

    pub fn strs(&self, name: &'static str) -> Result<Vec<String>, StoreError> {
        let c = self.col::<StringArray>(name)?;
        Ok((0..c.len()).map(|i| c.value(i).to_string()).collect())
    }

    pub fn opt_strs(&self, name: &'static str) -> Result<Vec<Option<String>>, StoreError> {
        let c = self.col::<StringArray>(name)?;
        Ok((0..c.len()).map(|i| (!c.is_null(i)).then(|| c.value(i).to_string())).collect())
    }

    pub fn uuids(&self, name: &'static str) -> Result<Vec<Uuid>, StoreError> {
        self.strs(name)?.iter().map(|s| Uuid::parse_str(s).map_err(|e| self.corrupt(name, e.to_string()))).collect()
    }

    pub fn opt_ints(&self, name: &'static str) -> Result<Vec<Option<i64>>, StoreError> {
        let c = self.col::<Int64Array>(name)?;
        Ok((0..c.len()).map(|i| (!c.is_null(i)).then(|| c.value(i))).collect())
    }

    pub fn times(&self, name: &'static str) -> Result<Vec<DateTime<Utc>>, StoreError> {
        let c = self.col::<TimestampMicrosecondArray>(name)?;
        (0..c.len())
            .map(|i| {
                DateTime::from_timestamp_micros(c.value(i))
                    .ok_or_else(|| self.corrupt(name, format!("timestamp {} out of range", c.value(i))))
            })
            .collect()
    }

    pub fn string_lists(&self, name: &'static str) -> Result<Vec<Vec<String>>, StoreError> {
        let c = self.col::<ListArray>(name)?;
        (0..c.len())
            .map(|i| {
                let values = c.value(i);
                let values =
                    values.as_any().downcast_ref::<StringArray>().ok_or_else(|| self.corrupt(name, "not strings"))?;
                Ok((0..values.len()).map(|j| values.value(j).to_string()).collect())
            })
            .collect()
    }

    /// The vectors of column `name` (`[f32; 384]` for `vector`), as slices of the batch.
    fn vector_slices(&self, name: &'static str) -> Result<Vec<&'a [f32]>, StoreError> {
        let c = self.col::<FixedSizeListArray>(name)?;
        let values =
            c.values().as_any().downcast_ref::<Float32Array>().ok_or_else(|| self.corrupt(name, "not f32"))?.values();
        let dimension = c.value_length() as usize;
        (0..c.len())
            .map(|i| {
                let start = c.value_offset(i) as usize;
                values.get(start..start + dimension).ok_or_else(|| self.corrupt(name, "short vector"))
            })
            .collect()
    }

    /// The vectors of column `name`, each in its own shared allocation (one copy out of the batch).
    pub fn shared_vectors(&self, name: &'static str) -> Result<Vec<Arc<[f32]>>, StoreError> {
        Ok(self.vector_slices(name)?.into_iter().map(Arc::from).collect())
    }

    /// The vectors of column `name`, each copied into a `Vec` (`[f32; 384]` for `vector`).
    pub fn vectors(&self, name: &'static str) -> Result<Vec<Vec<f32>>, StoreError> {
        Ok(self.vector_slices(name)?.into_iter().map(<[f32]>::to_vec).collect())
    }
}
