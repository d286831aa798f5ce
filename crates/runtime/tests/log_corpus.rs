//! The episode log reader against a committed corpus (issue 19 item 4): `tests/corpus/log/` holds logs as
//! `EpisodeLog` writes them (`ok-*`: a run's records with real keys and wire payloads, an empty log), logs cut
//! inside a record (`torn-*`), corrupt records (`corrupt-*`: zero or huge key length, a non-UTF-8 key, a payload
//! length over the reader's limit) and files that are no log (`bad-*`). Each reads as its name says; every
//! prefix of the good logs reads to its last complete record; thousands of seeded mutations (byte flips, length
//! fields set to small, boundary and huge values, inserts, deletes, cuts, splices) never panic the reader, and
//! whatever it says accounts for the file's bytes: a clean end at the file's end, a torn tail that reaches it,
//! or an error.
//!
//! A bounded, deterministic run (seeded ChaCha) inside `cargo test`:
//! `cargo test -p stagewise-runtime --test integration log_corpus::`. The corpus files are written again by
//! `cargo test -p stagewise-runtime --test integration log_corpus::write_corpus -- --ignored`.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use stagewise_runtime::{EpisodeLog, LogReader, LogRecord};
use std::path::{Path, PathBuf};

const MAGIC: &[u8] = b"STAGEWISE-LOG 1\n";

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/log")
}

fn corpus() -> Vec<(String, Vec<u8>)> {
    let dir = corpus_dir();
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let p = e.expect("entry").path();
            let name = p.file_name().expect("name").to_string_lossy().into_owned();
            (name, std::fs::read(&p).expect("read"))
        })
        .collect();
    out.sort();
    out
}

/// A scratch directory, in memory where the machine has one (thousands of small files are written and read: on a
/// busy disk each costs milliseconds of waiting).
fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(d) = tempfile::tempdir_in(shm) {
            return d;
        }
    }
    tempfile::tempdir().expect("tmp")
}

/// How reading a whole log ended.
#[derive(Debug)]
enum End {
    /// Ended on a record boundary (`records`, no torn tail).
    Clean(Vec<LogRecord>),
    /// Ended at a torn last record.
    Torn(Vec<LogRecord>),
    /// `LogReader::open` refused the file.
    Refused(#[allow(dead_code)] String),
    /// A record was corrupt.
    Corrupt(Vec<LogRecord>, String),
}

/// Reads the log in `bytes` (written to `path`) to its end, checking that what the reader reports accounts for
/// the file: a clean end is the file's end; a torn tail starts where the complete records end and reaches the
/// file's end; nothing reads past the file.
fn read_all(path: &Path, bytes: &[u8]) -> End {
    std::fs::write(path, bytes).expect("write");
    let size = bytes.len() as u64;
    let mut r = match LogReader::open(path) {
        Ok(r) => r,
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains(&path.display().to_string()), "{msg}");
            return End::Refused(msg);
        }
    };
    assert!(
        bytes.starts_with(MAGIC),
        "opened a file without the magic line"
    );
    let mut records = Vec::new();
    loop {
        match r.next_record() {
            Ok(Some(rec)) => {
                assert!(
                    !rec.key.is_empty() && rec.key.len() <= 4096,
                    "key {:?}",
                    rec.key
                );
                records.push(rec);
                assert!(
                    r.offset() <= size,
                    "offset {} past the file ({size})",
                    r.offset()
                );
                assert!(
                    records.len() as u64 <= size / 9,
                    "{} records",
                    records.len()
                );
            }
            Ok(None) => break,
            Err(e) => {
                let msg = e.to_string();
                assert!(
                    msg.contains("corrupt log") && msg.contains(&path.display().to_string()),
                    "{msg}"
                );
                return End::Corrupt(records, msg);
            }
        }
    }
    // It stays ended.
    assert!(matches!(r.next_record(), Ok(None)));
    assert_eq!(r.records(), records.len() as u64);
    let complete: u64 = MAGIC.len() as u64
        + records
            .iter()
            .map(|r| 8 + (r.key.len() + r.payload.len()) as u64)
            .sum::<u64>();
    assert_eq!(
        r.offset(),
        complete,
        "offset is the end of the complete records"
    );
    match r.torn_tail() {
        None => {
            assert_eq!(complete, size, "a clean end is the file's end");
            End::Clean(records)
        }
        Some(t) => {
            assert_eq!(
                (t.offset, t.offset + t.bytes, t.records),
                (complete, size, records.len() as u64),
                "{t}"
            );
            assert!(t.bytes > 0);
            End::Torn(records)
        }
    }
}

