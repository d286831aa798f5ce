//! The emulator's scene channel: what a robot's firmware link does not carry — camera frames, the state of the
//! objects in the scene (what a tracker or motion-capture system would report), and a scene reset — served over
//! TCP from the plant's simulator, so that the host's reward model sees the task's camera views.
//!
//! On a real robot these come from cameras and a perception system, not from the firmware; here one small
//! server stands in for all of them. The host side is `stagewise_bridge::scene::SceneClient`.
//!
//! The wire format and its codec are [`stagewise_protocol::scene`] (one codec for both ends); this module
//! holds the server: the shared newest scene and the TCP loop.

use std::format;
use std::prelude::rust_2021::*;

use stagewise_core::{BoxSpec, Observation, ViewSpec};
use stagewise_protocol::scene::{self as codec, Request, StateEntry, ViewEntry};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

pub use codec::{SCENE_MAGIC, SCENE_VERSION};

/// The newest rendered scene and pending resets, shared between the plant (firmware thread) and the server.
pub struct SceneShared {
    task: String,
    views: Vec<ViewSpec>,
    /// Index of the first state value the scene channel serves (the robot's own state comes over the link).
    state_from: usize,
    state: BoxSpec,
    latest: Mutex<Latest>,
    resets: Mutex<Resets>,
    reset_done: Condvar,
}

#[derive(Default)]
struct Latest {
    plant_step: u64,
    resets: u64,
    state: Vec<f32>,
    rgb: Vec<Vec<u8>>,
}

