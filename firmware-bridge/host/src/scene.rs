//! The host side of a scene channel: camera frames, the state of the objects in the scene and scene resets from
//! a TCP server (the firmware emulator serves one from its simulator plant; the wire format is documented in
//! `stagewise_firmware::scene` and in firmware-bridge/README.md). One request fetches every view and the state
//! from the same instant, so the views of one observation are always of one plant state.
//!
//! [`SceneClient::cameras`] gives one [`CameraSource`] per view, [`SceneClient::state_source`] a
//! [`StateSource`] and [`SceneClient::resetter`] a [`SceneReset`]: all three share the connection.

use crate::camera::{CameraError, CameraSource};
use crate::robot_env::{SceneReset, StateSource};
use stagewise_core::{BoxSpec, View, ViewSpec};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a scene server's header announces: task, camera views, state layout.
type SceneHeader = (String, Vec<ViewSpec>, BoxSpec);

const MAGIC: &[u8; 4] = b"SWSC";
const VERSION: u16 = 1;

struct Conn {
    stream: TcpStream,
    /// Frames and state of the last fetch not yet taken, one slot per view (+ the state).
    frames: Vec<Option<View>>,
    state: Option<Vec<f32>>,
    plant_step: u64,
    fetches: u64,
}

struct Shared {
    addr: String,
    task: String,
    views: Vec<ViewSpec>,
    state: BoxSpec,
    conn: Mutex<Conn>,
}

/// A connection to a scene server.
#[derive(Clone)]
pub struct SceneClient {
    shared: Arc<Shared>,
}

fn err(addr: &str, message: impl std::fmt::Display) -> CameraError {
    CameraError::Scene {
        addr: addr.to_string(),
        message: message.to_string(),
    }
}

fn read_u16(r: &mut impl Read) -> std::io::Result<u16> {
    let mut b = [0u8; 2];
    r.read_exact(&mut b)?;
    Ok(u16::from_le_bytes(b))
}

fn read_u32(r: &mut impl Read) -> std::io::Result<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_le_bytes(b))
}

fn read_u64(r: &mut impl Read) -> std::io::Result<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

fn read_f32(r: &mut impl Read) -> std::io::Result<f32> {
    Ok(f32::from_bits(read_u32(r)?))
}

fn read_str(r: &mut impl Read) -> std::io::Result<String> {
    let n = read_u16(r)? as usize;
    let mut b = vec![0u8; n];
    r.read_exact(&mut b)?;
    String::from_utf8(b)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "string is not UTF-8"))
}

/// Largest frame the client accepts (a 4K RGB frame); protects against a corrupt header.
const MAX_PIXELS: u64 = 3840 * 2160;

