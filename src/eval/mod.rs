//! Retrieval evaluations that run the product's own import and search path on public benchmark data.

pub mod fixes;
pub mod locomo;
