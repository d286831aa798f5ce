//! The actor's two clocks: as fast as possible (simulation) and a fixed control rate (a robot), where a step
//! that overruns its period is a deadline miss, counted and reported.

use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Clock {
    /// Step as fast as possible.
    Free,
    /// Step at `hz`; a step that overruns its period counts as a deadline miss and the schedule restarts from now
    /// (no burst of catch-up steps).
    Fixed { hz: f64 },
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ClockStats {
    pub ticks: u64,
    pub deadline_misses: u64,
    /// Longest step, start of one tick to the start of the next wait.
    pub worst_step: Duration,
}

/// Paces a loop: call [`Ticker::tick`] at the top of every step.
#[derive(Debug)]
pub struct Ticker {
    clock: Clock,
    next: Option<Instant>,
    last_start: Option<Instant>,
    stats: ClockStats,
}

impl Ticker {
    pub fn new(clock: Clock) -> Self {
        Self {
            clock,
            next: None,
            last_start: None,
            stats: ClockStats::default(),
        }
    }

    /// Waits for the next period (fixed clock) and records how long the previous step took.
    pub fn tick(&mut self) {
        let now = Instant::now();
        if let Some(start) = self.last_start {
            self.stats.worst_step = self.stats.worst_step.max(now - start);
        }
        if let Clock::Fixed { hz } = self.clock {
            let period = Duration::from_secs_f64(1.0 / hz);
            match self.next {
                Some(next) if now > next => {
                    self.stats.deadline_misses += 1;
                    self.next = Some(now + period);
                }
                Some(next) => {
                    std::thread::sleep(next - now);
                    self.next = Some(next + period);
                }
                None => self.next = Some(now + period),
            }
        }
        self.stats.ticks += 1;
        self.last_start = Some(Instant::now());
    }

    pub fn stats(&self) -> ClockStats {
        self.stats
    }
}

impl Clock {
    /// `hz <= 0` means as fast as possible.
    pub fn from_hz(hz: f64) -> Self {
        if hz > 0.0 && hz.is_finite() {
            Clock::Fixed { hz }
        } else {
            Clock::Free
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_clock_paces_and_counts_misses() {
        let mut t = Ticker::new(Clock::Fixed { hz: 200.0 });
        let start = Instant::now();
        for _ in 0..11 {
            t.tick();
        }
        // 10 periods of 5 ms at least
        assert!(
            start.elapsed() >= Duration::from_millis(49),
            "{:?}",
            start.elapsed()
        );
        // A loaded machine may deschedule this thread past a 5 ms deadline in the loop above: count from there.
        let misses = t.stats().deadline_misses;
        std::thread::sleep(Duration::from_millis(20));
        t.tick();
        assert_eq!(t.stats().deadline_misses, misses + 1);
        assert!(t.stats().worst_step >= Duration::from_millis(20));
    }

    #[test]
    fn free_clock_never_waits() {
        let mut t = Ticker::new(Clock::from_hz(0.0));
        let start = Instant::now();
        for _ in 0..1000 {
            t.tick();
        }
        assert!(start.elapsed() < Duration::from_millis(500));
        assert_eq!(t.stats().ticks, 1000);
    }
}
