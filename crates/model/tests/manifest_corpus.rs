//! The manifest parser against a committed corpus (issue 19 item 4): `tests/corpus/manifest/` holds the shipped
//! and test manifests as committed (`ok-*`) and hostile ones (`bad-*`: sizes that overflow or allocate without
//! bound, zero/negative/NaN/infinite values, unknown fields and kinds, duplicates, nesting thousands deep, cut or
//! foreign files). Each `ok-*` parses and each `bad-*` is refused with an error that names the file; thousands of
//! seeded mutations of them (numbers set to boundary values, lines deleted, repeated, swapped or cut, bytes
//! inserted) never panic the parser or what a loader asks of a parsed manifest next, and a manifest that parses
//! describes a window and images of a size a machine can hold.
//!
//! A bounded, deterministic run (proptest's seeded RNG) inside `cargo test`:
//! `cargo test -p stagewise-model --test integration manifest_corpus::`.

use proptest::prelude::*;
use stagewise_model::{Manifest, ModelError, ModelKind};
use std::path::{Path, PathBuf};

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/manifest")
}

fn corpus() -> &'static [(String, String)] {
    static CORPUS: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();
    CORPUS.get_or_init(|| {
        let dir = corpus_dir();
        let mut out: Vec<(String, String)> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| {
                let p = e.expect("entry").path();
                let name = p.file_name().expect("name").to_string_lossy().into_owned();
                (name, std::fs::read_to_string(&p).expect("UTF-8 text"))
            })
            .collect();
        out.sort();
        out
    })
}

/// Parses `text` and asks of the result what a loader asks next. `Ok` only for a manifest whose sizes a machine
/// can hold; an error must name the file.
fn parse(text: &str) -> Result<Manifest, ModelError> {
    let path = Path::new("/corpus/model.toml");
    match Manifest::parse(text, path) {
        Ok(m) => {
            let history = m.history_len();
            assert!(
                history >= m.frames,
                "history {history} < frames {}",
                m.frames
            );
            let _ = m.proportions();
            let _ = m.state_names();
            for k in [ModelKind::StageProgress, ModelKind::Hop, ModelKind::Policy] {
                let _ = m.expect_kind(k);
            }
            // What the runtime allocates from these: a window of `history` steps of every view's image, and the
            // state vector. A manifest asking for more than a few GiB is not one to load.
            let pixels = m
                .image
                .as_ref()
                .map_or(0, |i| u64::from(i.width) * u64::from(i.height));
            let window = (history as u64)
                .saturating_mul(m.views.len().max(1) as u64)
                .saturating_mul(pixels.saturating_mul(12));
            assert!(window < 16 << 30, "a window of {window} bytes: {m:?}");
            assert!(m.state_size < 1 << 24, "state_size {}", m.state_size);
            // A pixel policy's input row per env.
            let frames = m.pixels.as_ref().map_or(0, |p| p.len());
            assert!(frames <= 1 << 26, "a row of {frames} frame values: {m:?}");
            Ok(m)
        }
        Err(e) => {
            assert!(e.to_string().contains("/corpus/model.toml"), "{e}");
            Err(e)
        }
    }
}

#[test]
fn every_corpus_file_parses_or_is_refused_as_its_name_says() {
    let files = corpus();
    let ok = files.iter().filter(|(n, _)| n.starts_with("ok-")).count();
    let bad = files.iter().filter(|(n, _)| n.starts_with("bad-")).count();
    assert!(
        ok >= 7 && bad >= 30 && ok + bad == files.len(),
        "{ok} ok, {bad} bad of {}",
        files.len()
    );
    for (name, text) in files {
        match (name.starts_with("ok-"), parse(text)) {
            (true, Ok(_)) | (false, Err(_)) => {}
            (true, Err(e)) => panic!("{name}: {e}"),
            (false, Ok(m)) => panic!("{name} was accepted: {m:?}"),
        }
    }
}

/// Every prefix of every good manifest (cut at every character) is parsed or refused, never a panic.
#[test]
fn every_prefix_of_a_good_manifest_is_parsed_or_refused() {
    let mut prefixes = 0;
    for (_, text) in corpus().iter().filter(|(n, _)| n.starts_with("ok-")) {
        for (end, _) in text.char_indices() {
            let _ = parse(&text[..end]);
            prefixes += 1;
        }
    }
    assert!(prefixes > 4000, "{prefixes} prefixes");
}

