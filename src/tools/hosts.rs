//! One [`ToolHost`] per identity. Under HTTP with bearer tokens (docs/http.md), every token maps to its
//! own actor (and optional project label); the hosts of all identities share the store and the embedder
//! but nothing else, so one actor's memories, core blocks and sessions are invisible to another.

use std::collections::HashMap;

use futures::future::BoxFuture;
use tokio::sync::Mutex;

use super::{Memories, ToolHost, bounded};
use crate::domain::Scope;
use crate::memory::BlockSpec;

/// Builds the memory tiers of one identity over the shared store and embedder. The future may wait for
/// the store, which a server opens at launch beside its first requests (`ServeSettings::open`); it fails
/// when the store could not be opened.
pub type MemoriesFactory = dyn Fn(Scope) -> BoxFuture<'static, anyhow::Result<Memories>> + Send + Sync;

/// Why no tool host serves a request.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error(transparent)]
    UnknownIdentity(#[from] UnknownIdentity),
    /// The shared store could not be opened (the message says why and what to do).
    #[error("{0:#}")]
    Unavailable(anyhow::Error),
}

/// Lazily created tool hosts, keyed by [`Scope`] (actor and project label).
pub struct Hosts {
    default: Scope,
    blocks: Vec<BlockSpec>,
    /// Every host's [`ToolHost::with_timeout`].
    timeout: Option<std::time::Duration>,
    /// `None` for a set of hosts fixed at construction ([`Hosts::single`]).
    make: Option<Box<MemoriesFactory>>,
    hosts: Mutex<HashMap<Scope, ToolHost>>,
}

/// No host serves that identity (a fixed set of hosts was asked for another).
#[derive(Debug, thiserror::Error)]
#[error("no memory is configured for actor `{}` and project `{}`", .0.actor_id, .0.project)]
pub struct UnknownIdentity(pub Scope);

impl Hosts {
    /// `default` is the identity of requests that carry none (stdio, HTTP without tokens); `blocks` are
    /// the core memory blocks every identity has; `timeout` bounds every host's tool calls
    /// ([`ToolHost::with_timeout`]).
    pub fn new(
        default: Scope,
        blocks: Vec<BlockSpec>,
        timeout: Option<std::time::Duration>,
        make: Box<MemoriesFactory>,
    ) -> Self {
        Self { default, blocks, timeout, make: Some(make), hosts: Mutex::default() }
    }

    /// Exactly one host, for its own scope (tests, and servers wired by hand).
    pub fn single(host: ToolHost) -> Self {
        let default = host.memories().scope.clone();
        let blocks = host.memories().core.blocks().to_vec();
        let hosts = Mutex::new(HashMap::from([(default.clone(), host)]));
        Self { default, blocks, timeout: None, make: None, hosts }
    }

    /// The core memory blocks (names and character limits) of every identity.
    pub fn block_specs(&self) -> &[BlockSpec] {
        &self.blocks
    }

    /// What bounds every host's tool calls and the store's opening (`--tool-timeout`); `None`: no bound.
    pub fn timeout(&self) -> Option<std::time::Duration> {
        self.timeout
    }

    /// The identity of requests that carry none: the server's `--actor` and project.
    pub fn default_scope(&self) -> &Scope {
        &self.default
    }

    /// The host of `scope`, created on first use (it starts its tool-call recorder on the current Tokio
    /// runtime). The first call waits until the store is open, for at most the hosts' timeout: a store
    /// that does not answer while it opens (a frozen object store) fails the request, and the next one
    /// waits for the same opening again.
    ///
    /// # Errors
    /// [`HostError::UnknownIdentity`] when the set is fixed and has no host for `scope`;
    /// [`HostError::Unavailable`] when the store could not be opened, or not within the timeout.
    pub async fn host(&self, scope: &Scope) -> Result<ToolHost, HostError> {
        let host = async {
            // Held across the creation, so that concurrent first requests of one identity share one host.
            let mut hosts = self.hosts.lock().await;
            if let Some(host) = hosts.get(scope) {
                return Ok(host.clone());
            }
            let make = self.make.as_ref().ok_or_else(|| UnknownIdentity(scope.clone()))?;
            let memories = make(scope.clone()).await.map_err(HostError::Unavailable)?;
            let host = ToolHost::new(memories).with_timeout(self.timeout);
            hosts.insert(scope.clone(), host.clone());
            Ok(host)
        };
        bounded(self.timeout, host).await.unwrap_or_else(|limit| {
            Err(HostError::Unavailable(anyhow::anyhow!(
                "the memory store did not open within {} s (--tool-timeout): call again in a moment; if it keeps \
                 failing, the store cannot be reached (the server's log has the cause)",
                limit.as_secs()
            )))
        })
    }

    /// Waits until every host's recorded tool calls are written (call before exiting).
    pub async fn flush(&self) {
        let hosts: Vec<ToolHost> = self.hosts.lock().await.values().cloned().collect();
        for host in hosts {
            host.flush().await;
        }
    }
}
