//! Slow clean-up (freeing memory, unlinking big files) kept off the caller's thread, which is
//! the ensemble's core thread: it would otherwise answer nobody meanwhile.

/// Returns free heap pages to the kernel. glibc keeps freed memory in its arenas unless asked,
/// so without this a member's RSS stays at the in-memory log's high-water mark (one member with
/// 100k znodes after the bench matrix: 234 MiB without, 99 MiB with). It took 17-26 ms here:
/// only for background threads.
pub(crate) fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages to the kernel; it is thread-safe and touches
    // no memory in use.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Runs `work` on a thread of its own. If no thread can be had, `work` is dropped unrun, which
/// every caller tolerates: dropped entries are freed here instead, and retired segments are
/// deleted at the next startup.
pub(crate) fn run(name: &str, work: impl FnOnce() + Send + 'static) {
    if let Err(e) = std::thread::Builder::new().name(name.into()).spawn(work) {
        tracing::warn!(thread = name, error = %e, "no thread for background clean-up");
    }
}

/// Returns freed heap memory to the kernel on a thread of its own: for a caller that has just
/// freed a lot (a large delete from the tree) and must not wait the tens of ms it takes.
pub fn release_freed_memory() {
    run("baton-trim", return_freed_memory);
}
