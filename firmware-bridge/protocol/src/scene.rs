//! The scene channel's codec (once, for both ends): what a robot's firmware link does not carry — camera frames,
//! the state of the objects in the scene, and a scene reset. The emulator serves it from its simulator plant
//! (`stagewise_firmware::scene`), the host reads it (`stagewise_bridge::SceneClient`); on a real robot a camera or
//! tracker box speaking the same format stands in.
//!
//! Wire format (TCP, little-endian; strings are `u16` length + UTF-8):
//!
//! ```text
//! server, on connect:  b"SWSC" u16 version(=1) str task
//!                      u16 n_views  { str name, u32 width, u32 height } * n_views
//!                      u16 n_state  { str name, f32 low, f32 high } * n_state      (extra state, after the robot's own)
//! client -> server:    b'F'                   frame request
//!                      b'R' u64 seed          scene reset (answered once the plant has applied it)
//! server -> client:    b'F': u8 0, u64 plant_step, u64 resets, f32 * n_state, { u8 rgb[w*h*3] } * n_views
//!                      b'R': u8 0 | u8 1 str error
//!                      anything else: u8 2 str error, then the server closes the connection
//! ```
//!
//! No allocation: decoders read borrowed slices (and return [`SceneError::Incomplete`] when more bytes are
//! needed), encoders write through a `FnMut(&[u8])` sink. Nothing here reads from a socket.

/// The first four bytes a scene server sends.
pub const SCENE_MAGIC: [u8; 4] = *b"SWSC";
/// The scene-channel version this crate speaks.
pub const SCENE_VERSION: u16 = 1;
/// A frame request.
pub const REQUEST_FRAME: u8 = b'F';
/// A scene reset request (followed by a `u64` seed).
pub const REQUEST_RESET: u8 = b'R';
/// Reply status: done (a frame follows, or the reset was applied).
pub const STATUS_OK: u8 = 0;
/// Reply status: the plant refused the reset; a string follows.
pub const STATUS_RESET_FAILED: u8 = 1;
/// Reply status: the request failed; a string follows (after an unknown request the server closes).
pub const STATUS_ERROR: u8 = 2;
/// Largest view a client accepts (a 4K frame): protects against a corrupt header.
pub const MAX_VIEW_PIXELS: u64 = 3840 * 2160;

/// What was wrong with scene-channel bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SceneError {
    /// The bytes end early: at least `need` more are required.
    Incomplete { need: usize },
    /// Not a scene server: the first four bytes.
    BadMagic([u8; 4]),
    /// Another scene-channel version.
    Version(u16),
    /// A string at byte offset `at` is not UTF-8.
    NotUtf8 { at: usize },
    /// View `index` announces `width x height`: zero, or more than [`MAX_VIEW_PIXELS`].
    ViewSize {
        index: usize,
        width: u32,
        height: u32,
    },
    /// A reply status byte that is not one of `STATUS_*` for this request.
    Status(u8),
    /// A request byte other than [`REQUEST_FRAME`] / [`REQUEST_RESET`].
    UnknownRequest(u8),
    /// The caller's buffer for the state values has `have` slots, the reply carries `need`.
    StateBuffer { need: usize, have: usize },
}

impl core::fmt::Display for SceneError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SceneError::Incomplete { need } => write!(f, "ends early ({need} more bytes needed)"),
            SceneError::BadMagic(m) => write!(
                f,
                "not a scene server (header {m:02x?}, expected \"SWSC\")"
            ),
            SceneError::Version(v) => write!(
                f,
                "scene protocol version {v}, this side speaks {SCENE_VERSION}"
            ),
            SceneError::NotUtf8 { at } => write!(f, "the string at byte {at} is not UTF-8"),
            SceneError::ViewSize {
                index,
                width,
                height,
            } => write!(
                f,
                "view {index} is {width}x{height} (must be non-empty and at most {MAX_VIEW_PIXELS} pixels)"
            ),
            SceneError::Status(s) => write!(f, "unknown reply status {s}"),
            SceneError::UnknownRequest(r) => write!(f, "unknown request 0x{r:02x}"),
            SceneError::StateBuffer { need, have } => write!(
                f,
                "the reply carries {need} state values, the buffer has room for {have}"
            ),
        }
    }
}

impl core::error::Error for SceneError {}

