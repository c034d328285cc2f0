//! Run-time backend selection. The binary picks a [`Device`] once, at its edge;
//! everything below takes `&Device`.

use std::fmt;
use std::str::FromStr;

use burn::tensor::Device;
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The compute backends vitlab knows. Which ones exist depends on cargo features.
/// In config files as on the command line: `flex`, `tch`, `tch-cuda`, `cuda`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// burn's pure-Rust CPU backend; always built.
    Flex,
    /// LibTorch on the CPU (cargo feature `tch`).
    Tch,
    /// LibTorch on CUDA device 0 (cargo feature `tch`, a CUDA libtorch).
    TchCuda,
    /// burn's CubeCL CUDA backend (cargo feature `cuda`).
    Cuda,
}

impl Backend {
    pub const ALL: [Backend; 4] = [Backend::Flex, Backend::Tch, Backend::TchCuda, Backend::Cuda];

    pub fn name(self) -> &'static str {
        match self {
            Backend::Flex => "flex",
            Backend::Tch => "tch",
            Backend::TchCuda => "tch-cuda",
            Backend::Cuda => "cuda",
        }
    }

    /// Whether this binary was compiled with the backend.
    pub fn compiled(self) -> bool {
        match self {
            Backend::Flex => true,
            Backend::Tch | Backend::TchCuda => cfg!(feature = "tch"),
            Backend::Cuda => cfg!(feature = "cuda"),
        }
    }

    /// Whether the backend can run here: compiled in and, for the GPU backends, a GPU that
    /// its library sees (LibTorch: `torch.cuda.is_available()`; CubeCL is not probed and
    /// counts as available when compiled).
    pub fn available(self) -> bool {
        match self {
            #[cfg(feature = "tch")]
            Backend::TchCuda => tch::Cuda::is_available(),
            #[cfg(not(feature = "tch"))]
            Backend::TchCuda => false,
            b => b.compiled(),
        }
    }

    /// The CPU backends compiled into this binary, fastest-first preference aside.
    pub fn compiled_cpu() -> Vec<Backend> {
        [Backend::Flex, Backend::Tch].into_iter().filter(|b| b.compiled()).collect()
    }

    /// The device (without autodiff) for this backend.
    pub fn device(self) -> Result<Device> {
        if !self.compiled() {
            let feature = match self {
                Backend::Tch | Backend::TchCuda => "tch",
                Backend::Cuda => "cuda",
                Backend::Flex => unreachable!("flex is always compiled"),
            };
            return Err(Error::Backend {
                name: self.name().into(),
                message: format!("this vitlab binary was built without it; rebuild with `--features {feature}`"),
            });
        }
        if self == Backend::TchCuda && !self.available() {
            // LibTorch would otherwise panic on the first tensor it puts on the device.
            return Err(Error::Backend {
                name: self.name().into(),
                message: "LibTorch sees no CUDA GPU here (torch.cuda.is_available() is false: no GPU or driver, \
                          CUDA_VISIBLE_DEVICES hides it, or the libtorch this binary loads is a CPU-only build); \
                          use backend = \"tch\" for LibTorch on the CPU"
                    .into(),
            });
        }
        Ok(self.device_unchecked())
    }

    #[allow(deprecated)] // burn marks LibTorch deprecated; it is our CPU fast path.
    fn device_unchecked(self) -> Device {
        match self {
            #[cfg(feature = "tch")]
            Backend::Tch => Device::libtorch(),
            #[cfg(feature = "tch")]
            Backend::TchCuda => Device::libtorch_cuda(0),
            #[cfg(feature = "cuda")]
            Backend::Cuda => Device::cuda(0),
            _ => Device::flex(),
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Backend {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Backend::ALL
            .into_iter()
            .find(|b| b.name() == s)
            .ok_or_else(|| Error::config("backend", format!("unknown backend {s:?}; expected one of flex, tch, tch-cuda, cuda")))
    }
}

/// vitlab's mmap threshold: buffers up to 256 MiB stay on the heap.
const HEAP_UP_TO: i32 = 256 << 20;
/// glibc's own ceiling for its dynamic threshold, used while [`mapped_above_32_mib`] lives.
const MAPPED_ABOVE: i32 = 32 << 20;
/// Whether [`tune_allocator`] set the thresholds (so that vitlab may change them again).
static TUNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Keep large tensor buffers on the heap between training steps (glibc only).
///
/// glibc serves every allocation above its mmap threshold (dynamic, at most
/// 32 MiB) with a fresh `mmap` and returns it with `munmap`, so a step that
/// allocates and frees the same activation-sized buffers pays for page faults
/// and the zeroing of new pages every time: 11.5 % of a LibTorch ViT-Tiny/4
/// training step's CPU samples against 5 % for PyTorch, and at 32 MiB flex's
/// ViT-Tiny/4 inference at batch 256 (51 MB MLP activations) ran 30 % slower, 1.6
/// million page faults in 5 batches against 0.16 million at 256 MiB
/// (docs/PERFORMANCE.md). So the threshold is 256 MiB, and trimming is off (-1):
/// a flex ViT-Tiny/4 step at batch 128 frees more than 1 GiB at the heap's top,
/// which a 1 GiB trim threshold still handed back to the kernel every step (6.2
/// million minor page faults and 11 s of system time in a 4-step bench, against
/// 0.7 million and 1.9 s without trimming). The FID network is the exception, see
/// [`mapped_above_32_mib`].
/// Called once by the `vitlab` binary at start-up; does nothing when the user set any `MALLOC_*`
/// environment variable, `GLIBC_TUNABLES` or `VITLAB_SYSTEM_MALLOC=1`, or on other platforms.
/// Returns whether it set the thresholds.
pub fn tune_allocator() -> bool {
    let user_set = std::env::vars_os().any(|(k, _)| {
        let k = k.to_string_lossy();
        k.starts_with("MALLOC_") || k == "GLIBC_TUNABLES" || k == "VITLAB_SYSTEM_MALLOC"
    });
    if user_set {
        return false;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; called before any threads start.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, HEAP_UP_TO);
        libc::mallopt(libc::M_TRIM_THRESHOLD, -1);
        TUNED.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    TUNED.load(std::sync::atomic::Ordering::Relaxed)
}

/// While the returned guard lives, buffers above 32 MiB are mapped (and unmapped
/// when freed) instead of kept on the heap; where [`tune_allocator`] did not run,
/// nothing changes. For the FID network: InceptionV3's activations at 299 px
/// (140-280 MB at batch 50) come in many sizes, and on the heap they fragmented it,
/// a LibTorch peak of 1,745-1,815 MiB against pytorch-fid's 1,569; mapped, 1,501.
/// Guards may nest and overlap across threads; the heap threshold returns when the
/// last one is dropped.
pub fn mapped_above_32_mib() -> MappedAbove {
    guards(1);
    MappedAbove(())
}

/// Counts the live guards; the first sets the 32 MiB threshold, the last drop resets it.
fn guards(change: isize) {
    static LIVE: std::sync::Mutex<usize> = std::sync::Mutex::new(0);
    let mut live = LIVE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let before = *live;
    *live = live.saturating_add_signed(change);
    match (before, *live) {
        (0, 1) => set_threshold(MAPPED_ABOVE),
        (1, 0) => set_threshold(HEAP_UP_TO),
        _ => {}
    }
}

/// See [`mapped_above_32_mib`].
#[must_use = "the threshold returns to 256 MiB when the guard is dropped"]
pub struct MappedAbove(());

impl Drop for MappedAbove {
    fn drop(&mut self) {
        guards(-1);
    }
}

fn set_threshold(bytes: i32) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if TUNED.load(std::sync::atomic::Ordering::Relaxed) {
        // SAFETY: mallopt takes the main arena's lock and sets a size that malloc
        // reads on its next large request; it frees and moves nothing.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, bytes);
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = bytes;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A config file names each backend as the command line does (`backend =
    /// "tch-cuda"` was refused as an unknown variant, `tchcuda` expected), and a
    /// resolved config writes it back the same way.
    #[test]
    fn config_files_name_every_backend_as_the_command_line_does() {
        #[derive(Serialize, Deserialize)]
        struct C {
            backend: Backend,
        }
        for b in Backend::ALL {
            let text = format!("backend = \"{}\"", b.name());
            let c: C = toml::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(c.backend, b);
            assert_eq!(toml::to_string(&c).unwrap().trim(), text);
            assert_eq!(b.name().parse::<Backend>().unwrap(), b);
        }
    }

    /// `tch-cuda` where LibTorch sees no GPU is an error that names the backend and the
    /// way out, not LibTorch's panic on the first tensor; where it sees one, a device.
    #[test]
    fn tch_cuda_without_a_gpu_is_a_clear_error() {
        let got = Backend::TchCuda.device();
        match (Backend::TchCuda.compiled(), Backend::TchCuda.available()) {
            (true, true) => assert!(got.is_ok(), "{:?}", got.err()),
            (true, false) => {
                let e = got.unwrap_err().to_string();
                assert!(e.starts_with("backend tch-cuda: LibTorch sees no CUDA GPU here"), "{e}");
                assert!(e.contains("backend = \"tch\""), "{e}");
            }
            (false, _) => assert!(got.unwrap_err().to_string().contains("--features tch"), "built without tch"),
        }
    }
}