impl SceneClient {
    /// Connects to `addr` (`HOST:PORT`) and reads the server's description. Every later request waits at most
    /// `timeout` for its answer.
    pub fn connect(addr: &str, timeout: Duration) -> Result<Self, CameraError> {
        let sock: SocketAddr = addr
            .to_socket_addrs()
            .map_err(|e| err(addr, format!("not a HOST:PORT address: {e}")))?
            .next()
            .ok_or_else(|| err(addr, "the address resolves to nothing"))?;
        let mut stream = TcpStream::connect_timeout(&sock, timeout).map_err(|e| {
            err(
                addr,
                format!(
                    "cannot connect within {timeout:?}: {e} (is the emulator running with its scene channel, or a camera server?)"
                ),
            )
        })?;
        stream
            .set_read_timeout(Some(timeout))
            .and_then(|_| stream.set_write_timeout(Some(timeout)))
            .and_then(|_| stream.set_nodelay(true))
            .map_err(|e| err(addr, e))?;
        let mut magic = [0u8; 4];
        stream
            .read_exact(&mut magic)
            .map_err(|e| err(addr, format!("no scene header within {timeout:?}: {e}")))?;
        if &magic != MAGIC {
            return Err(err(
                addr,
                format!("not a scene server (header {magic:02x?}, expected \"SWSC\")"),
            ));
        }
        let header = (|| -> std::io::Result<Result<SceneHeader, String>> {
            let version = read_u16(&mut stream)?;
            if version != VERSION {
                return Ok(Err(format!(
                    "scene protocol version {version}, this host speaks {VERSION}"
                )));
            }
            let task = read_str(&mut stream)?;
            let n = read_u16(&mut stream)?;
            let mut views = Vec::with_capacity(n as usize);
            for _ in 0..n {
                let name = read_str(&mut stream)?;
                let width = read_u32(&mut stream)?;
                let height = read_u32(&mut stream)?;
                if u64::from(width) * u64::from(height) > MAX_PIXELS || width == 0 || height == 0 {
                    return Ok(Err(format!("view {name} is {width}x{height}")));
                }
                views.push(ViewSpec {
                    name,
                    width,
                    height,
                });
            }
            let n = read_u16(&mut stream)?;
            let mut state = BoxSpec {
                names: Vec::new(),
                low: Vec::new(),
                high: Vec::new(),
            };
            for _ in 0..n {
                state.names.push(read_str(&mut stream)?);
                state.low.push(read_f32(&mut stream)?);
                state.high.push(read_f32(&mut stream)?);
            }
            Ok(Ok((task, views, state)))
        })()
        .map_err(|e| err(addr, format!("reading the scene header: {e}")))?;
        let (task, views, state) = header.map_err(|m| err(addr, m))?;
        let n = views.len();
        Ok(Self {
            shared: Arc::new(Shared {
                addr: addr.to_string(),
                task,
                views,
                state,
                conn: Mutex::new(Conn {
                    stream,
                    frames: (0..n).map(|_| None).collect(),
                    state: None,
                    plant_step: 0,
                    fetches: 0,
                }),
            }),
        })
    }

    /// The task the server's scene shows (e.g. `pick-place`).
    pub fn task(&self) -> &str {
        &self.shared.task
    }

    pub fn views(&self) -> &[ViewSpec] {
        &self.shared.views
    }

    /// The extra state the server reports (after the robot's own state).
    pub fn state_spec(&self) -> &BoxSpec {
        &self.shared.state
    }

    pub fn addr(&self) -> &str {
        &self.shared.addr
    }

    /// Plant step of the newest fetch and the number of fetches so far.
    pub fn plant_step(&self) -> (u64, u64) {
        match self.shared.conn.lock() {
            Ok(c) => (c.plant_step, c.fetches),
            Err(p) => (p.get_ref().plant_step, p.get_ref().fetches),
        }
    }

    /// One camera source per view, in the server's order.
    pub fn cameras(&self) -> Vec<Box<dyn CameraSource>> {
        (0..self.shared.views.len())
            .map(|i| {
                Box::new(SceneCamera {
                    client: self.clone(),
                    index: i,
                }) as Box<dyn CameraSource>
            })
            .collect()
    }