/// A little-endian reader over a borrowed slice.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, pos: 0 }
    }

    /// Bytes read so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8], SceneError> {
        let left = self.bytes.len() - self.pos;
        if left < n {
            return Err(SceneError::Incomplete { need: n - left });
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], SceneError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    pub fn u8(&mut self) -> Result<u8, SceneError> {
        Ok(self.array::<1>()?[0])
    }

    pub fn u16(&mut self) -> Result<u16, SceneError> {
        self.array().map(u16::from_le_bytes)
    }

    pub fn u32(&mut self) -> Result<u32, SceneError> {
        self.array().map(u32::from_le_bytes)
    }

    pub fn u64(&mut self) -> Result<u64, SceneError> {
        self.array().map(u64::from_le_bytes)
    }

    pub fn f32(&mut self) -> Result<f32, SceneError> {
        self.array().map(f32::from_le_bytes)
    }

    /// A `u16`-length UTF-8 string.
    pub fn str(&mut self) -> Result<&'a str, SceneError> {
        let at = self.pos;
        let n = usize::from(self.u16()?);
        let b = self.take(n)?;
        core::str::from_utf8(b).map_err(|_| SceneError::NotUtf8 { at })
    }
}

/// One camera view of a header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ViewEntry<'a> {
    pub name: &'a str,
    pub width: u32,
    pub height: u32,
}

impl ViewEntry<'_> {
    /// Bytes of one RGB frame of this view.
    pub fn frame_bytes(&self) -> usize {
        frame_bytes(self.width, self.height).unwrap_or(0)
    }
}

/// One state value of a header.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StateEntry<'a> {
    pub name: &'a str,
    pub low: f32,
    pub high: f32,
}

/// Bytes of an RGB frame, `None` when the view is empty or larger than [`MAX_VIEW_PIXELS`].
pub fn frame_bytes(width: u32, height: u32) -> Option<usize> {
    let px = u64::from(width) * u64::from(height);
    if px == 0 || px > MAX_VIEW_PIXELS {
        return None;
    }
    usize::try_from(px * 3).ok()
}

/// Decodes a server header from the start of `bytes`: calls `on_view` and `on_state` for each entry, in order,
/// and returns the task name and the bytes used. On [`SceneError::Incomplete`] some entries may already have been
/// reported: the caller drops them and decodes again once more bytes arrived.
pub fn decode_header<'a>(
    bytes: &'a [u8],
    mut on_view: impl FnMut(ViewEntry<'a>),
    mut on_state: impl FnMut(StateEntry<'a>),
) -> Result<(&'a str, usize), SceneError> {
    let mut r = Reader::new(bytes);
    let magic = r.array::<4>()?;
    if magic != SCENE_MAGIC {
        return Err(SceneError::BadMagic(magic));
    }
    let version = r.u16()?;
    if version != SCENE_VERSION {
        return Err(SceneError::Version(version));
    }
    let task = r.str()?;
    let n = r.u16()?;
    for index in 0..usize::from(n) {
        let name = r.str()?;
        let width = r.u32()?;
        let height = r.u32()?;
        if frame_bytes(width, height).is_none() {
            return Err(SceneError::ViewSize {
                index,
                width,
                height,
            });
        }
        on_view(ViewEntry {
            name,
            width,
            height,
        });
    }
    let n = r.u16()?;
    for _ in 0..n {
        let name = r.str()?;
        let low = r.f32()?;
        let high = r.f32()?;
        on_state(StateEntry { name, low, high });
    }
    Ok((task, r.position()))
}

/// A client request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// Every view and the state of one plant step.
    Frame,
    /// Reset the scene with this seed.
    Reset { seed: u64 },
}

impl Request {
    /// Bytes of the request that starts with `op` (the op included); `None` for an unknown op.
    pub fn len_for(op: u8) -> Option<usize> {
        match op {
            REQUEST_FRAME => Some(1),
            REQUEST_RESET => Some(9),
            _ => None,
        }
    }
}

/// Decodes one request from the start of `bytes`; returns it and the bytes used.
pub fn decode_request(bytes: &[u8]) -> Result<(Request, usize), SceneError> {
    let mut r = Reader::new(bytes);
    let req = match r.u8()? {
        REQUEST_FRAME => Request::Frame,
        REQUEST_RESET => Request::Reset { seed: r.u64()? },
        other => return Err(SceneError::UnknownRequest(other)),
    };
    Ok((req, r.position()))
}

/// Writes `req`.
pub fn encode_request(req: Request, put: &mut impl FnMut(&[u8])) {
    match req {
        Request::Frame => put(&[REQUEST_FRAME]),
        Request::Reset { seed } => {
            put(&[REQUEST_RESET]);
            put(&seed.to_le_bytes());
        }
    }
}

