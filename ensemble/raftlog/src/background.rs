//! Slow clean-up (freeing memory, unlinking big files) kept off the caller's thread, which is
//! the ensemble's core thread: it would otherwise answer nobody meanwhile.

/// Runs `work` on a thread of its own. If no thread can be had, `work` is dropped unrun, which
/// every caller tolerates: dropped entries are freed here instead, and retired segments are
/// deleted at the next startup.
pub(crate) fn run(name: &str, work: impl FnOnce() + Send + 'static) {
    if let Err(e) = std::thread::Builder::new().name(name.into()).spawn(work) {
        tracing::warn!(thread = name, error = %e, "no thread for background clean-up");
    }
}
