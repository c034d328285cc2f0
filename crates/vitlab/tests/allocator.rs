//! vitlab's glibc allocator settings (`backend::tune_allocator`): activation-sized
//! buffers stay on the heap between steps, except while the FID network runs
//! (`backend::mapped_above_32_mib`), where they are mapped so that its many sizes do
//! not fragment the heap. One test in its own process: the thresholds are global.

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn large_buffers_stay_on_the_heap_except_under_the_fid_guard() {
    use vitlab::backend::{mapped_above_32_mib, tune_allocator};
    assert!(
        tune_allocator(),
        "MALLOC_*, GLIBC_TUNABLES or VITLAB_SYSTEM_MALLOC is set: vitlab then leaves the allocator alone, \
         and this test checks vitlab's settings; unset it"
    );
    // Bytes in mapped chunks, and whether a 48 MiB buffer (an MLP activation of
    // ViT-Tiny/4 inference at batch 256 is 51 MB) adds to them.
    // SAFETY: mallinfo2 only reads the allocator's statistics.
    let mapped = || unsafe { libc::mallinfo2() }.hblkhd;
    let size = 48 << 20;
    let is_mapped = || {
        let before = mapped();
        let buffer = std::hint::black_box(vec![1u8; size]);
        let grew = mapped() >= before + size;
        drop(buffer);
        grew
    };
    // The guard first: glibc applies its threshold only when no freed heap chunk
    // is large enough, and the heap, never trimmed, keeps what it once held.
    {
        let _outer = mapped_above_32_mib();
        assert!(is_mapped(), "under the guard a 48 MiB buffer is mapped");
        drop(mapped_above_32_mib());
        assert!(is_mapped(), "a nested guard's drop leaves the outer one in force");
    }
    assert!(!is_mapped(), "without a guard, after tune_allocator, a 48 MiB buffer comes from the heap");
    assert!(!is_mapped(), "and comes from it again");
}