#[test]
fn every_corpus_file_reads_as_its_name_says() {
    let files = corpus();
    assert!(files.len() >= 12, "{} corpus files", files.len());
    let tmp = scratch();
    let path = tmp.path().join("read.swlog");
    for (name, bytes) in &files {
        let end = read_all(&path, bytes);
        let ok = match (name.split('-').next().expect("prefix"), &end) {
            ("ok", End::Clean(_)) | ("torn", End::Torn(_)) | ("bad", End::Refused(_)) => true,
            ("corrupt", End::Corrupt(before, _)) => !before.is_empty(),
            _ => false,
        };
        assert!(ok, "{name}: {end:?}");
    }
    // The run log carries the episode's records in order.
    let run = files
        .iter()
        .find(|(n, _)| n == "ok-run.swlog")
        .expect("ok-run.swlog");
    let End::Clean(records) = read_all(&path, &run.1) else {
        panic!("ok-run.swlog")
    };
    assert_eq!(records.len(), 7);
    assert!(records[6].key.ends_with("/episode"), "{:?}", records[6].key);
}

/// Every prefix of every good log ends cleanly (on a record boundary) or at a torn tail, never in an error, and
/// keeps every record that was complete in it.
#[test]
fn every_prefix_of_a_good_log_reads_to_its_last_complete_record() {
    let tmp = scratch();
    let path = tmp.path().join("prefix.swlog");
    let mut prefixes = 0;
    for (name, bytes) in corpus().iter().filter(|(n, _)| n.starts_with("ok-")) {
        let End::Clean(all) = read_all(&path, bytes) else {
            panic!("{name}")
        };
        for end in 0..bytes.len() {
            prefixes += 1;
            match read_all(&path, &bytes[..end]) {
                End::Refused(_) => assert!(end < MAGIC.len(), "{name} cut at {end}"),
                End::Clean(got) | End::Torn(got) => {
                    assert_eq!(got[..], all[..got.len()], "{name} cut at {end}")
                }
                End::Corrupt(_, e) => panic!("{name} cut at {end}: {e}"),
            }
        }
    }
    assert!(prefixes > 500, "{prefixes} prefixes");
}

/// One seeded mutation of `bytes`: a length field (at a record start the reader would see) set to a chosen
/// value, or a byte flipped, bytes inserted or deleted, the file cut, or another corpus file spliced in.
fn mutate(rng: &mut ChaCha8Rng, bytes: &mut Vec<u8>, corpus: &[(String, Vec<u8>)]) {
    let len = bytes.len();
    match rng.random_range(0..6) {
        0 if len >= 4 => {
            let at = rng.random_range(0..=len - 4);
            let v: u32 = match rng.random_range(0..6) {
                0 => 0,
                1 => 4096,
                2 => 4097,
                3 => 256 << 20,
                4 => u32::MAX,
                _ => rng.random_range(0..64),
            };
            bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
        }
        1 if len > 0 => {
            let at = rng.random_range(0..len);
            bytes[at] ^= 1 << rng.random_range(0..8);
        }
        2 => {
            let at = rng.random_range(0..=len);
            let n = rng.random_range(1..8);
            let junk: Vec<u8> = (0..n).map(|_| rng.random()).collect();
            bytes.splice(at..at, junk);
        }
        3 if len > 0 => {
            let at = rng.random_range(0..len);
            let n = rng.random_range(1..16).min(len - at);
            bytes.drain(at..at + n);
        }
        4 => bytes.truncate(rng.random_range(0..=len)),
        _ => {
            let other = &corpus[rng.random_range(0..corpus.len())].1;
            let cut = rng.random_range(0..=len);
            let from = rng.random_range(0..=other.len());
            bytes.truncate(cut);
            bytes.extend_from_slice(&other[from..]);
        }
    }
}

