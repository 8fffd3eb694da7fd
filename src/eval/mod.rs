//! Evaluations that run the product's own code: retrieval (its import and search path on public
//! benchmark data and on the bundled fixes set) and the code check of stored fixes (generated git
//! repositories).

pub mod fixes;
pub mod locomo;
pub mod staleness;