/// One edit of a manifest's text.
#[derive(Debug, Clone)]
enum Edit {
    /// The n-th number in the text becomes this value.
    Number(prop::sample::Index, &'static str),
    DeleteLine(prop::sample::Index),
    RepeatLine(prop::sample::Index),
    SwapLines(prop::sample::Index, prop::sample::Index),
    /// These characters inserted at a character boundary.
    Insert(prop::sample::Index, String),
    Cut(prop::sample::Index),
    /// A line of another corpus file inserted.
    Graft(
        prop::sample::Index,
        prop::sample::Index,
        prop::sample::Index,
    ),
}

const NUMBERS: &[&str] = &[
    "0",
    "-1",
    "1",
    "2",
    "3",
    "4096",
    "65536",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "-9223372036854775808",
    "1e308",
    "-1e308",
    "1e-320",
    "nan",
    "inf",
    "-inf",
    "0.0",
    "-0.0",
    "1.5",
    "\"4\"",
    "[]",
    "{}",
    "true",
];

fn edit() -> impl Strategy<Value = Edit> {
    let ix = any::<prop::sample::Index>;
    prop_oneof![
        4 => (ix(), prop::sample::select(NUMBERS)).prop_map(|(i, v)| Edit::Number(i, v)),
        2 => ix().prop_map(Edit::DeleteLine),
        1 => ix().prop_map(Edit::RepeatLine),
        1 => (ix(), ix()).prop_map(|(a, b)| Edit::SwapLines(a, b)),
        2 => (ix(), "[\\[\\]{}=\",.#a-z0-9\n ]{1,6}").prop_map(|(i, s)| Edit::Insert(i, s)),
        1 => ix().prop_map(Edit::Cut),
        1 => (ix(), ix(), ix()).prop_map(|(a, f, l)| Edit::Graft(a, f, l)),
    ]
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let mut text = text.to_string();
    for e in edits {
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        match e {
            Edit::Number(i, v) => {
                // Numbers: runs of digits (with a sign, point or exponent) that follow `= `, `[` or `, `.
                let spans: Vec<(usize, usize)> = number_spans(&text);
                if !spans.is_empty() {
                    let (a, b) = spans[i.index(spans.len())];
                    text.replace_range(a..b, v);
                }
                continue;
            }
            Edit::DeleteLine(i) if !lines.is_empty() => {
                lines.remove(i.index(lines.len()));
            }
            Edit::RepeatLine(i) if !lines.is_empty() => {
                let at = i.index(lines.len());
                let l = lines[at].clone();
                lines.insert(at, l);
            }
            Edit::SwapLines(a, b) if !lines.is_empty() => {
                let (a, b) = (a.index(lines.len()), b.index(lines.len()));
                lines.swap(a, b);
            }
            Edit::Insert(i, s) => {
                let cuts: Vec<usize> = text
                    .char_indices()
                    .map(|(c, _)| c)
                    .chain([text.len()])
                    .collect();
                text.insert_str(cuts[i.index(cuts.len())], s);
                continue;
            }
            Edit::Cut(i) => {
                let cuts: Vec<usize> = text
                    .char_indices()
                    .map(|(c, _)| c)
                    .chain([text.len()])
                    .collect();
                text.truncate(cuts[i.index(cuts.len())]);
                continue;
            }
            Edit::Graft(a, f, l) => {
                let other: Vec<&str> = corpus()[f.index(corpus().len())].1.lines().collect();
                if !other.is_empty() {
                    let line = other[l.index(other.len())].to_string();
                    lines.insert(a.index(lines.len() + 1), line);
                }
            }
            _ => {}
        }
        text = lines.join("\n");
        text.push('\n');
    }
    text
}

/// Byte spans of the numbers in `text` (digits with an optional sign, point and exponent).
fn number_spans(text: &str) -> Vec<(usize, usize)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let starts =
            b[i].is_ascii_digit() && (i == 0 || matches!(b[i - 1], b' ' | b'[' | b'-' | b'='));
        if starts {
            let a = if i > 0 && b[i - 1] == b'-' { i - 1 } else { i };
            let mut j = i;
            while j < b.len()
                && (b[j].is_ascii_digit() || matches!(b[j], b'.' | b'e' | b'E' | b'_'))
            {
                j += 1;
            }
            out.push((a, j));
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

proptest! {
    // 3000 mutated manifests (about a second in a debug build); proptest's RNG is seeded: the same run each time.
    #![proptest_config(ProptestConfig { cases: 3000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn mutated_manifests_never_panic_the_parser(
        which in any::<prop::sample::Index>(),
        edits in proptest::collection::vec(edit(), 1..5),
    ) {
        let base = &corpus()[which.index(corpus().len())].1;
        let _ = parse(&apply(base, &edits));
    }
}
