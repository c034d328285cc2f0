//! The MPI transport (cargo feature `mpi`): one rank per process, started by
//! `mpiexec -n N vitlab train ...` (Open MPI or MPICH, one machine or several).
//!
//! Every collective is a non-blocking `MPI_Iallreduce`, polled until it completes or
//! the world's timeout passes: a peer that stopped answering (hung, stopped, or on a
//! machine that went away) then ends the whole job through `MPI_Abort`, with the
//! cause on this rank's stderr, instead of blocking every rank forever. A rank that
//! dies is reported by `mpiexec` itself, which then ends the others.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use mpi::collective::SystemOperation;
use mpi::datatype::Equivalence;
use mpi::environment::Universe;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use mpi::Threading;

use super::{fmt_secs, Collective, Reduce};
use crate::{Error, Result};

/// This process's rank in `MPI_COMM_WORLD`.
pub struct MpiWorld {
    rank: usize,
    size: usize,
    timeout: Duration,
    comm: Mutex<Comm>,
}

struct Comm {
    /// Finalises MPI when dropped (at the end of the program).
    _universe: Universe,
    world: SimpleCommunicator,
}

// SAFETY: MPI is initialised with (at least) MPI_THREAD_SERIALIZED, checked in
// `init`, and every call goes through the mutex, so no two threads are ever inside
// MPI at once.
unsafe impl Send for MpiWorld {}
unsafe impl Sync for MpiWorld {}

impl MpiWorld {
    /// Initialises MPI; each collective waits at most `timeout` for the other ranks.
    pub fn init(timeout: Duration) -> Result<MpiWorld> {
        let (universe, granted) = mpi::initialize_with_threading(Threading::Serialized)
            .ok_or_else(|| Error::Distributed("MPI was initialised twice in this process".into()))?;
        if matches!(granted, Threading::Single | Threading::Funneled) {
            return Err(Error::Distributed(format!(
                "this MPI grants {granted:?} threading; vitlab calls MPI from one thread at a time but not always \
                 the same one, which needs MPI_THREAD_SERIALIZED (build the MPI library with thread support)"
            )));
        }
        let world = universe.world();
        let (rank, size) = (world.rank() as usize, world.size() as usize);
        Ok(MpiWorld { rank, size, timeout, comm: Mutex::new(Comm { _universe: universe, world }) })
    }

    fn reduce<T: Equivalence + Copy>(&self, buf: &mut [T], op: Reduce) -> Result<()> {
        let comm = self.comm.lock().unwrap_or_else(PoisonError::into_inner);
        let send = buf.to_vec();
        let op = match op {
            Reduce::Sum => SystemOperation::sum(),
            Reduce::Max => SystemOperation::max(),
        };
        let deadline = Instant::now() + self.timeout;
        mpi::request::scope(|scope| {
            let mut request = comm.world.immediate_all_reduce_into(scope, &send[..], buf, op);
            let mut pause = Duration::from_micros(10);
            loop {
                match request.test() {
                    Ok(_) => return Ok(()),
                    Err(pending) => request = pending,
                }
                if Instant::now() >= deadline {
                    // The request cannot be abandoned (MPI may still write into `buf`):
                    // end every rank, as mpiexec does when one dies.
                    eprintln!(
                        "error: data-parallel training: rank {} of {}: a peer did not answer within {} s \
                         (stopped, hung or died; --peer-timeout sets the wait); aborting every rank",
                        self.rank,
                        self.size,
                        fmt_secs(self.timeout)
                    );
                    comm.world.abort(1);
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(1));
            }
        })
    }
}

impl Collective for MpiWorld {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn all_reduce(&self, buf: &mut [f32], op: Reduce) -> Result<()> {
        self.reduce(buf, op)
    }

    fn all_reduce_f64(&self, buf: &mut [f64], op: Reduce) -> Result<()> {
        self.reduce(buf, op)
    }

    fn abort(&self, message: &str) -> ! {
        eprintln!("error: rank {} of {}: {message}; aborting every rank", self.rank, self.size);
        // Not through the mutex: a collective that holds it may be what failed.
        // SAFETY: MPI_Abort is the one call the standard allows at any time.
        unsafe { mpi::ffi::MPI_Abort(mpi::ffi::RSMPI_COMM_WORLD, 1) };
        std::process::exit(1)
    }

    fn describe(&self) -> String {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string());
        format!("rank {} of {}: pid {} on {}", self.rank, self.size, std::process::id(), host.as_deref().unwrap_or("?"))
    }
}
