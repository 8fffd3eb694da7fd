//! Graceful shutdown shared by every transport of one server process.
//!
//! On SIGINT/SIGTERM the server *drains*: new tool calls are refused ("server shutting down"), calls in
//! flight run to completion (their writes are acknowledged and durable), for at most a grace period;
//! then it *abandons* what is left (dropping a call kills its test process group, `memory::testrun`) and
//! closes its streams. When a stdio client closes stdin, nobody is left to read a result, so the server
//! abandons at once.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

/// Where the process is in its shutdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    Running,
    /// Refusing new calls, waiting for the ones in flight.
    Draining,
    /// Dropping whatever is still running; streams close.
    Abandoned,
}

/// The shutdown state of one process: its [`Phase`] and the number of tool calls in flight.
#[derive(Debug)]
pub struct Shutdown {
    phase: watch::Sender<Phase>,
    in_flight: watch::Sender<usize>,
}

/// Counts one tool call as in flight until dropped.
#[derive(Debug)]
pub struct CallGuard(Arc<Shutdown>);

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.0.in_flight.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl Shutdown {
    pub fn new() -> Arc<Self> {
        Arc::new(Self { phase: watch::channel(Phase::Running).0, in_flight: watch::channel(0).0 })
    }

    pub fn phase(&self) -> Phase {
        *self.phase.borrow()
    }

    /// Counts a new tool call, or `None` once draining has begun (the caller refuses the call).
    pub fn begin_call(self: &Arc<Self>) -> Option<CallGuard> {
        if self.phase() != Phase::Running {
            return None;
        }
        self.in_flight.send_modify(|n| *n += 1);
        Some(CallGuard(self.clone()))
    }

    /// Tool calls in flight now.
    pub fn in_flight(&self) -> usize {
        *self.in_flight.borrow()
    }

    /// Resolves once the phase is at least `phase`.
    pub async fn reached(&self, phase: Phase) {
        let mut rx = self.phase.subscribe();
        let _ = rx.wait_for(|p| *p >= phase).await;
    }

    /// Drops what is still running now (a stdio client that closed its end, or the end of [`Self::drain`]).
    pub fn abandon(&self) {
        self.phase.send_if_modified(|p| {
            let changed = *p != Phase::Abandoned;
            *p = Phase::Abandoned;
            changed
        });
    }

    /// Refuses new calls, waits up to `grace` for the calls in flight (and [`FLUSH_PAUSE`] for their
    /// responses to go out), then abandons the rest. Returns
    /// how many calls were abandoned (0 when all finished in time).
    pub async fn drain(&self, grace: Duration) -> usize {
        self.phase.send_if_modified(|p| {
            let changed = *p == Phase::Running;
            if changed {
                *p = Phase::Draining;
            }
            changed
        });
        let mut rx = self.in_flight.subscribe();
        let finished = tokio::time::timeout(grace, rx.wait_for(|n| *n == 0)).await.is_ok();
        let left = if finished { 0 } else { self.in_flight() };
        tokio::time::sleep(FLUSH_PAUSE).await;
        self.abandon();
        left
    }
}

/// Pause between the end of the last call in flight and closing the streams, so its response (already
/// handed to the transport) is written out.
pub const FLUSH_PAUSE: Duration = Duration::from_millis(250);

/// Waits for `signal` (a SIGTERM/SIGINT, or whatever else ends the service), then drains `shutdown` for
/// up to `grace` ([`Shutdown::drain`]; from then on a second signal exits at once) and logs how many
/// calls were abandoned. Each transport runs it beside its service and closes its streams when it
/// returns.
pub async fn drain_after(signal: impl Future<Output = ()>, shutdown: &Shutdown, grace: Duration) {
    signal.await;
    tracing::info!(in_flight = shutdown.in_flight(), "shutting down, draining (a second signal exits at once)");
    tokio::spawn(exit_on_second_signal());
    let abandoned = shutdown.drain(grace).await;
    if abandoned > 0 {
        tracing::warn!(abandoned, "grace period over, abandoning tool calls still running");
    }
}

/// Exits the process with code 130 on the next SIGTERM or SIGINT (the impatient second Ctrl-C), after
/// killing the test runs going on. Acknowledged writes are durable already; calls in flight are cut off.
pub async fn exit_on_second_signal() {
    signal_received().await;
    tracing::warn!("second signal: exiting without waiting for calls in flight");
    crate::memory::testrun::kill_running_groups();
    // _exit(2), not exit(3): the calls cut off may be inside ONNX Runtime, whose static destructors
    // exit(3) would run under them (see `exit_now` in main.rs)
    use std::io::Write;
    let _ = std::io::stdout().flush();
    // SAFETY: _exit(2) ends the process; no Rust value is used after it.
    unsafe { libc::_exit(130) }
}

/// Resolves on the first SIGTERM or SIGINT after this call (never, when the handlers cannot be
/// installed). The handlers are installed before it returns, so a signal that arrives before the future
/// is first polled still counts rather than killing the process (the default action). Call it within the
/// Tokio runtime.
///
/// On Windows, which has no signals, the console's Ctrl-C, Ctrl-Break and close events stand in for
/// them (`tokio::signal::windows`).
#[cfg(unix)]
pub fn signal_received() -> impl Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let handlers = (signal(SignalKind::terminate()), signal(SignalKind::interrupt()));
    async move {
        match handlers {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            _ => std::future::pending().await,
        }
    }
}

/// See the Unix version above.
#[cfg(windows)]
pub fn signal_received() -> impl Future<Output = ()> + Send + 'static {
    use tokio::signal::windows::{ctrl_break, ctrl_c, ctrl_close};
    let handlers = (ctrl_c(), ctrl_break(), ctrl_close());
    async move {
        match handlers {
            (Ok(mut c), Ok(mut brk), Ok(mut close)) => {
                tokio::select! {
                    _ = c.recv() => {}
                    _ = brk.recv() => {}
                    _ = close.recv() => {}
                }
            }
            _ => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn drain_waits_for_calls_in_flight_and_refuses_new_ones() {
        let shutdown = Shutdown::new();
        let call = shutdown.begin_call().unwrap();
        let draining = {
            let s = shutdown.clone();
            tokio::spawn(async move { s.drain(Duration::from_secs(5)).await })
        };
        shutdown.reached(Phase::Draining).await;
        assert!(shutdown.begin_call().is_none(), "no new call starts while draining");
        assert_eq!(shutdown.phase(), Phase::Draining, "the call in flight is not abandoned");
        drop(call);
        assert_eq!(draining.await.unwrap(), 0);
        assert_eq!(shutdown.phase(), Phase::Abandoned);
    }

    #[tokio::test]
    async fn drain_abandons_calls_that_outlive_the_grace_period() {
        let shutdown = Shutdown::new();
        let _stuck = shutdown.begin_call().unwrap();
        assert_eq!(shutdown.drain(Duration::from_millis(20)).await, 1);
        assert_eq!(shutdown.phase(), Phase::Abandoned);
    }
}