/// The first byte of a reply to `req`: `Ok(true)` = success (a frame's data follows, or the reset was applied),
/// `Ok(false)` = failure (a string follows).
pub fn reply_status(req: Request, status: u8) -> Result<bool, SceneError> {
    match (req, status) {
        (_, STATUS_OK) => Ok(true),
        (Request::Reset { .. }, STATUS_RESET_FAILED) | (_, STATUS_ERROR) => Ok(false),
        (_, s) => Err(SceneError::Status(s)),
    }
}

/// Bytes after the status byte of a successful frame reply, before the pixels: plant step, resets, the state.
pub fn frame_prefix_len(n_state: usize) -> usize {
    16 + 4 * n_state
}

/// Decodes the part of a successful frame reply after its status byte and before its pixels into
/// `(plant_step, resets)` and `state` (`state.len()` values, the header's `n_state`).
pub fn decode_frame_prefix(bytes: &[u8], state: &mut [f32]) -> Result<(u64, u64), SceneError> {
    let mut r = Reader::new(bytes);
    let plant_step = r.u64()?;
    let resets = r.u64()?;
    for x in state.iter_mut() {
        *x = r.f32()?;
    }
    Ok((plant_step, resets))
}

/// A whole reply to a frame request, decoded from a slice (the server's tests and the property tests read
/// replies this way; the client reads the same parts from its socket with the functions above).
#[derive(Debug, Clone, PartialEq)]
pub enum FrameReply<'a> {
    Frame {
        plant_step: u64,
        resets: u64,
        /// The pixels of every view, in header order.
        pixels: &'a [u8],
    },
    Error(&'a str),
}

/// Decodes a reply to a frame request with `state.len()` state values and views of `view_bytes` bytes each;
/// returns the reply and the bytes used.
pub fn decode_frame_reply<'a>(
    bytes: &'a [u8],
    state: &mut [f32],
    view_bytes: &[usize],
) -> Result<(FrameReply<'a>, usize), SceneError> {
    let mut r = Reader::new(bytes);
    if !reply_status(Request::Frame, r.u8()?)? {
        return Ok((FrameReply::Error(r.str()?), r.position()));
    }
    let (plant_step, resets) = decode_frame_prefix(r.take(frame_prefix_len(state.len()))?, state)?;
    let total = view_bytes
        .iter()
        .try_fold(0usize, |a, &b| a.checked_add(b))
        .ok_or(SceneError::Incomplete { need: usize::MAX })?;
    let pixels = r.take(total)?;
    Ok((
        FrameReply::Frame {
            plant_step,
            resets,
            pixels,
        },
        r.position(),
    ))
}

/// Writes a `u16`-length string, cut to at most `u16::MAX` bytes at a character boundary.
pub fn put_str(s: &str, put: &mut impl FnMut(&[u8])) {
    let mut n = s.len().min(usize::from(u16::MAX));
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    put(&(n as u16).to_le_bytes());
    put(&s.as_bytes()[..n]);
}

/// Writes a server header. At most `u16::MAX` views and state values are written (the counts are `u16`).
pub fn encode_header(
    task: &str,
    views: &[ViewEntry<'_>],
    state: &[StateEntry<'_>],
    put: &mut impl FnMut(&[u8]),
) {
    put(&SCENE_MAGIC);
    put(&SCENE_VERSION.to_le_bytes());
    put_str(task, put);
    let nv = views.len().min(usize::from(u16::MAX));
    put(&(nv as u16).to_le_bytes());
    for v in &views[..nv] {
        put_str(v.name, put);
        put(&v.width.to_le_bytes());
        put(&v.height.to_le_bytes());
    }
    let ns = state.len().min(usize::from(u16::MAX));
    put(&(ns as u16).to_le_bytes());
    for s in &state[..ns] {
        put_str(s.name, put);
        put(&s.low.to_le_bytes());
        put(&s.high.to_le_bytes());
    }
}

/// Writes the start of a successful frame reply: status, plant step, resets, the state. The pixels of every
/// view follow (the caller writes them).
pub fn encode_frame_prefix(
    plant_step: u64,
    resets: u64,
    state: &[f32],
    put: &mut impl FnMut(&[u8]),
) {
    put(&[STATUS_OK]);
    put(&plant_step.to_le_bytes());
    put(&resets.to_le_bytes());
    for x in state {
        put(&x.to_le_bytes());
    }
}

/// Writes a failure reply: `status` ([`STATUS_RESET_FAILED`] or [`STATUS_ERROR`]) and the message.
pub fn encode_failure(status: u8, message: &str, put: &mut impl FnMut(&[u8])) {
    put(&[status]);
    put_str(message, put);
}
