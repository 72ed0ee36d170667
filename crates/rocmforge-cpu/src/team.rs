//! A team of threads that walks a graph together, ggml-style: every thread
//! runs every op on its share of the work, and a barrier separates ops.
//!
//! The threads live as long as the backend ([`Team`], a rayon pool whose
//! every thread runs each step). Spawning them per step cost tens of
//! microseconds per thread, under 1% of a whole decode step, but a graph
//! split with a GPU backend (`--n-cpu-moe`) runs one short part per MoE
//! layer, 48 a token on Qwen3-30B-A3B, and there spawning was a fixed cost
//! per part. Rayon's pool brings the shutdown and panic propagation a
//! hand-made one would need.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Sense-reversing spin barrier. A futex-based `std::sync::Barrier` costs
/// several microseconds per wait; a decode step waits a few hundred times.
pub struct SpinBarrier {
    n: usize,
    count: AtomicUsize,
    generation: AtomicUsize,
}

impl SpinBarrier {
    pub fn new(n: usize) -> SpinBarrier {
        SpinBarrier {
            n,
            count: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
        }
    }

    pub fn wait(&self) {
        if self.n == 1 {
            return;
        }
        let gen = self.generation.load(Ordering::Acquire);
        if self.count.fetch_add(1, Ordering::AcqRel) + 1 == self.n {
            self.count.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Release);
            return;
        }
        let mut spins = 0u32;
        while self.generation.load(Ordering::Acquire) == gen {
            if spins < 2000 {
                std::hint::spin_loop();
                spins += 1;
            } else {
                // More threads than free cores (CI, a busy desktop): let the
                // laggard run instead of burning its time slice.
                std::thread::yield_now();
            }
        }
    }
}

/// The position of one thread in its team.
#[derive(Clone, Copy, Debug)]
pub struct Member {
    pub ith: usize,
    pub nth: usize,
}

impl Member {
    /// This member's contiguous share of `n` items.
    pub fn share(&self, n: usize) -> std::ops::Range<usize> {
        let per = n.div_ceil(self.nth);
        let start = (self.ith * per).min(n);
        start..(start + per).min(n)
    }
}

/// `nth` threads kept for running steps on.
pub struct Team {
    nth: usize,
    /// None for one thread (the caller's), or where the pool could not be
    /// built (then every step spawns its threads, as `run_team`).
    pool: Option<rayon::ThreadPool>,
}

impl Team {
    pub fn new(nth: usize) -> Team {
        let pool = (nth > 1)
            .then(|| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(nth)
                    .thread_name(|i| format!("rocmforge-cpu-{i}"))
                    .build()
                    .ok()
            })
            .flatten();
        Team { nth, pool }
    }

    /// Runs `f` on every member of the team at once and returns when all
    /// have finished.
    pub fn run<F>(&self, f: F)
    where
        F: Fn(Member, &SpinBarrier) + Sync,
    {
        let Some(pool) = &self.pool else {
            return run_team(self.nth, f);
        };
        let barrier = SpinBarrier::new(self.nth);
        // Every thread of the pool runs `f` once; the pool has nothing else
        // to do, so all of them are in `f` together, as the barrier needs.
        pool.broadcast(|ctx| {
            f(
                Member {
                    ith: ctx.index(),
                    nth: self.nth,
                },
                &barrier,
            )
        });
    }
}

/// Runs `f` on `nth` threads (the caller's thread is member 0).
pub fn run_team<F>(nth: usize, f: F)
where
    F: Fn(Member, &SpinBarrier) + Sync,
{
    let barrier = SpinBarrier::new(nth);
    std::thread::scope(|s| {
        for ith in 1..nth {
            let (f, barrier) = (&f, &barrier);
            s.spawn(move || f(Member { ith, nth }, barrier));
        }
        f(Member { ith: 0, nth }, &barrier);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_cover_everything_once() {
        for n in [0, 1, 7, 100] {
            for nth in 1..5 {
                let mut seen = vec![0; n];
                for ith in 0..nth {
                    for i in (Member { ith, nth }).share(n) {
                        seen[i] += 1;
                    }
                }
                assert!(seen.iter().all(|&c| c == 1), "n={n} nth={nth}");
            }
        }
    }

    #[test]
    fn barrier_orders_phases() {
        let counter = AtomicUsize::new(0);
        run_team(3, |_, barrier| {
            for phase in 0..50 {
                counter.fetch_add(1, Ordering::SeqCst);
                barrier.wait();
                assert!(counter.load(Ordering::SeqCst) >= 3 * (phase + 1));
                barrier.wait();
            }
        });
        assert_eq!(counter.load(Ordering::SeqCst), 150);
    }

    #[test]
    fn a_kept_team_runs_every_member_each_time() {
        let team = Team::new(3);
        for round in 1..=20 {
            let seen = AtomicUsize::new(0);
            team.run(|m, barrier| {
                seen.fetch_add(1 << (8 * m.ith), Ordering::SeqCst);
                barrier.wait();
                assert_eq!(seen.load(Ordering::SeqCst), 0x01_01_01, "round {round}");
            });
        }
    }
}
