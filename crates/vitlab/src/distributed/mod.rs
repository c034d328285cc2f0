//! Data-parallel training: the group of processes (or threads) a run trains in.
//!
//! Every rank holds a full replica of the model and optimiser. The loader builds the
//! same global batch on every rank (same seed, same augmentation and Mixup draws);
//! each rank runs forward and backward on its own contiguous slice of it
//! ([`World::slice`]), and the gradients, weighted by each slice's share of the batch,
//! are summed over the ranks in one flattened all-reduce per step, so every replica
//! applies the gradient of the whole batch's mean loss: the same update as one process
//! with the same seed, up to the order of floating-point sums. Rank 0 alone writes the
//! run directory; every rank checks after each epoch that its weights and optimiser
//! state are bit-identical to the others'.
//!
//! A [`World`] is chosen once, at the binary's edge: [`World::single`] for one process,
//! [`LocalGroup`] for ranks as threads of one process (tests, and a reference for the
//! semantics), and MPI (`mpiexec -n N vitlab train ...`, cargo feature `mpi`).
//! Every collective waits at most the world's timeout for the other ranks (threads
//! then name the ranks that did not answer; under MPI the job ends through
//! `MPI_Abort`, and `mpiexec` names a rank that died).

mod gather;
mod grads;
mod local;
#[cfg(feature = "mpi")]
pub mod mpi;

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{Error, Result};

pub use gather::all_gather_rows;
pub use grads::all_reduce_gradients;
pub use local::LocalGroup;

/// How values from every rank are combined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduce {
    Sum,
    Max,
}

impl Reduce {
    fn apply(self, a: f64, b: f64) -> f64 {
        match self {
            Reduce::Sum => a + b,
            Reduce::Max => a.max(b),
        }
    }
}

/// The collective operations a data-parallel run needs. Every rank calls them in the
/// same order with buffers of the same length.
pub trait Collective: Send + Sync {
    fn rank(&self) -> usize;
    fn size(&self) -> usize;
    /// Combines `buf` element-wise over every rank, in place on each (identical
    /// results on every rank).
    fn all_reduce(&self, buf: &mut [f32], op: Reduce) -> Result<()>;
    /// The same for double-precision values (monitors, counts, hashes).
    fn all_reduce_f64(&self, buf: &mut [f64], op: Reduce) -> Result<()>;
    /// Ends the whole job after an error on this rank alone (a rank that returned
    /// would leave the others waiting in their next collective until the timeout).
    fn abort(&self, message: &str) -> ! {
        eprintln!("error: {message}");
        std::process::exit(1)
    }
    /// Where this rank runs, for the log (`rank R of N: pid P on HOST`).
    fn describe(&self) -> String {
        format!("rank {} of {}: pid {}", self.rank(), self.size(), std::process::id())
    }
}

/// The ranks a run trains on; cheap to clone (clones share one [`CommClock`]).
#[derive(Clone)]
pub struct World(Arc<dyn Collective>, Arc<CommClock>);

/// Where a rank's time in the gradient exchange went, summed since the clock was made
/// or last [`taken`](World::take_comm_times): the training log's measure of what
/// data-parallel costs (docs/DISTRIBUTED.md).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CommTimes {
    /// The whole exchange of [`all_reduce_gradients`]: flattening the gradients to
    /// the host, the collective, and handing the sums back to autodiff.
    pub exchange: Duration,
    /// Inside the exchange's all-reduce alone (for MPI: from `MPI_Iallreduce` until it
    /// completes), which includes waiting for a slower rank to arrive. CycleGAN's
    /// gathers of generated images are not gradient exchanges and count in neither.
    pub collective: Duration,
    /// How many gradient exchanges.
    pub steps: u64,
}

impl CommTimes {
    /// The log line: what the exchange cost over `training`, the time of the steps.
    pub fn describe(&self, training: Duration) -> String {
        let (exchange, total) = (self.exchange.as_secs_f64(), training.as_secs_f64().max(1e-9));
        format!(
            "gradient exchange: {exchange:.2} s of {total:.1} s of steps ({:.1} %, {} steps, {:.1} ms each), {:.2} s of it \
             in the all-reduce",
            100.0 * exchange / total,
            self.steps,
            1e3 * exchange / self.steps.max(1) as f64,
            self.collective.as_secs_f64()
        )
    }
}

#[derive(Default)]
struct CommClock {
    exchange_ns: AtomicU64,
    collective_ns: AtomicU64,
    steps: AtomicU64,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "World(rank {} of {})", self.rank(), self.size())
    }
}

/// One process: every collective is the identity.
struct Single;

impl Collective for Single {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn all_reduce(&self, _: &mut [f32], _: Reduce) -> Result<()> {
        Ok(())
    }
    fn all_reduce_f64(&self, _: &mut [f64], _: Reduce) -> Result<()> {
        Ok(())
    }
}

