//! Episode logs: every message the actor publishes, as the exact bytes that went on the wire, with its key
//! expression. `replay` puts them back on the stream unchanged, so a replayed stream is bit-identical.
//!
//! File layout: the magic line `STAGEWISE-LOG 1\n`, then records `u32 key length (LE) | key (UTF-8) |
//! u32 payload length (LE) | payload`. A truncated last record (the actor was killed mid-write) is reported,
//! not fatal: everything before it replays.
//!
//! Nothing is lost: a log already at the path is kept (renamed to `<stem>.<N>.<ext>`, the first free N), and the
//! log is fsynced at every episode end and on close. Records larger than the reader accepts are refused on write.

use crate::RuntimeError;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

const MAGIC: &[u8] = b"STAGEWISE-LOG 1\n";
/// Larger records are refused on read: a corrupt length must not allocate gigabytes.
const MAX_RECORD: usize = 256 << 20;

pub struct EpisodeLog {
    path: PathBuf,
    out: BufWriter<std::fs::File>,
    records: u64,
}

/// The first free `<stem>.<N>.<ext>` beside `path` (N from 1).
fn kept_name(path: &Path) -> PathBuf {
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let ext = path
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    (1u64..)
        .map(|n| path.with_file_name(format!("{stem}.{n}{ext}")))
        .find(|p| !p.exists())
        .unwrap_or_else(|| path.with_extension("old"))
}

