//! The subcommands of the binary, one module each; `main.rs` parses the command line and dispatches
//! here. Part of the binary, not the library, which never prints (stdout is the protocol in `serve`):
//! the operator commands print a result for a person on stdout with progress and errors on stderr, and
//! none of them is reachable by a model.

mod common;
pub mod core;
pub mod distill;
pub mod drive;
pub mod hook;
pub mod memory;
pub mod serve;
pub mod sessions;
pub mod setup;
pub mod smoke;
pub mod ui;
