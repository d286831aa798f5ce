//! Episode logs: every message the actor publishes, as the exact bytes that went on the wire, with its key
//! expression. `replay` puts them back on the stream unchanged, so a replayed stream is bit-identical.
//!
//! File layout: the magic line `STAGEWISE-LOG 1\n`, then records `u32 key length (LE) | key (UTF-8) |
//! u32 payload length (LE) | payload`. A torn last record (the actor was killed, or the power cut, mid-write)
//! ends the log cleanly at the last complete record and is reported ([`LogReader::torn_tail`], and a warning);
//! everything before it replays. A corrupt record (an implausible length, a key that is not UTF-8) is an error.
//!
//! Nothing is lost: a log already at the path is kept (renamed to `<stem>.<N>.<ext>`, the first free N), the new
//! file and its directory are fsynced when it is created, and the log is fsynced at every episode end and on
//! close. Records larger than the reader accepts are refused on write.

use crate::RuntimeError;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

const MAGIC: &[u8] = b"STAGEWISE-LOG 1\n";
/// Larger records are refused on read: a corrupt length must not allocate gigabytes.
const MAX_RECORD: usize = 256 << 20;
/// Longest key a reader accepts (zenoh key expressions of `stagewise/<robot>/...` are far shorter).
const MAX_KEY: usize = 4096;

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
        let err = |source: std::io::Error| RuntimeError::LogIo {
            path: path.to_path_buf(),
            source,
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
        // The new file's name (and the kept one's) durable too: fsynced records in a file whose directory entry
        // was never synced can vanish with it in a power cut.
        out.flush()
            .and_then(|()| out.get_ref().sync_data())
            .map_err(err)?;
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(err)?;
        Ok(Self {
            path: path.to_path_buf(),
            out,
            records: 0,
        })
    }

    pub fn append(&mut self, key: &str, payload: &[u8]) -> Result<(), RuntimeError> {
        let err = |source: std::io::Error| RuntimeError::LogIo {
            path: self.path.clone(),
            source,
        };
        for (what, len, max) in [
            ("key", key.len(), MAX_KEY),
            ("payload", payload.len(), MAX_RECORD),
        ] {
            if len > max {
                return Err(RuntimeError::Log {
                    path: self.path.clone(),
                    reason: format!(
                        "record {what} of {len} bytes on {key:?} is larger than a log reader accepts ({max})"
                    ),
                });
            }
        }
        if key.is_empty() {
            return Err(RuntimeError::Log {
                path: self.path.clone(),
                reason: "record with an empty key: a log reader refuses it".into(),
            });
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
            .map_err(|source| RuntimeError::LogIo {
                path: self.path.clone(),
                source,
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

/// The cut end of a log: bytes after the last complete record that do not make a whole record (the actor was
/// killed, or the machine lost power, while the record was being written). Everything before `offset` reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// Byte offset where the incomplete record starts (the end of the last complete record).
    pub offset: u64,
    /// Bytes from `offset` to the end of the file.
    pub bytes: u64,
    /// Complete records before it.
    pub records: u64,
    /// Which part of the record was cut: `key length`, `key`, `payload length` or `payload`.
    pub part: &'static str,
}

impl std::fmt::Display for TornTail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "torn last record at byte {} ({} bytes, cut in its {}) after {} complete records",
            self.offset, self.bytes, self.part, self.records
        )
    }
}

/// Reads a log record by record. A torn last record ends the log cleanly ([`LogReader::next_record`] returns
/// `Ok(None)`, [`LogReader::torn_tail`] says what was cut, and a warning is logged); a record that is corrupt
/// rather than cut (an implausible key length, a key that is not UTF-8) is an error.
pub struct LogReader {
    path: PathBuf,
    input: BufReader<std::fs::File>,
    /// End of the last complete record.
    offset: u64,
    records: u64,
    torn: Option<TornTail>,
}