impl EpisodeLog {
    /// A new log at `path`; a log already there is kept under `<stem>.<N>.<ext>` (logged), never overwritten.
    pub fn create(path: &Path) -> Result<Self, RuntimeError> {
        let err = |e: std::io::Error| RuntimeError::Log {
            path: path.to_path_buf(),
            reason: e.to_string(),
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        if path.exists() {
            let kept = kept_name(path);
            std::fs::rename(path, &kept).map_err(err)?;
            tracing::info!(
                "episode log {} exists: kept as {}",
                path.display(),
                kept.display()
            );
        }
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(err)?;
        let mut out = BufWriter::new(file);
        out.write_all(MAGIC).map_err(err)?;
        Ok(Self {
            path: path.to_path_buf(),
            out,
            records: 0,
        })
    }

    pub fn append(&mut self, key: &str, payload: &[u8]) -> Result<(), RuntimeError> {
        let err = |e: std::io::Error| RuntimeError::Log {
            path: self.path.clone(),
            reason: e.to_string(),
        };
        for (what, len) in [("key", key.len()), ("payload", payload.len())] {
            if len > MAX_RECORD {
                return Err(err(std::io::Error::other(format!(
                    "record {what} of {len} bytes on {key:?} is larger than a log reader accepts ({MAX_RECORD})"
                ))));
            }
        }
        let write = |out: &mut BufWriter<std::fs::File>| -> std::io::Result<()> {
            out.write_all(&(key.len() as u32).to_le_bytes())?;
            out.write_all(key.as_bytes())?;
            out.write_all(&(payload.len() as u32).to_le_bytes())?;
            out.write_all(payload)
        };
        write(&mut self.out).map_err(err)?;
        self.records += 1;
        Ok(())
    }

    /// Flushes and fsyncs (called at every episode end, so a killed actor or a power cut loses at most the
    /// running episode).
    pub fn flush(&mut self) -> Result<(), RuntimeError> {
        self.out
            .flush()
            .and_then(|()| self.out.get_ref().sync_data())
            .map_err(|e| RuntimeError::Log {
                path: self.path.clone(),
                reason: e.to_string(),
            })
    }

    pub fn records(&self) -> u64 {
        self.records
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for EpisodeLog {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct LogRecord {
    pub key: String,
    pub payload: Vec<u8>,
}

/// Reads a log record by record.
pub struct LogReader {
    path: PathBuf,
    input: BufReader<std::fs::File>,
}

impl LogReader {
    pub fn open(path: &Path) -> Result<Self, RuntimeError> {
        let err = |reason: String| RuntimeError::Log {
            path: path.to_path_buf(),
            reason,
        };
        let mut input = BufReader::new(std::fs::File::open(path).map_err(|e| err(e.to_string()))?);
        let mut magic = vec![0u8; MAGIC.len()];
        input
            .read_exact(&mut magic)
            .map_err(|_| err("too short to be a Stagewise episode log".into()))?;
        if magic != MAGIC {
            return Err(err("not a Stagewise episode log (bad magic line)".into()));
        }
        Ok(Self {
            path: path.to_path_buf(),
            input,
        })
    }

    /// The next record; `Ok(None)` at the end; an error for a truncated or corrupt record.
    pub fn next_record(&mut self) -> Result<Option<LogRecord>, RuntimeError> {
        let mut len = [0u8; 4];
        match self.input.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(self.err(e.to_string())),
        }
        let key_len = u32::from_le_bytes(len) as usize;
        if key_len > 4096 {
            return Err(self.err(format!(
                "record key length {key_len} is not plausible: corrupt log"
            )));
        }
        let mut key = vec![0u8; key_len];
        self.input
            .read_exact(&mut key)
            .map_err(|_| self.err("truncated record (key)".into()))?;
        let key = String::from_utf8(key)
            .map_err(|_| self.err("record key is not UTF-8: corrupt log".into()))?;
        self.input
            .read_exact(&mut len)
            .map_err(|_| self.err("truncated record (length)".into()))?;
        let n = u32::from_le_bytes(len) as usize;
        if n > MAX_RECORD {
            return Err(self.err(format!(
                "record length {n} exceeds {MAX_RECORD}: corrupt log"
            )));
        }
        let mut payload = vec![0u8; n];
        self.input
            .read_exact(&mut payload)
            .map_err(|_| self.err(format!("truncated record on {key}")))?;
        Ok(Some(LogRecord { key, payload }))
    }

    fn err(&self, reason: String) -> RuntimeError {
        RuntimeError::Log {
            path: self.path.clone(),
            reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_truncation() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a/run.swlog");
        let mut log = EpisodeLog::create(&p).unwrap();
        log.append("stagewise/r/transition", &[1, 2, 3]).unwrap();
        log.append("stagewise/r/episode", &[]).unwrap();
        drop(log);
        let mut r = LogReader::open(&p).unwrap();
        assert_eq!(r.next_record().unwrap().unwrap().payload, vec![1, 2, 3]);
        assert_eq!(r.next_record().unwrap().unwrap().key, "stagewise/r/episode");
        assert_eq!(r.next_record().unwrap(), None);
        // cut the file mid-record: the first record still reads, the second is an error naming the file
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() - 3]).unwrap();
        let mut r = LogReader::open(&p).unwrap();
        assert!(r.next_record().unwrap().is_some());
        let e = r.next_record().unwrap_err();
        assert!(e.to_string().contains("run.swlog"), "{e}");
        std::fs::write(&p, b"hello").unwrap();
        assert!(LogReader::open(&p).is_err());
    }

    #[test]
    fn an_earlier_log_is_kept_and_oversized_records_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("run.swlog");
        let mut first = EpisodeLog::create(&p).unwrap();
        first.append("stagewise/r/episode", &[1]).unwrap();
        drop(first);
        let second = EpisodeLog::create(&p).unwrap();
        drop(second);
        let third = EpisodeLog::create(&p).unwrap();
        drop(third);
        // the first run's log is run.1.swlog, the second's run.2.swlog, the newest at the path
        let mut r = LogReader::open(&dir.path().join("run.1.swlog")).unwrap();
        assert_eq!(r.next_record().unwrap().unwrap().payload, vec![1]);
        assert_eq!(
            LogReader::open(&dir.path().join("run.2.swlog"))
                .unwrap()
                .next_record()
                .unwrap(),
            None
        );
        assert_eq!(LogReader::open(&p).unwrap().next_record().unwrap(), None);
        let mut log = EpisodeLog::create(&p).unwrap();
        let e = log
            .append("stagewise/r/transition", &vec![0u8; MAX_RECORD + 1])
            .unwrap_err();
        assert!(
            e.to_string().contains("larger than a log reader accepts"),
            "{e}"
        );
        assert_eq!(log.records(), 0);
    }
}