    /// Only the named views, in the given order (e.g. the views a reward model takes).
    pub fn cameras_named(
        &self,
        names: &[String],
    ) -> Result<Vec<Box<dyn CameraSource>>, CameraError> {
        names
            .iter()
            .map(|n| {
                let index = self
                    .shared
                    .views
                    .iter()
                    .position(|v| &v.name == n)
                    .ok_or_else(|| {
                        err(
                            &self.shared.addr,
                            format!(
                                "has no view {n:?} (it serves {})",
                                self.shared
                                    .views
                                    .iter()
                                    .map(|v| v.name.as_str())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        )
                    })?;
                Ok(Box::new(SceneCamera {
                    client: self.clone(),
                    index,
                }) as Box<dyn CameraSource>)
            })
            .collect()
    }

    pub fn state_source(&self) -> Box<dyn StateSource> {
        Box::new(SceneState {
            client: self.clone(),
        })
    }

    pub fn resetter(&self) -> Box<dyn SceneReset> {
        Box::new(SceneResetter {
            client: self.clone(),
        })
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Conn>, CameraError> {
        self.shared
            .conn
            .lock()
            .map_err(|_| err(&self.shared.addr, "connection lock poisoned"))
    }

    /// Fetches every view and the state (one plant instant) into the slots.
    fn fetch(&self, c: &mut Conn) -> Result<(), CameraError> {
        let s = &self.shared;
        let io = |e: std::io::Error| err(&s.addr, format!("frame request failed: {e}"));
        c.stream.write_all(b"F").map_err(io)?;
        let mut status = [0u8; 1];
        c.stream.read_exact(&mut status).map_err(io)?;
        if status[0] != 0 {
            let m = read_str(&mut c.stream).map_err(io)?;
            return Err(err(&s.addr, format!("refused the frame request: {m}")));
        }
        c.plant_step = read_u64(&mut c.stream).map_err(io)?;
        let _resets = read_u64(&mut c.stream).map_err(io)?;
        let mut state = Vec::with_capacity(s.state.len());
        for _ in 0..s.state.len() {
            state.push(read_f32(&mut c.stream).map_err(io)?);
        }
        for (i, v) in s.views.iter().enumerate() {
            let mut rgb = vec![0u8; (v.width * v.height * 3) as usize];
            c.stream.read_exact(&mut rgb).map_err(io)?;
            let img = image::RgbImage::from_raw(v.width, v.height, rgb)
                .ok_or_else(|| err(&s.addr, format!("view {} has a wrong frame size", v.name)))?;
            c.frames[i] = Some(View::new(v.name.clone(), img));
        }
        c.state = Some(state);
        c.fetches += 1;
        Ok(())
    }

    fn take_frame(&self, index: usize) -> Result<View, CameraError> {
        let mut c = self.lock()?;
        if c.frames[index].is_none() {
            self.fetch(&mut c)?;
        }
        c.frames[index]
            .take()
            .ok_or_else(|| err(&self.shared.addr, "no frame after a fetch"))
    }

    fn take_state(&self) -> Result<Vec<f32>, CameraError> {
        let mut c = self.lock()?;
        if c.state.is_none() {
            self.fetch(&mut c)?;
        }
        c.state
            .take()
            .ok_or_else(|| err(&self.shared.addr, "no state after a fetch"))
    }

    /// Asks the server to reset its scene with `seed` (answered once it is applied). Frames fetched before the
    /// reset are dropped.
    pub fn reset(&self, seed: u64) -> Result<(), CameraError> {
        let mut c = self.lock()?;
        let s = &self.shared;
        let io = |e: std::io::Error| err(&s.addr, format!("scene reset failed: {e}"));
        let mut req = [0u8; 9];
        req[0] = b'R';
        req[1..].copy_from_slice(&seed.to_le_bytes());
        c.stream.write_all(&req).map_err(io)?;
        let mut status = [0u8; 1];
        c.stream.read_exact(&mut status).map_err(io)?;
        if status[0] != 0 {
            let m = read_str(&mut c.stream).map_err(io)?;
            return Err(err(&s.addr, format!("refused the scene reset: {m}")));
        }
        for f in &mut c.frames {
            *f = None;
        }
        c.state = None;
        Ok(())
    }
}

struct SceneCamera {
    client: SceneClient,
    index: usize,
}

impl CameraSource for SceneCamera {
    fn spec(&self) -> &ViewSpec {
        &self.client.shared.views[self.index]
    }

    fn capture(&mut self, _step: u64) -> Result<View, CameraError> {
        self.client.take_frame(self.index)
    }
}

struct SceneState {
    client: SceneClient,
}

impl StateSource for SceneState {
    fn spec(&self) -> &BoxSpec {
        &self.client.shared.state
    }

    fn read(&mut self, _step: u64) -> Result<Vec<f32>, CameraError> {
        self.client.take_state()
    }
}

struct SceneResetter {
    client: SceneClient,
}

impl SceneReset for SceneResetter {
    fn reset_scene(&mut self, seed: u64) -> Result<(), CameraError> {
        self.client.reset(seed)
    }
}
