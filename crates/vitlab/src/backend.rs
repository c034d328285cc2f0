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

/// Keep large tensor buffers on the heap between training steps (glibc only).
///
/// glibc serves every allocation above its mmap threshold (dynamic, at most
/// 32 MiB) with a fresh `mmap` and returns it with `munmap`, so a training step
/// that allocates and frees the same activation-sized buffers pays for
/// page faults and zeroing of new pages every time: 11.5 % of a LibTorch
/// ViT-Tiny/4 step's CPU samples against 5 % for PyTorch (docs/PERFORMANCE.md).
/// Raising the threshold to 256 MiB and the trim threshold to 1 GiB (freed
/// memory stays in the heap for the next step) made that step 11 % faster; its
/// peak RSS rose by about a third, to PyTorch's (docs/PERFORMANCE.md). Trimming
/// is now off altogether (-1): a flex ViT-Tiny/4 step at batch 128 frees more
/// than 1 GiB at the heap's top, which the 1 GiB threshold still handed back to
/// the kernel every step (6.2 million minor page faults and 11 s of system time
/// in a 4-step bench, against 0.7 million and 1.9 s without trimming).
/// The mmap threshold is now 32 MiB, glibc's own ceiling for its dynamic one:
/// at 256 MiB the LibTorch FID network's 140-280 MB activations (batch 50 at
/// 299 px) stayed in the heap and fragmented it, a peak of 1,745-1,815 MiB
/// against pytorch-fid's 1,569; at 32 MiB 1,501 (1,415 with glibc's defaults).
/// ViT-Tiny/4 training at batch 128 allocates nothing that large (the same page
/// faults on both backends); flex ViT-Small/4 pays about a million more faults in
/// a 3-step bench (its median step 5 % slower, its fastest the same) and peaks
/// 100 MiB lower.
/// Called once by the `vitlab` binary at start-up; does nothing when the user set any `MALLOC_*`
/// environment variable or `VITLAB_SYSTEM_MALLOC=1`, or on other platforms.
pub fn tune_allocator() {
    let user_set = std::env::vars_os().any(|(k, _)| {
        let k = k.to_string_lossy();
        k.starts_with("MALLOC_") || k == "GLIBC_TUNABLES" || k == "VITLAB_SYSTEM_MALLOC"
    });
    if user_set {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; called before any threads start.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, -1);
    }
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