#[derive(Default)]
struct Resets {
    requested: u64,
    done: u64,
    seed: Option<u64>,
    error: Option<String>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl SceneShared {
    /// `views`: the plant's cameras; `state`: the plant env's full state space, of which values from
    /// `state_from` on are served (the robot reports the first ones itself).
    pub fn new(task: &str, views: Vec<ViewSpec>, state: &BoxSpec, state_from: usize) -> Arc<Self> {
        let from = state_from.min(state.len());
        Arc::new(Self {
            task: task.to_string(),
            views,
            state_from: from,
            state: BoxSpec {
                names: state.names[from..].to_vec(),
                low: state.low[from..].to_vec(),
                high: state.high[from..].to_vec(),
            },
            latest: Mutex::new(Latest::default()),
            resets: Mutex::new(Resets::default()),
            reset_done: Condvar::new(),
        })
    }

    pub fn views(&self) -> &[ViewSpec] {
        &self.views
    }

    pub fn state_spec(&self) -> &BoxSpec {
        &self.state
    }

    /// The plant publishes an observation (after a step or a reset). Frames of a wrong size are skipped (the
    /// frame request then answers with an error rather than a wrong picture).
    pub fn publish(&self, plant_step: u64, obs: &Observation) {
        let mut l = lock(&self.latest);
        l.plant_step = plant_step;
        l.state.clear();
        l.state.extend(
            obs.state
                .iter()
                .skip(self.state_from)
                .take(self.state.len()),
        );
        l.rgb.clear();
        for v in &obs.views {
            l.rgb.push(v.rgb.as_raw().clone());
        }
    }

    /// The plant takes a pending reset request (once).
    pub fn take_reset(&self) -> Option<u64> {
        lock(&self.resets).seed.take()
    }

    /// The plant finished a reset (with `error` if the env refused it).
    pub fn reset_applied(&self, error: Option<String>) {
        {
            let mut l = lock(&self.latest);
            l.resets += 1;
        }
        let mut r = lock(&self.resets);
        r.done = r.requested;
        r.error = error;
        self.reset_done.notify_all();
    }

    /// Asks the plant to reset its scene with `seed` and waits (up to `timeout`) until it has.
    pub fn request_reset(&self, seed: u64, timeout: Duration) -> Result<(), String> {
        let mut r = lock(&self.resets);
        r.requested += 1;
        r.seed = Some(seed);
        let want = r.requested;
        let (r, res) = match self
            .reset_done
            .wait_timeout_while(r, timeout, |r| r.done < want)
        {
            Ok(x) => x,
            Err(p) => p.into_inner(),
        };
        if res.timed_out() {
            return Err(format!(
                "the plant did not apply the scene reset within {timeout:?} (is the control loop running?)"
            ));
        }
        match &r.error {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    fn header(&self) -> Vec<u8> {
        let views: Vec<ViewEntry<'_>> = self
            .views
            .iter()
            .map(|v| ViewEntry {
                name: &v.name,
                width: v.width,
                height: v.height,
            })
            .collect();
        let state: Vec<StateEntry<'_>> = (0..self.state.len())
            .map(|i| StateEntry {
                name: &self.state.names[i],
                low: self.state.low[i],
                high: self.state.high[i],
            })
            .collect();
        let mut b = Vec::new();
        codec::encode_header(&self.task, &views, &state, &mut |x: &[u8]| {
            b.extend_from_slice(x)
        });
        b
    }

    fn frame(&self, out: &mut Vec<u8>) {
        out.clear();
        let l = lock(&self.latest);
        let sizes_ok = l.rgb.len() == self.views.len()
            && l.state.len() == self.state.len()
            && l.rgb
                .iter()
                .zip(&self.views)
                .all(|(f, v)| codec::frame_bytes(v.width, v.height) == Some(f.len()));
        let mut put = |x: &[u8]| out.extend_from_slice(x);
        if !sizes_ok {
            codec::encode_failure(
                codec::STATUS_ERROR,
                &format!(
                    "the plant published {} frames and {} state values; the scene has {} views and {} state values",
                    l.rgb.len(),
                    l.state.len(),
                    self.views.len(),
                    self.state.len()
                ),
                &mut put,
            );
            return;
        }
        codec::encode_frame_prefix(l.plant_step, l.resets, &l.state, &mut put);
        for f in &l.rgb {
            put(f);
        }
    }
}

/// The TCP server of the scene channel: one thread accepting, one thread per client.
pub struct SceneServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl SceneServer {
    pub fn spawn(bind: SocketAddr, scene: Arc<SceneShared>) -> std::io::Result<Self> {
        let listener = TcpListener::bind(bind)?;
        let addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("stagewise-scene".into())
            .spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            let scene = scene.clone();
                            let s = s.clone();
                            let _ = std::thread::Builder::new()
                                .name("stagewise-scene-client".into())
                                .spawn(move || serve(stream, &scene, &s));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            })?;
        Ok(Self {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for SceneServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(mut stream: TcpStream, scene: &SceneShared, stop: &AtomicBool) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_nonblocking(false);
    if stream.write_all(&scene.header()).is_err() {
        return;
    }
    // A read timeout lets the thread notice `stop`; a silent client is not an error.
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    let mut out = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let mut req = [0u8; 9];
        match stream.read(&mut req[..1]) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(_) => return,
        }
        out.clear();
        let mut put = |x: &[u8]| out.extend_from_slice(x);
        let Some(len) = Request::len_for(req[0]) else {
            codec::encode_failure(
                codec::STATUS_ERROR,
                &format!("unknown request 0x{:02x}", req[0]),
                &mut put,
            );
            let _ = stream.write_all(&out);
            return;
        };
        if len > 1 {
            let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
            if stream.read_exact(&mut req[1..len]).is_err() {
                return;
            }
            let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
        }
        match codec::decode_request(&req[..len]) {
            Ok((Request::Frame, _)) => scene.frame(&mut out),
            Ok((Request::Reset { seed }, _)) => {
                match scene.request_reset(seed, Duration::from_secs(5)) {
                    Ok(()) => put(&[codec::STATUS_OK]),
                    Err(e) => codec::encode_failure(codec::STATUS_RESET_FAILED, &e, &mut put),
                }
            }
            // `len_for` accepted the op, so the request is whole; answered rather than assumed.
            Err(e) => {
                codec::encode_failure(codec::STATUS_ERROR, &e.to_string(), &mut put);
                let _ = stream.write_all(&out);
                return;
            }
        }
        if stream.write_all(&out).is_err() {
            return;
        }
    }
}