impl World {
    /// One process, no peers.
    pub fn single() -> Self {
        World(Arc::new(Single), Arc::default())
    }

    pub fn new(c: impl Collective + 'static) -> Self {
        World(Arc::new(c), Arc::default())
    }

    pub fn rank(&self) -> usize {
        self.0.rank()
    }

    pub fn size(&self) -> usize {
        self.0.size()
    }

    /// Whether this rank writes the run directory (rank 0).
    pub fn writes(&self) -> bool {
        self.rank() == 0
    }

    pub fn describe(&self) -> String {
        self.0.describe()
    }

    /// Ends every rank of the job after `message`, an error on this rank (see
    /// [`Collective::abort`]).
    pub fn abort(&self, message: &str) -> ! {
        self.0.abort(message)
    }

    /// This rank's rows of a global batch of `n`: contiguous, in rank order, sizes
    /// differing by at most one.
    pub fn slice(&self, n: usize) -> Range<usize> {
        let (r, k) = (self.rank(), self.size());
        r * n / k..(r + 1) * n / k
    }

    pub fn all_reduce(&self, buf: &mut [f32], op: Reduce) -> Result<()> {
        if self.size() == 1 {
            return Ok(());
        }
        self.0.all_reduce(buf, op)
    }

    /// Counts one gradient exchange that began at `started` and spent `collective` in
    /// its all-reduce (see [`CommTimes`]).
    pub(crate) fn exchanged(&self, started: Instant, collective: Duration) {
        let ns = |d: Duration| d.as_nanos() as u64;
        self.1.exchange_ns.fetch_add(ns(started.elapsed()), Ordering::Relaxed);
        self.1.collective_ns.fetch_add(ns(collective), Ordering::Relaxed);
        self.1.steps.fetch_add(1, Ordering::Relaxed);
    }

    /// The time this rank spent exchanging gradients since the last call (or since the
    /// world was made), and resets the count.
    pub fn take_comm_times(&self) -> CommTimes {
        let take = |c: &AtomicU64| c.swap(0, Ordering::Relaxed);
        CommTimes {
            exchange: Duration::from_nanos(take(&self.1.exchange_ns)),
            collective: Duration::from_nanos(take(&self.1.collective_ns)),
            steps: take(&self.1.steps),
        }
    }

    pub fn all_reduce_f64(&self, buf: &mut [f64], op: Reduce) -> Result<()> {
        if self.size() == 1 {
            return Ok(());
        }
        self.0.all_reduce_f64(buf, op)
    }

    /// Rank 0's values of `buf`, on every rank (returned too, for chaining).
    pub fn from_rank0<'b>(&self, buf: &'b mut [f64]) -> Result<&'b mut [f64]> {
        if !self.writes() {
            buf.iter_mut().for_each(|x| *x = 0.0);
        }
        self.all_reduce_f64(buf, Reduce::Sum)?;
        Ok(buf)
    }

    /// Checks that every rank holds the same `tensors` (weights, optimiser state),
    /// by fingerprint; an error names the ranks that differ from rank 0.
    pub fn check_replicas(&self, tensors: &crate::tensor_file::TensorMap, what: &str) -> Result<()> {
        if self.size() == 1 {
            return Ok(());
        }
        let hash = fingerprint(tensors.values().map(|t| &t.data[..]));
        // Exact in f64: 32-bit halves, and a one-hot row per rank for the culprits.
        let k = self.size();
        let mut buf = vec![0f64; 2 * k];
        buf[2 * self.rank()] = (hash >> 32) as f64;
        buf[2 * self.rank() + 1] = (hash & 0xffff_ffff) as f64;
        self.all_reduce_f64(&mut buf, Reduce::Sum)?;
        let differing: Vec<String> = (1..k).filter(|&r| buf[2 * r..2 * r + 2] != buf[0..2]).map(|r| r.to_string()).collect();
        if differing.is_empty() {
            Ok(())
        } else {
            Err(Error::Distributed(format!(
                "the replicas diverged: rank(s) {} hold other {what} than rank 0 (a nondeterministic kernel, or \
                 ranks running different builds or configs)",
                differing.join(", ")
            )))
        }
    }
}

/// The number of ranks an MPI launcher (`mpiexec`, `mpirun`) started this process
/// among, from the variables Open MPI (`OMPI_COMM_WORLD_SIZE`) and MPICH's hydra
/// (`PMI_SIZE`) set; `None` when not launched by one.
pub fn launched_ranks() -> Option<usize> {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"].iter().find_map(|v| std::env::var(v).ok()?.trim().parse().ok())
}

