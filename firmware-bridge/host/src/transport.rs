//! Links to the firmware: UDP (one frame per datagram) and serial (a byte stream, e.g. a USB CDC port or a pty).

use std::fs::File;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use tokio::io::unix::AsyncFd;
use tokio::net::UdpSocket;

/// Where the firmware is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// UDP: the firmware's address (the bridge binds an ephemeral local port on the matching loopback/any).
    Udp(SocketAddr),
    /// A serial device (tty or pty) at a baud rate.
    Serial { path: PathBuf, baud: u32 },
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Udp(a) => write!(f, "udp://{a}"),
            Endpoint::Serial { path, baud } => write!(f, "serial://{}@{baud}", path.display()),
        }
    }
}

impl std::str::FromStr for Endpoint {
    type Err = TransportError;

    /// `udp://HOST:PORT` or `serial:///dev/ttyACM0@921600` (baud optional, default 921600).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(rest) = s.strip_prefix("udp://") {
            let addr = rest
                .parse()
                .map_err(|_| TransportError::BadEndpoint(s.to_string()))?;
            return Ok(Endpoint::Udp(addr));
        }
        if let Some(rest) = s.strip_prefix("serial://") {
            let (path, baud) = match rest.rsplit_once('@') {
                Some((p, b)) => (
                    p,
                    b.parse()
                        .map_err(|_| TransportError::BadEndpoint(s.to_string()))?,
                ),
                None => (rest, 921_600),
            };
            if path.is_empty() {
                return Err(TransportError::BadEndpoint(s.to_string()));
            }
            return Ok(Endpoint::Serial {
                path: PathBuf::from(path),
                baud,
            });
        }
        Err(TransportError::BadEndpoint(s.to_string()))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("endpoint {0:?} is not udp://HOST:PORT or serial://PATH[@BAUD]")]
    BadEndpoint(String),
    #[error("cannot bind a UDP socket for {peer}")]
    UdpBind {
        peer: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot open serial device {path}")]
    SerialOpen {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot configure serial device {path} (raw mode, {baud} baud)")]
    SerialConfig {
        path: PathBuf,
        baud: u32,
        source: nix::Error,
    },
    #[error("unsupported baud rate {0}")]
    Baud(u32),
    #[error("link I/O failed")]
    Io(#[from] std::io::Error),
}

/// An open link. Send and receive take `&self`, so one task can read while others write.
pub enum Transport {
    Udp(UdpSocket),
    Serial(AsyncFd<File>),
}

impl Transport {
    /// Opens the link. Must be called inside a tokio runtime.
    pub async fn open(endpoint: &Endpoint) -> Result<Self, TransportError> {
        match endpoint {
            Endpoint::Udp(peer) => Self::udp(*peer).await,
            Endpoint::Serial { path, baud } => Self::serial(path, *baud),
        }
    }

    /// A UDP socket connected to `peer` (datagrams from anyone else are dropped by the kernel).
    pub async fn udp(peer: SocketAddr) -> Result<Self, TransportError> {
        let local: SocketAddr = if peer.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let local = if peer.ip().is_loopback() {
            SocketAddr::new(peer.ip(), 0)
        } else {
            local
        };
        let sock = UdpSocket::bind(local)
            .await
            .map_err(|source| TransportError::UdpBind { peer, source })?;
        sock.connect(peer)
            .await
            .map_err(|source| TransportError::UdpBind { peer, source })?;
        Ok(Transport::Udp(sock))
    }

    /// A serial device in raw mode (8N1, no flow control, no echo) at `baud`.
    pub fn serial(path: &Path, baud: u32) -> Result<Self, TransportError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(nix::fcntl::OFlag::O_NOCTTY.bits() | nix::fcntl::OFlag::O_NONBLOCK.bits())
            .open(path)
            .map_err(|source| TransportError::SerialOpen {
                path: path.to_path_buf(),
                source,
            })?;
        configure_raw(&file, baud).map_err(|e| match e {
            RawError::Baud => TransportError::Baud(baud),
            RawError::Nix(source) => TransportError::SerialConfig {
                path: path.to_path_buf(),
                baud,
                source,
            },
        })?;
        // SAFETY: `file` owns a valid, open descriptor; `AsyncFd` owns `file` from here on and nothing replaces or
        // closes the descriptor while it is registered (it is closed when the `AsyncFd` drops).
        #[allow(unsafe_code)]
        let fd = unsafe { AsyncFd::register(file) }.map_err(|e| TransportError::Io(e.into()))?;
        Ok(Transport::Serial(fd))
    }

    /// Sends one frame (UDP: one datagram).
    pub async fn send(&self, frame: &[u8]) -> std::io::Result<()> {
        match self {
            Transport::Udp(s) => s.send(frame).await.map(|_| ()),
            Transport::Serial(fd) => {
                let mut rest = frame;
                while !rest.is_empty() {
                    let mut guard = fd.writable().await?;
                    match guard.try_io(|f| f.get_ref().write(rest)) {
                        Ok(Ok(n)) => rest = &rest[n..],
                        Ok(Err(e)) => return Err(e),
                        Err(_would_block) => continue,
                    }
                }
                Ok(())
            }
        }
    }

    /// Receives some bytes (UDP: one datagram; serial: whatever is available).
    pub async fn recv(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Transport::Udp(s) => s.recv(buf).await,
            Transport::Serial(fd) => loop {
                let mut guard = fd.readable().await?;
                match guard.try_io(|f| f.get_ref().read(buf)) {
                    Ok(r) => return r,
                    Err(_would_block) => continue,
                }
            },
        }
    }

    /// True for byte-stream links (frames may be split across reads).
    pub fn is_stream(&self) -> bool {
        matches!(self, Transport::Serial(_))
    }
}

enum RawError {
    Baud,
    Nix(nix::Error),
}

fn configure_raw(file: &File, baud: u32) -> Result<(), RawError> {
    use nix::sys::termios::{self, BaudRate, SetArg};
    let rate = match baud {
        9600 => BaudRate::B9600,
        19200 => BaudRate::B19200,
        38400 => BaudRate::B38400,
        57600 => BaudRate::B57600,
        115_200 => BaudRate::B115200,
        230_400 => BaudRate::B230400,
        460_800 => BaudRate::B460800,
        921_600 => BaudRate::B921600,
        1_000_000 => BaudRate::B1000000,
        2_000_000 => BaudRate::B2000000,
        3_000_000 => BaudRate::B3000000,
        4_000_000 => BaudRate::B4000000,
        _ => return Err(RawError::Baud),
    };
    let mut t = termios::tcgetattr(file).map_err(RawError::Nix)?;
    termios::cfmakeraw(&mut t);
    termios::cfsetspeed(&mut t, rate).map_err(RawError::Nix)?;
    termios::tcsetattr(file, SetArg::TCSANOW, &t).map_err(RawError::Nix)?;
    Ok(())
}