/// How reading one part of a record ended.
enum Part {
    Whole,
    /// End of file inside the part (or, for the key length, with 1..=3 of its bytes).
    Cut,
    /// End of file exactly before the part.
    Eof,
}

fn read_part(input: &mut impl Read, buf: &mut [u8]) -> std::io::Result<Part> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) => return Ok(if got == 0 { Part::Eof } else { Part::Cut }),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Part::Whole)
}

impl LogReader {
    pub fn open(path: &Path) -> Result<Self, RuntimeError> {
        let err = |reason: String| RuntimeError::Log {
            path: path.to_path_buf(),
            reason,
        };
        let mut input =
            BufReader::new(
                std::fs::File::open(path).map_err(|source| RuntimeError::LogIo {
                    path: path.to_path_buf(),
                    source,
                })?,
            );
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
            offset: MAGIC.len() as u64,
            records: 0,
            torn: None,
        })
    }

    /// The next record; `Ok(None)` at the end, which is also where a torn last record stops the log (see
    /// [`LogReader::torn_tail`]); an error for a corrupt record or a failed read.
    pub fn next_record(&mut self) -> Result<Option<LogRecord>, RuntimeError> {
        if self.torn.is_some() {
            return Ok(None);
        }
        let mut len = [0u8; 4];
        match self.part(&mut len)? {
            Part::Whole => {}
            Part::Eof => return Ok(None),
            Part::Cut => return self.cut("key length"),
        }
        let key_len = u32::from_le_bytes(len) as usize;
        if key_len == 0 || key_len > MAX_KEY {
            return Err(self.err(format!(
                "record {} at byte {}: key length {key_len} is not plausible: corrupt log",
                self.records, self.offset
            )));
        }
        let mut key = vec![0u8; key_len];
        if !matches!(self.part(&mut key)?, Part::Whole) {
            return self.cut("key");
        }
        let key = String::from_utf8(key).map_err(|_| {
            self.err(format!(
                "record {} at byte {}: key is not UTF-8: corrupt log",
                self.records, self.offset
            ))
        })?;
        if !matches!(self.part(&mut len)?, Part::Whole) {
            return self.cut("payload length");
        }
        let n = u32::from_le_bytes(len) as usize;
        if n > MAX_RECORD {
            return Err(self.err(format!(
                "record {} at byte {} on {key}: length {n} exceeds {MAX_RECORD}: corrupt log",
                self.records, self.offset
            )));
        }
        let mut payload = vec![0u8; n];
        if !matches!(self.part(&mut payload)?, Part::Whole) {
            return self.cut("payload");
        }
        self.offset += (8 + key_len + n) as u64;
        self.records += 1;
        Ok(Some(LogRecord { key, payload }))
    }

    /// The torn last record, once [`LogReader::next_record`] has reached it (`None` before, and for a log that
    /// ends on a record boundary).
    pub fn torn_tail(&self) -> Option<&TornTail> {
        self.torn.as_ref()
    }

    /// Complete records read so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Byte offset just past the last complete record read.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    fn part(&mut self, buf: &mut [u8]) -> Result<Part, RuntimeError> {
        read_part(&mut self.input, buf).map_err(|e| self.io_err(e))
    }

    fn cut(&mut self, part: &'static str) -> Result<Option<LogRecord>, RuntimeError> {
        let size = self
            .input
            .get_ref()
            .metadata()
            .map_err(|e| self.io_err(e))?
            .len();
        let torn = TornTail {
            offset: self.offset,
            bytes: size.saturating_sub(self.offset),
            records: self.records,
            part,
        };
        tracing::warn!(
            "episode log {}: {torn}; the log ends at the last complete record",
            self.path.display()
        );
        self.torn = Some(torn);
        Ok(None)
    }

    fn err(&self, reason: String) -> RuntimeError {
        RuntimeError::Log {
            path: self.path.clone(),
            reason,
        }
    }

    fn io_err(&self, source: std::io::Error) -> RuntimeError {
        RuntimeError::LogIo {
            path: self.path.clone(),
            source,
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
        assert_eq!(r.torn_tail(), None, "the log ends on a record boundary");
        assert_eq!(r.offset(), std::fs::metadata(&p).unwrap().len());
        std::fs::write(&p, b"hello").unwrap();
        assert!(LogReader::open(&p).is_err());
    }

    /// Cut the file at every byte of its last record: the complete records read, then the log ends cleanly and
    /// the torn tail is reported with its offset, size and the part that was cut.
    #[test]
    fn a_torn_last_record_ends_the_log_at_the_last_complete_record() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("run.swlog");
        let mut log = EpisodeLog::create(&p).unwrap();
        log.append("stagewise/r/transition", &[1, 2, 3]).unwrap();
        log.append("stagewise/r/episode", &[9; 10]).unwrap();
        drop(log);
        let bytes = std::fs::read(&p).unwrap();
        let last = (MAGIC.len() + 8 + "stagewise/r/transition".len() + 3) as u64;
        assert_eq!(bytes.len() as u64, last + 8 + 19 + 10);
        let cut = dir.path().join("cut.swlog");
        let mut parts = std::collections::BTreeSet::new();
        for end in last + 1..bytes.len() as u64 {
            std::fs::write(&cut, &bytes[..end as usize]).unwrap();
            let mut r = LogReader::open(&cut).unwrap();
            let first = r.next_record().unwrap().expect("the complete record");
            assert_eq!(first.payload, vec![1, 2, 3]);
            assert_eq!(r.next_record().unwrap(), None, "cut at {end}");
            let torn = r.torn_tail().expect("a torn tail").clone();
            assert_eq!(
                (torn.offset, torn.bytes, torn.records),
                (last, end - last, 1),
                "cut at {end}"
            );
            assert!(
                torn.to_string().contains(&format!("at byte {last}")),
                "{torn}"
            );
            parts.insert(torn.part);
            // it stays ended
            assert_eq!(r.next_record().unwrap(), None);
            assert_eq!(r.records(), 1);
        }
        assert_eq!(
            parts.into_iter().collect::<Vec<_>>(),
            ["key", "key length", "payload", "payload length"]
        );
        // A cut right after the magic line or on a record boundary is no torn tail.
        std::fs::write(&cut, &bytes[..last as usize]).unwrap();
        let mut r = LogReader::open(&cut).unwrap();
        assert!(r.next_record().unwrap().is_some());
        assert_eq!(r.next_record().unwrap(), None);
        assert_eq!(r.torn_tail(), None);
    }

    #[test]
    fn a_corrupt_record_is_an_error_not_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("run.swlog");
        let mut log = EpisodeLog::create(&p).unwrap();
        log.append("stagewise/r/episode", &[1]).unwrap();
        drop(log);
        let good = std::fs::read(&p).unwrap();
        for (name, tail) in [
            ("zero key length", 0u32.to_le_bytes().to_vec()),
            ("huge key length", 1_000_000u32.to_le_bytes().to_vec()),
            (
                "non-UTF-8 key",
                [2u32.to_le_bytes().to_vec(), vec![0xff, 0xfe]].concat(),
            ),
            (
                "huge payload length",
                [
                    1u32.to_le_bytes().to_vec(),
                    b"k".to_vec(),
                    u32::MAX.to_le_bytes().to_vec(),
                ]
                .concat(),
            ),
        ] {
            std::fs::write(&p, [good.clone(), tail].concat()).unwrap();
            let mut r = LogReader::open(&p).unwrap();
            assert!(r.next_record().unwrap().is_some());
            let e = r.next_record().expect_err(name);
            assert!(e.to_string().contains("corrupt log"), "{name}: {e}");
            assert!(e.to_string().contains("run.swlog"), "{name}: {e}");
        }
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
        assert!(log.append("", &[1]).is_err(), "an empty key is refused");
        assert!(log.append(&"k".repeat(MAX_KEY + 1), &[1]).is_err());
        assert_eq!(log.records(), 0);
    }
}