impl World {
    /// The world this process was launched in: one process, or (`mpiexec -n N`, with
    /// N > 1) its rank of N over MPI, whose collectives wait at most `timeout`.
    /// Without the `mpi` feature, a launch with several ranks is a usage error: each
    /// would otherwise train the whole run alone and overwrite the others' files.
    pub fn from_launch(timeout: Duration) -> Result<World> {
        match launched_ranks() {
            None | Some(0) | Some(1) => Ok(World::single()),
            #[cfg(feature = "mpi")]
            Some(_) => Ok(World::new(mpi::MpiWorld::init(timeout)?)),
            #[cfg(not(feature = "mpi"))]
            Some(n) => {
                let _ = timeout;
                Err(Error::usage(
                    "mpiexec",
                    format!(
                        "this vitlab was built without the `mpi` feature, so its {n} ranks would each train the whole \
                         run alone; build it with `--features mpi` (docs/DISTRIBUTED.md) or run one process"
                    ),
                ))
            }
        }
    }
}

/// How long a collective waits for the other ranks before giving up.
pub const DEFAULT_PEER_TIMEOUT: Duration = Duration::from_secs(300);

/// What went wrong when a collective waited `timeout` for `missing` ranks.
pub(crate) fn peers_timed_out(missing: &[usize], timeout: Duration) -> String {
    let names: Vec<String> = missing.iter().map(|r| r.to_string()).collect();
    format!(
        "{} {} did not answer within {} s (stopped, hung or died; --peer-timeout sets the wait)",
        if missing.len() == 1 { "rank" } else { "ranks" },
        names.join(", "),
        fmt_secs(timeout)
    )
}

pub(crate) fn fmt_secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0}")
    } else {
        format!("{s}")
    }
}

/// FNV-1a over the bytes of every value, in order: the replica fingerprint.
pub fn fingerprint<'a>(values: impl IntoIterator<Item = &'a [f32]>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for v in values {
        for x in v {
            for b in x.to_bits().to_le_bytes() {
                h ^= b as u64;
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_cover_the_batch_in_rank_order() {
        for (n, k) in [(128, 2), (80, 3), (7, 7), (9, 4)] {
            let mut next = 0;
            for r in 0..k {
                let s = LocalGroup::worlds(k, DEFAULT_PEER_TIMEOUT)[r].slice(n);
                assert_eq!(s.start, next);
                assert!(s.len() == n / k || s.len() == n / k + 1, "{n} over {k}: {s:?}");
                next = s.end;
            }
            assert_eq!(next, n);
        }
    }

    /// Runs `f` on every rank of a 2-thread group; the results in rank order.
    fn on_two_ranks<T: Send>(f: impl Fn(&World) -> T + Sync) -> Vec<T> {
        let worlds = LocalGroup::worlds(2, Duration::from_secs(10));
        std::thread::scope(|s| {
            let handles: Vec<_> = worlds.iter().map(|w| s.spawn(|| f(w))).collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[test]
    fn every_rank_gets_rank_0s_values_and_a_diverged_replica_is_named() {
        let got = on_two_ranks(|w| {
            let mut v = [w.rank() as f64 + 0.5, f64::NAN, -1.0 - w.rank() as f64];
            w.from_rank0(&mut v).unwrap().to_vec()
        });
        for v in &got {
            assert_eq!((v[0], v[2]), (0.5, -1.0));
            assert!(v[1].is_nan());
        }
        let tensors = |x: f32| {
            let mut m = crate::tensor_file::TensorMap::new();
            m.insert("w".into(), crate::tensor_file::HostTensor::new(vec![2], vec![1.0, x]));
            m
        };
        assert!(on_two_ranks(|w| w.check_replicas(&tensors(2.0), "weights")).iter().all(Result::is_ok));
        for r in on_two_ranks(|w| w.check_replicas(&tensors(w.rank() as f32), "weights")) {
            let e = r.unwrap_err().to_string();
            assert!(e.contains("rank(s) 1 hold other weights than rank 0"), "{e}");
        }
    }

    #[test]
    fn the_exchange_line_gives_the_share_of_the_steps() {
        let t = CommTimes { exchange: Duration::from_millis(2210), collective: Duration::from_millis(1520), steps: 30 };
        assert_eq!(
            t.describe(Duration::from_secs_f64(69.6)),
            "gradient exchange: 2.21 s of 69.6 s of steps (3.2 %, 30 steps, 73.7 ms each), 1.52 s of it in the all-reduce"
        );
    }

    #[test]
    fn fingerprints_see_one_bit() {
        let a = [1.0f32, 2.0, 3.0];
        let mut b = a;
        b[2] = f32::from_bits(b[2].to_bits() ^ 1);
        assert_ne!(fingerprint([&a[..]]), fingerprint([&b[..]]));
        assert_eq!(fingerprint([&a[..]]), fingerprint([&a[..]]));
    }
}
