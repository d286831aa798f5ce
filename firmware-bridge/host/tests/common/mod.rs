//! Test support: a fault-injecting UDP proxy between the host bridge and the firmware emulator.
#![allow(dead_code)]

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BinaryHeap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Fault rates of one direction of the link.
#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    /// Probability a datagram is dropped.
    pub loss: f64,
    /// Probability 1..=3 random bytes of a datagram are corrupted (XOR with a non-zero byte).
    pub corrupt: f64,
    /// Probability a datagram is sent twice (the copy 0..5 ms later).
    pub duplicate: f64,
    /// Probability a datagram gets 0..4 ms extra delay (reorders it behind later ones).
    pub reorder: f64,
    /// Probability a delay spike starts: everything is held for 5..30 ms.
    pub spike: f64,
}

impl Faults {
    /// Random rates for a trial: loss up to 20%, the rest up to a few percent.
    pub fn random(rng: &mut ChaCha8Rng) -> Self {
        Self {
            loss: rng.random_range(0.0..=0.2),
            corrupt: rng.random_range(0.0..=0.05),
            duplicate: rng.random_range(0.0..=0.05),
            reorder: rng.random_range(0.0..=0.05),
            spike: rng.random_range(0.0..=0.002),
        }
    }
}

/// What the proxy did.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProxyStats {
    pub forwarded: u64,
    pub dropped: u64,
    pub corrupted: u64,
    pub duplicated: u64,
    pub reordered: u64,
    pub spikes: u64,
    pub blackout_dropped: u64,
}

#[derive(PartialEq, Eq)]
struct Pending {
    at: Instant,
    n: u64,
    to_emulator: bool,
    data: Vec<u8>,
}

impl Ord for Pending {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // Earliest first in a max-heap.
        o.at.cmp(&self.at).then(o.n.cmp(&self.n))
    }
}
impl PartialOrd for Pending {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

/// host <-> [front] proxy [back] <-> emulator.
pub struct Proxy {
    front: SocketAddr,
    blackout: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    stats: Arc<Mutex<ProxyStats>>,
    thread: Option<JoinHandle<()>>,
}

impl Proxy {
    pub fn spawn(
        emulator: SocketAddr,
        seed: u64,
        to_emu: Faults,
        to_host: Faults,
    ) -> std::io::Result<Self> {
        let front = UdpSocket::bind("127.0.0.1:0")?;
        let back = UdpSocket::bind("127.0.0.1:0")?;
        back.connect(emulator)?;
        front.set_nonblocking(true)?;
        back.set_nonblocking(true)?;
        let addr = front.local_addr()?;
        let blackout = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Mutex::new(ProxyStats::default()));
        let (b, s, st) = (blackout.clone(), stop.clone(), stats.clone());
        let thread = std::thread::spawn(move || {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut host: Option<SocketAddr> = None;
            let mut heap = BinaryHeap::new();
            let mut n = 0u64;
            let mut hold_until = Instant::now();
            let mut buf = [0u8; 2048];
            let mut local = ProxyStats::default();
            while !s.load(Ordering::Relaxed) {
                let mut idle = true;
                // host -> emulator
                while let Ok((len, from)) = front.recv_from(&mut buf) {
                    idle = false;
                    host = Some(from);
                    inject(
                        &mut rng,
                        &to_emu,
                        &buf[..len],
                        true,
                        &b,
                        &mut heap,
                        &mut n,
                        &mut hold_until,
                        &mut local,
                    );
                }
                // emulator -> host
                while let Ok(len) = back.recv(&mut buf) {
                    idle = false;
                    inject(
                        &mut rng,
                        &to_host,
                        &buf[..len],
                        false,
                        &b,
                        &mut heap,
                        &mut n,
                        &mut hold_until,
                        &mut local,
                    );
                }
                let now = Instant::now();
                while heap.peek().is_some_and(|p: &Pending| p.at <= now) {
                    let Some(p) = heap.pop() else { break };
                    local.forwarded += 1;
                    if p.to_emulator {
                        let _ = back.send(&p.data);
                    } else if let Some(h) = host {
                        let _ = front.send_to(&p.data, h);
                    }
                }
                if let Ok(mut g) = st.lock() {
                    *g = local;
                }
                if idle {
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
        });
        Ok(Self {
            front: addr,
            blackout,
            stop,
            stats,
            thread: Some(thread),
        })
    }

    /// Where the host should connect.
    pub fn addr(&self) -> SocketAddr {
        self.front
    }

    /// Cuts (true) or restores (false) the link in both directions.
    pub fn set_blackout(&self, on: bool) {
        self.blackout.store(on, Ordering::SeqCst);
    }

    pub fn stats(&self) -> ProxyStats {
        self.stats.lock().map(|g| *g).unwrap_or_default()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn inject(
    rng: &mut ChaCha8Rng,
    f: &Faults,
    data: &[u8],
    to_emulator: bool,
    blackout: &AtomicBool,
    heap: &mut BinaryHeap<Pending>,
    n: &mut u64,
    hold_until: &mut Instant,
    st: &mut ProxyStats,
) {
    if blackout.load(Ordering::Relaxed) {
        st.blackout_dropped += 1;
        return;
    }
    if rng.random_bool(f.loss) {
        st.dropped += 1;
        return;
    }
    let now = Instant::now();
    if rng.random_bool(f.spike) {
        st.spikes += 1;
        *hold_until = now + Duration::from_micros(rng.random_range(5_000..30_000));
    }
    let mut at = now.max(*hold_until);
    let mut data = data.to_vec();
    if rng.random_bool(f.corrupt) && !data.is_empty() {
        st.corrupted += 1;
        for _ in 0..rng.random_range(1..=3) {
            let i = rng.random_range(0..data.len());
            data[i] ^= rng.random_range(1..=255u8);
        }
    }
    if rng.random_bool(f.reorder) {
        st.reordered += 1;
        at += Duration::from_micros(rng.random_range(0..4_000));
    }
    if rng.random_bool(f.duplicate) {
        st.duplicated += 1;
        *n += 1;
        heap.push(Pending {
            at: at + Duration::from_micros(rng.random_range(0..5_000)),
            n: *n,
            to_emulator,
            data: data.clone(),
        });
    }
    *n += 1;
    heap.push(Pending {
        at,
        n: *n,
        to_emulator,
        data,
    });
}
