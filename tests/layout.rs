//! The test layout itself: every crate of the workspace with `autotests = false` gathers its integration tests in
//! one binary, `tests/integration.rs`, so each `tests/*.rs` file there must be one of its modules (`mod name;`)
//! or a `[[test]]` target of its own in Cargo.toml. A file that is neither would never be compiled or run.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The workspace members' directories, from the root Cargo.toml's `members = [...]`, and the root itself.
fn members() -> Vec<PathBuf> {
    let text = std::fs::read_to_string(root().join("Cargo.toml")).expect("root Cargo.toml");
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .expect("a `members = [...]` line in the root Cargo.toml");
    let list = &line[line.find('[').expect("[") + 1..line.rfind(']').expect("]")];
    let mut dirs: Vec<PathBuf> = list
        .split(',')
        .map(|m| m.trim().trim_matches('"'))
        .filter(|m| !m.is_empty())
        .map(|m| root().join(m))
        .collect();
    dirs.push(root());
    dirs
}

/// The `tests/*.rs` files of a crate that neither `tests/integration.rs` declares nor Cargo.toml names.
fn strays(dir: &Path) -> Vec<String> {
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).expect("Cargo.toml");
    if !manifest.lines().any(|l| l.trim() == "autotests = false") {
        return Vec::new();
    }
    let tests = dir.join("tests");
    let integration = std::fs::read_to_string(tests.join("integration.rs"))
        .unwrap_or_else(|e| panic!("{}: autotests = false but {e}", dir.display()));
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&tests).expect("tests dir") {
        let path = entry.expect("entry").path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if path.extension().and_then(|e| e.to_str()) != Some("rs") || stem == "integration" {
            continue;
        }
        let declared = integration
            .lines()
            .any(|l| l.trim() == format!("mod {stem};"));
        let own_target = manifest.contains(&format!("path = \"tests/{stem}.rs\""));
        if !declared && !own_target {
            out.push(path.display().to_string());
        }
    }
    out
}

#[test]
fn every_test_file_is_compiled() {
    let members = members();
    assert!(members.len() > 5, "members: {members:?}");
    let strays: Vec<String> = members.iter().flat_map(|d| strays(d)).collect();
    assert!(
        strays.is_empty(),
        "test files that no test target compiles (declare them as `mod name;` in their tests/integration.rs): {strays:?}"
    );
}
