//! Building models while burn's random generator is ours.
//!
//! burn's generator (and LibTorch's, under the `tch` backend) is process-global, and
//! burn draws a parameter's initial values lazily, on its first use. Two threads that
//! build models at once therefore steal draws from each other: a seeded build then
//! depends on what else the process does, and a resumed run no longer starts from the
//! weights of the uninterrupted one. Every model constructor goes through [`built`] or
//! [`seeded`], which hold one lock (reentrant on its own thread, so a constructor may
//! build its parts through other constructors) and draw every parameter before
//! releasing it.

use std::cell::Cell;
use std::sync::{Condvar, Mutex, PoisonError};
use std::thread::ThreadId;

use burn::module::{Module, ModuleVisitor, Param};
use burn::prelude::*;

use crate::error::Result;

/// The thread that holds the generator, if any.
static OWNER: Mutex<Option<ThreadId>> = Mutex::new(None);
static RELEASED: Condvar = Condvar::new();

thread_local! {
    /// How many nested [`locked`] calls this thread is inside.
    static DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// Releases the generator when the outermost holder returns or unwinds.
struct Held;

impl Drop for Held {
    fn drop(&mut self) {
        let depth = DEPTH.get() - 1;
        DEPTH.set(depth);
        if depth == 0 {
            *OWNER.lock().unwrap_or_else(PoisonError::into_inner) = None;
            RELEASED.notify_one();
        }
    }
}

/// Runs `f` while this thread alone draws from the global generators.
fn locked<R>(f: impl FnOnce() -> R) -> R {
    if DEPTH.get() == 0 {
        let me = std::thread::current().id();
        let mut owner = OWNER.lock().unwrap_or_else(PoisonError::into_inner);
        while owner.is_some() {
            owner = RELEASED.wait(owner).unwrap_or_else(PoisonError::into_inner);
        }
        *owner = Some(me);
    }
    DEPTH.set(DEPTH.get() + 1);
    let _held = Held;
    f()
}

/// Draws every lazily initialised parameter of `model` now.
fn materialise<M: Module>(model: &M) {
    struct Touch;
    impl ModuleVisitor for Touch {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let _ = param.val();
        }
    }
    model.visit(&mut Touch);
}

/// Builds a randomly initialised module (the generator's current state) without
/// interleaving its draws with any other thread's.
pub fn built<M: Module>(build: impl FnOnce() -> Result<M>) -> Result<M> {
    locked(|| {
        let model = build()?;
        materialise(&model);
        Ok(model)
    })
}

/// Builds a module with `build` whose initial weights depend only on `seed`
/// (reproducible even when several threads build models at once).
pub fn seeded<M: Module>(device: &Device, seed: u64, build: impl FnOnce() -> Result<M>) -> Result<M> {
    locked(|| {
        device.seed(seed);
        built(build)
    })
}