/// 20000 mutated logs (about a second in a debug build, files in /dev/shm): no panic, and the end accounts for
/// the file.
#[test]
fn mutated_logs_never_panic_the_reader() {
    let corpus = corpus();
    let tmp = scratch();
    let path = tmp.path().join("mutated.swlog");
    let mut rng = ChaCha8Rng::seed_from_u64(19);
    let mut ends = [0usize; 4];
    for _ in 0..20_000 {
        let mut bytes = corpus[rng.random_range(0..corpus.len())].1.clone();
        for _ in 0..rng.random_range(1..4) {
            mutate(&mut rng, &mut bytes, &corpus);
        }
        let i = match read_all(&path, &bytes) {
            End::Clean(_) => 0,
            End::Torn(_) => 1,
            End::Refused(_) => 2,
            End::Corrupt(..) => 3,
        };
        ends[i] += 1;
    }
    eprintln!("20000 mutated logs: clean/torn/refused/corrupt {ends:?}");
    // The mutations reach every way a log can end.
    assert!(
        ends.iter().all(|&n| n >= 200),
        "clean/torn/refused/corrupt: {ends:?}"
    );
}

// ---- writing the corpus ----

/// Payload bytes (the reader does not look inside a payload).
fn payload(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add(i as u8)).collect()
}

#[test]
#[ignore = "writes tests/corpus/log/; run by hand when the log format changes"]
fn write_corpus() {
    let dir = corpus_dir();
    std::fs::create_dir_all(&dir).expect("mkdir");
    let tmp = tempfile::tempdir().expect("tmp");
    let written = |records: &[(&str, Vec<u8>)]| -> Vec<u8> {
        let p = tmp.path().join("w.swlog");
        let _ = std::fs::remove_file(&p);
        let mut log = EpisodeLog::create(&p).expect("create");
        for (k, v) in records {
            log.append(k, v).expect("append");
        }
        drop(log);
        std::fs::read(&p).expect("read")
    };
    let t = "stagewise/pick-place/transition";
    let pr = "stagewise/pick-place/progress";
    let run: Vec<(&str, Vec<u8>)> = vec![
        (t, payload(1, 40)),
        (pr, payload(2, 20)),
        (t, payload(3, 40)),
        (pr, payload(4, 20)),
        (t, payload(5, 0)),
        (pr, payload(6, 300)),
        ("stagewise/pick-place/episode", payload(7, 30)),
    ];
    let ok = written(&run);
    let one = written(&run[..1]);
    let record = |key: &[u8], len: u32, body: &[u8]| -> Vec<u8> {
        [
            (key.len() as u32).to_le_bytes().to_vec(),
            key.to_vec(),
            len.to_le_bytes().to_vec(),
            body.to_vec(),
        ]
        .concat()
    };
    let files: Vec<(&str, Vec<u8>)> = vec![
        ("ok-run.swlog", ok.clone()),
        ("ok-empty.swlog", MAGIC.to_vec()),
        ("ok-one.swlog", one.clone()),
        (
            "torn-in-key-length.swlog",
            [one.clone(), vec![5, 0]].concat(),
        ),
        ("torn-in-key.swlog", ok[..ok.len() - 30 - 4 - 10].to_vec()),
        (
            "torn-in-payload-length.swlog",
            ok[..ok.len() - 30 - 2].to_vec(),
        ),
        ("torn-in-payload.swlog", ok[..ok.len() - 7].to_vec()),
        (
            "corrupt-zero-key-length.swlog",
            [one.clone(), 0u32.to_le_bytes().to_vec(), vec![1; 12]].concat(),
        ),
        (
            "corrupt-huge-key-length.swlog",
            [one.clone(), 4097u32.to_le_bytes().to_vec(), vec![b'k'; 64]].concat(),
        ),
        (
            "corrupt-key-not-utf8.swlog",
            [one.clone(), record(&[0xff, 0xfe, b'k'], 1, &[0])].concat(),
        ),
        (
            "corrupt-payload-over-limit.swlog",
            [one.clone(), record(t.as_bytes(), (256 << 20) + 1, &[0; 16])].concat(),
        ),
        (
            "bad-magic.swlog",
            [b"STAGEWISE-LOG 2\n".to_vec(), ok[MAGIC.len()..].to_vec()].concat(),
        ),
        ("bad-short.swlog", MAGIC[..9].to_vec()),
        ("bad-empty.swlog", Vec::new()),
    ];
    for (name, b) in files {
        std::fs::write(dir.join(name), b).expect("write");
    }
}
