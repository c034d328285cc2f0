//! Ranks as threads of one process, over shared memory: the tests' stand-in for
//! MPI, with the same semantics (results summed in rank order, identical on every
//! rank; a rank that does not arrive within the timeout is named, and the group is
//! then broken for everyone).

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::{peers_timed_out, Collective, Reduce, World};
use crate::{Error, Result};

/// One rank's handle on a group of threads.
pub struct LocalGroup {
    rank: usize,
    shared: Arc<Shared>,
}

struct Shared {
    size: usize,
    timeout: Duration,
    round: Mutex<Round>,
    changed: Condvar,
}

#[derive(Default)]
struct Round {
    /// Rounds completed so far; the one in progress is `done`.
    done: u64,
    /// Each rank's contribution to the round in progress.
    slots: Vec<Option<Vec<f64>>>,
    /// Finished rounds' results and how many ranks have yet to read them.
    results: HashMap<u64, (Arc<Vec<f64>>, usize)>,
    /// Set once a rank timed out: every later call fails with it.
    broken: Option<String>,
}

impl LocalGroup {
    /// `size` ranks, each waiting at most `timeout` for the others in a collective.
    pub fn new(size: usize, timeout: Duration) -> Vec<LocalGroup> {
        let round = Round { slots: vec![None; size], ..Default::default() };
        let shared = Arc::new(Shared { size, timeout, round: Mutex::new(round), changed: Condvar::new() });
        (0..size).map(|rank| LocalGroup { rank, shared: shared.clone() }).collect()
    }

    /// The same, as worlds to train in (one per thread).
    pub fn worlds(size: usize, timeout: Duration) -> Vec<World> {
        LocalGroup::new(size, timeout).into_iter().map(World::new).collect()
    }

    fn reduce(&self, values: Vec<f64>, op: Reduce) -> Result<Arc<Vec<f64>>> {
        let s = &self.shared;
        let mut round = s.round.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(why) = &round.broken {
            return Err(Error::Distributed(why.clone()));
        }
        let mine = round.done;
        if round.slots[self.rank].is_some() {
            return Err(Error::Distributed(format!("rank {} entered a collective twice", self.rank)));
        }
        round.slots[self.rank] = Some(values);
        if round.slots.iter().all(Option::is_some) {
            // The last to arrive combines, in rank order (the same sums whoever is last).
            let mut slots = round.slots.iter_mut().map(|s| s.take().expect("every slot is filled"));
            let mut acc = slots.next().expect("at least one rank");
            for other in slots {
                if other.len() != acc.len() {
                    let why = format!("ranks reduced buffers of different lengths ({} and {})", acc.len(), other.len());
                    round.broken = Some(why.clone());
                    s.changed.notify_all();
                    return Err(Error::Distributed(why));
                }
                acc.iter_mut().zip(&other).for_each(|(a, &b)| *a = op.apply(*a, b));
            }
            round.results.insert(mine, (Arc::new(acc), s.size));
            round.done += 1;
            s.changed.notify_all();
        }
        let deadline = Instant::now() + s.timeout;
        loop {
            if let Some((result, readers)) = round.results.get_mut(&mine) {
                let result = result.clone();
                *readers -= 1;
                if *readers == 0 {
                    round.results.remove(&mine);
                }
                return Ok(result);
            }
            if let Some(why) = &round.broken {
                return Err(Error::Distributed(why.clone()));
            }
            let now = Instant::now();
            if now >= deadline {
                let missing: Vec<usize> = (0..s.size).filter(|&r| round.slots[r].is_none()).collect();
                let why = peers_timed_out(&missing, s.timeout);
                round.broken = Some(why.clone());
                s.changed.notify_all();
                return Err(Error::Distributed(why));
            }
            round = s.changed.wait_timeout(round, deadline - now).unwrap_or_else(PoisonError::into_inner).0;
        }
    }
}

impl Collective for LocalGroup {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.shared.size
    }

    fn all_reduce(&self, buf: &mut [f32], op: Reduce) -> Result<()> {
        let result = self.reduce(buf.iter().map(|&v| v as f64).collect(), op)?;
        buf.iter_mut().zip(result.iter()).for_each(|(b, &r)| *b = r as f32);
        Ok(())
    }

    fn all_reduce_f64(&self, buf: &mut [f64], op: Reduce) -> Result<()> {
        let result = self.reduce(buf.to_vec(), op)?;
        buf.copy_from_slice(&result);
        Ok(())
    }

    fn describe(&self) -> String {
        format!("rank {} of {}: thread of pid {}", self.rank, self.shared.size, std::process::id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rank_gets_the_sum_and_the_max_over_many_rounds() {
        let worlds = LocalGroup::worlds(3, Duration::from_secs(10));
        let results: Vec<Vec<(Vec<f32>, Vec<f64>)>> = std::thread::scope(|s| {
            let handles: Vec<_> = worlds
                .iter()
                .map(|w| {
                    s.spawn(move || {
                        (0..50)
                            .map(|round| {
                                let r = w.rank() as f32;
                                let mut a = vec![r, r * 10.0 + round as f32];
                                w.all_reduce(&mut a, Reduce::Sum).unwrap();
                                let mut m = vec![r as f64 - round as f64];
                                w.all_reduce_f64(&mut m, Reduce::Max).unwrap();
                                (a, m)
                            })
                            .collect()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for per_rank in &results {
            for (round, (a, m)) in per_rank.iter().enumerate() {
                assert_eq!(a, &vec![3.0, 30.0 + 3.0 * round as f32]);
                assert_eq!(m, &vec![2.0 - round as f64]);
            }
        }
    }

    #[test]
    fn a_rank_that_does_not_arrive_is_named_within_the_timeout() {
        let worlds = LocalGroup::worlds(3, Duration::from_millis(200));
        let started = Instant::now();
        let errors: Vec<String> = std::thread::scope(|s| {
            let handles: Vec<_> = worlds[..2]
                .iter()
                .map(|w| s.spawn(move || w.all_reduce(&mut [1.0], Reduce::Sum).unwrap_err().to_string()))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(started.elapsed() < Duration::from_secs(5));
        for e in &errors {
            assert!(e.contains("rank 2 did not answer within 0.2 s"), "{e}");
        }
        // The late rank then fails at once instead of waiting for ranks that gave up.
        let late = worlds[2].all_reduce(&mut [1.0], Reduce::Sum).unwrap_err().to_string();
        assert!(late.contains("rank 2 did not answer"), "{late}");
    }
}
