//! Link keys on the host: reading a key file, making a new one. A key file holds the 32-byte pre-shared key as
//! 64 hex digits (whitespace around it ignored); the robot's firmware (or `stagewise emulator --link-key-file`)
//! holds the same key. The all-zero key is public and refused here (see
//! [`stagewise_protocol::UNAUTHENTICATED_KEY`]).

use stagewise_protocol::{KeyError, LinkKey, KEY_LEN};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum LinkKeyError {
    #[error("cannot read the link key file {path}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("link key file {path}")]
    Parse { path: PathBuf, source: KeyError },
    #[error("cannot write a new link key file {path} (an existing key file is never overwritten)")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Reads and parses a key file. A file that group or others may read is accepted with a warning (the key is
/// what keeps other people from driving the robot).
pub fn load(path: &Path) -> Result<LinkKey, LinkKeyError> {
    let text = std::fs::read_to_string(path).map_err(|source| LinkKeyError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let key = LinkKey::parse_hex(&text).map_err(|source| LinkKeyError::Parse {
        path: path.to_path_buf(),
        source,
    })?;
    if let Ok(meta) = std::fs::metadata(path) {
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            tracing::warn!(
                "link key file {} is readable by others (mode {mode:03o}): chmod 600 it",
                path.display()
            );
        }
    }
    Ok(key)
}

/// `key` as 64 lowercase hex digits.
pub fn to_hex(key: &[u8; KEY_LEN]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

/// Makes a new random key (the operating system's RNG) and writes it to `path` (created, mode 0600; an existing
/// file is an error). Returns the key.
pub fn generate(path: &Path) -> Result<LinkKey, LinkKeyError> {
    use rand::TryRngCore;
    let err = |source| LinkKeyError::Write {
        path: path.to_path_buf(),
        source,
    };
    let mut bytes = [0u8; KEY_LEN];
    rand::rngs::OsRng
        .try_fill_bytes(&mut bytes)
        .map_err(|e| err(std::io::Error::other(e)))?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(err)?;
    writeln!(f, "{}", to_hex(&bytes)).map_err(err)?;
    f.sync_all().map_err(err)?;
    Ok(LinkKey::new(&bytes))
}

/// The fingerprint of `key` as text, for logs.
pub fn fingerprint(key: &LinkKey) -> String {
    String::from_utf8_lossy(&key.fingerprint_hex()).into_owned()
}
