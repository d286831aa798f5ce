//! Test support: a fault-injecting UDP proxy between the host bridge and the firmware emulator. It also plays an
//! attacker on the path: it records what it forwarded (to replay it later from the same address), injects
//! datagrams of its own, and can cut one direction only.
#![allow(dead_code)]

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BinaryHeap, VecDeque};
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
    /// Dropped by a one-direction cut toward the emulator.
    pub cut_to_emulator: u64,
    pub injected: u64,
}

/// Datagrams forwarded in one direction, newest last (at most [`RECORDED`]); `true` = the proxy corrupted it.
pub type Recorded = VecDeque<(Vec<u8>, bool)>;

/// How many forwarded datagrams per direction the proxy keeps for replays.
pub const RECORDED: usize = 512;

#[derive(Default)]
struct Tape {
    to_emulator: Recorded,
    to_host: Recorded,
    /// The first datagram forwarded to the emulator (the host's first Hello).
    first_to_emulator: Option<Vec<u8>>,
    /// Datagrams to send as they are (replays, forgeries): (to the emulator?, bytes).
    inject: Vec<(bool, Vec<u8>)>,
}

#[derive(PartialEq, Eq)]
struct Pending {
    at: Instant,
    n: u64,
    to_emulator: bool,
    corrupted: bool,
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
    cut_to_emulator: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    stats: Arc<Mutex<ProxyStats>>,
    tape: Arc<Mutex<Tape>>,
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
        let cut_to_emulator = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Mutex::new(ProxyStats::default()));
        let tape = Arc::new(Mutex::new(Tape::default()));
        let (b, c, s, st, tp) = (
            blackout.clone(),
            cut_to_emulator.clone(),
            stop.clone(),
            stats.clone(),
            tape.clone(),
        );
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
                    if c.load(Ordering::Relaxed) {
                        local.cut_to_emulator += 1;
                        continue;
                    }
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
                let mut t = tp.lock().unwrap_or_else(|p| p.into_inner());
                while heap.peek().is_some_and(|p: &Pending| p.at <= now) {
                    let Some(p) = heap.pop() else { break };
                    local.forwarded += 1;
                    let tape = if p.to_emulator {
                        let _ = back.send(&p.data);
                        if t.first_to_emulator.is_none() {
                            t.first_to_emulator = Some(p.data.clone());
                        }
                        &mut t.to_emulator
                    } else {
                        if let Some(h) = host {
                            let _ = front.send_to(&p.data, h);
                        }
                        &mut t.to_host
                    };
                    if tape.len() == RECORDED {
                        tape.pop_front();
                    }
                    tape.push_back((p.data, p.corrupted));
                }
                for (to_emulator, data) in std::mem::take(&mut t.inject) {
                    idle = false;
                    local.injected += 1;
                    if to_emulator {
                        let _ = back.send(&data);
                    } else if let Some(h) = host {
                        let _ = front.send_to(&data, h);
                    }
                }
                drop(t);
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
            cut_to_emulator,
            stop,
            stats,
            tape,
            thread: Some(thread),
        })
    }

    /// Cuts (true) or restores (false) only the direction toward the emulator.
    pub fn set_cut_to_emulator(&self, on: bool) {
        self.cut_to_emulator.store(on, Ordering::SeqCst);
    }

    /// The datagrams forwarded so far in one direction (the newest [`RECORDED`]).
    pub fn recorded(&self, to_emulator: bool) -> Recorded {
        let t = self.tape.lock().unwrap_or_else(|p| p.into_inner());
        if to_emulator {
            t.to_emulator.clone()
        } else {
            t.to_host.clone()
        }
    }

    /// The first datagram forwarded to the emulator (the host's first Hello).
    pub fn first_to_emulator(&self) -> Option<Vec<u8>> {
        let t = self.tape.lock().unwrap_or_else(|p| p.into_inner());
        t.first_to_emulator.clone()
    }

    /// Sends `data` as it is, from the proxy's address toward the emulator (as if the host sent it) or toward
    /// the host (as if the emulator did), without faults.
    pub fn inject(&self, to_emulator: bool, data: Vec<u8>) {
        let mut t = self.tape.lock().unwrap_or_else(|p| p.into_inner());
        t.inject.push((to_emulator, data));
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
    let corrupted = rng.random_bool(f.corrupt) && !data.is_empty();
    if corrupted {
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
            corrupted,
            data: data.clone(),
        });
    }
    *n += 1;
    heap.push(Pending {
        at,
        n: *n,
        to_emulator,
        corrupted,
        data,
    });
}
