//! The host side of a scene channel: camera frames, the state of the objects in the scene and scene resets from
//! a TCP server (the firmware emulator serves one from its simulator plant; the wire format and its codec are
//! [`stagewise_protocol::scene`], shared with the server, and in firmware-bridge/README.md). One request fetches every view and the state
//! from the same instant, so the views of one observation are always of one plant state.
//!
//! [`SceneClient::cameras`] gives one [`CameraSource`] per view, [`SceneClient::state_source`] a
//! [`StateSource`] and [`SceneClient::resetter`] a [`SceneReset`]: all three share the connection.

use crate::camera::{CameraError, CameraSource};
use crate::robot_env::{SceneReset, StateSource};
use stagewise_core::{BoxSpec, View, ViewSpec};
use stagewise_protocol::scene::{self as codec, Request, SceneError};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Largest scene header the client reads (names of views and state values): protects against a corrupt or
/// hostile server.
const MAX_HEADER_BYTES: usize = 256 << 10;

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

fn read_exact(r: &mut impl Read, n: usize) -> std::io::Result<Vec<u8>> {
    let mut b = vec![0u8; n];
    r.read_exact(&mut b)?;
    Ok(b)
}

/// Reads a failure reply's string (after its status byte).
fn read_message(r: &mut impl Read) -> std::io::Result<String> {
    let len = read_exact(r, 2)?;
    let n = usize::from(u16::from_le_bytes([len[0], len[1]]));
    let mut framed = len;
    framed.extend(read_exact(r, n)?);
    Ok(codec::Reader::new(&framed)
        .str()
        .map(str::to_string)
        .unwrap_or_else(|_| "(a message that is not UTF-8)".into()))
}

/// Reads a whole header from `stream`: as many bytes as the decoder asks for, at most [`MAX_HEADER_BYTES`].
fn read_header(
    stream: &mut impl Read,
    addr: &str,
) -> Result<(String, Vec<ViewSpec>, BoxSpec), CameraError> {
    let mut buf = Vec::new();
    let mut need = 4;
    loop {
        if buf.len() + need > MAX_HEADER_BYTES {
            return Err(err(
                addr,
                format!("scene header larger than {MAX_HEADER_BYTES} bytes"),
            ));
        }
        let start = buf.len();
        buf.resize(start + need, 0);
        stream
            .read_exact(&mut buf[start..])
            .map_err(|source| CameraError::SceneHeaderRead {
                addr: addr.to_string(),
                source,
            })?;
        let mut views = Vec::new();
        let mut state = BoxSpec {
            names: Vec::new(),
            low: Vec::new(),
            high: Vec::new(),
        };
        let r = codec::decode_header(
            &buf,
            |v| {
                views.push(ViewSpec {
                    name: v.name.to_string(),
                    width: v.width,
                    height: v.height,
                })
            },
            |s| {
                state.names.push(s.name.to_string());
                state.low.push(s.low);
                state.high.push(s.high);
            },
        );
        match r {
            Ok((task, _)) => return Ok((task.to_string(), views, state)),
            Err(SceneError::Incomplete { need: more }) => need = more,
            Err(source) => {
                return Err(CameraError::SceneHeader {
                    addr: addr.to_string(),
                    source,
                });
            }
        }
    }
}

impl SceneClient {
    /// Connects to `addr` (`HOST:PORT`) and reads the server's description. Every later request waits at most
    /// `timeout` for its answer.
    pub fn connect(addr: &str, timeout: Duration) -> Result<Self, CameraError> {
        let sock: SocketAddr = addr
            .to_socket_addrs()
            .map_err(|source| CameraError::SceneAddress {
                addr: addr.to_string(),
                source,
            })?
            .next()
            .ok_or_else(|| err(addr, "the address resolves to nothing"))?;
        let mut stream = TcpStream::connect_timeout(&sock, timeout).map_err(|source| {
            CameraError::SceneConnect {
                addr: addr.to_string(),
                timeout,
                source,
            }
        })?;
        stream
            .set_read_timeout(Some(timeout))
            .and_then(|_| stream.set_write_timeout(Some(timeout)))
            .and_then(|_| stream.set_nodelay(true))
            .map_err(|e| err(addr, e))?;
        let (task, views, state) = read_header(&mut stream, addr)?;
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
        let mut req = Vec::with_capacity(1);
        codec::encode_request(Request::Frame, &mut |b: &[u8]| req.extend_from_slice(b));
        c.stream.write_all(&req).map_err(io)?;
        let status = read_exact(&mut c.stream, 1).map_err(io)?[0];
        let ok = codec::reply_status(Request::Frame, status).map_err(|e| err(&s.addr, e))?;
        if !ok {
            let m = read_message(&mut c.stream).map_err(io)?;
            return Err(err(&s.addr, format!("refused the frame request: {m}")));
        }
        let prefix =
            read_exact(&mut c.stream, codec::frame_prefix_len(s.state.len())).map_err(io)?;
        let mut state = vec![0.0f32; s.state.len()];
        let (plant_step, _resets) =
            codec::decode_frame_prefix(&prefix, &mut state).map_err(|e| err(&s.addr, e))?;
        c.plant_step = plant_step;
        for (i, v) in s.views.iter().enumerate() {
            let n = codec::frame_bytes(v.width, v.height)
                .ok_or_else(|| err(&s.addr, format!("view {} has no valid size", v.name)))?;
            let rgb = read_exact(&mut c.stream, n).map_err(io)?;
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
        let mut req = Vec::with_capacity(9);
        codec::encode_request(Request::Reset { seed }, &mut |b: &[u8]| {
            req.extend_from_slice(b)
        });
        c.stream.write_all(&req).map_err(io)?;
        let status = read_exact(&mut c.stream, 1).map_err(io)?[0];
        let ok =
            codec::reply_status(Request::Reset { seed }, status).map_err(|e| err(&s.addr, e))?;
        if !ok {
            let m = read_message(&mut c.stream).map_err(io)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error;
    use std::net::TcpListener;

    /// A server that sends `bytes` to its first client and hangs up; connects a SceneClient to it.
    fn connect_to_one_that_sends(bytes: &'static [u8]) -> CameraError {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().expect("accept");
            s.write_all(bytes).expect("write");
        });
        let err = match SceneClient::connect(&addr, Duration::from_secs(5)) {
            Ok(_) => panic!("a bad header was accepted"),
            Err(e) => e,
        };
        server.join().expect("server");
        err
    }

    #[test]
    fn a_bad_header_keeps_the_codec_error_as_its_source() {
        let err = connect_to_one_that_sends(b"HTTP/1.1 200 OK\r\n");
        assert!(matches!(err, CameraError::SceneHeader { .. }), "{err:?}");
        let source = err.source().expect("a source");
        assert!(
            source.to_string().contains("not a scene server"),
            "{source}"
        );
    }

    #[test]
    fn a_server_that_hangs_up_mid_header_is_an_io_source() {
        let err = connect_to_one_that_sends(b"SW");
        assert!(
            matches!(err, CameraError::SceneHeaderRead { .. }),
            "{err:?}"
        );
        let io = err
            .source()
            .and_then(|s| s.downcast_ref::<std::io::Error>());
        assert_eq!(
            io.map(std::io::Error::kind),
            Some(std::io::ErrorKind::UnexpectedEof)
        );
    }
}
