//! The test layout itself: every crate of the workspace with `autotests = false` gathers its integration tests in
//! one binary, `tests/integration.rs`, so each `tests/*.rs` file there must be one of its modules (`mod name;`)
//! or a `[[test]]` target of its own in Cargo.toml. A file that is neither would never be compiled or run.
//! And no function in any `src/` of the workspace is longer than [`MAX_FN_LINES`] (issue 45 item 7).

use std::path::{Path, PathBuf};
use syn::visit::{self, Visit};

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

/// The longest function body (lines from its `{` to its `}`, both counted) a `src/` file may hold: a longer one
/// is an engine that wants splitting or a crate of its own (DESIGN.md, layout).
const MAX_FN_LINES: usize = 150;

/// Known offenders, as (file from the workspace root, function): none. A function that must stay long goes
/// here with a comment saying why (the test fails on an entry that is no longer long, so the list cannot go stale).
const LONG_FNS_ALLOWED: &[(&str, &str)] = &[];

/// A function over the limit: its path of names (`Type::method`, `outer::inner`, `tests::case`), the line its
/// body opens on and its length in lines.
#[derive(Debug, PartialEq)]
struct LongFn {
    name: String,
    line: usize,
    lines: usize,
}

/// Visits every fn item with a body (free, in impls, default trait methods, nested), keeping the names around it.
struct FnLengths {
    scope: Vec<String>,
    long: Vec<LongFn>,
}

impl FnLengths {
    fn check(&mut self, ident: &syn::Ident, block: &syn::Block) {
        let open = block.brace_token.span.open().start().line;
        let close = block.brace_token.span.close().end().line;
        let lines = close + 1 - open;
        if lines > MAX_FN_LINES {
            let mut name = self.scope.clone();
            name.push(ident.to_string());
            self.long.push(LongFn {
                name: name.join("::"),
                line: open,
                lines,
            });
        }
    }

    fn within(&mut self, name: String, walk: impl FnOnce(&mut Self)) {
        self.scope.push(name);
        walk(self);
        self.scope.pop();
    }
}

impl<'ast> Visit<'ast> for FnLengths {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        self.within(m.ident.to_string(), |v| visit::visit_item_mod(v, m));
    }

    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        let name = match &*i.self_ty {
            syn::Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
            _ => None,
        };
        self.within(name.unwrap_or_else(|| "impl".into()), |v| {
            visit::visit_item_impl(v, i)
        });
    }

    fn visit_item_trait(&mut self, t: &'ast syn::ItemTrait) {
        self.within(t.ident.to_string(), |v| visit::visit_item_trait(v, t));
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        self.check(&f.sig.ident, &f.block);
        self.within(f.sig.ident.to_string(), |v| visit::visit_item_fn(v, f));
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        self.check(&f.sig.ident, &f.block);
        self.within(f.sig.ident.to_string(), |v| visit::visit_impl_item_fn(v, f));
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if let Some(block) = &f.default {
            self.check(&f.sig.ident, block);
        }
        self.within(f.sig.ident.to_string(), |v| {
            visit::visit_trait_item_fn(v, f)
        });
    }
}

/// The functions of a Rust source file whose bodies are longer than [`MAX_FN_LINES`].
fn long_fns(source: &str) -> syn::Result<Vec<LongFn>> {
    let file = syn::parse_file(source)?;
    let mut v = FnLengths {
        scope: Vec::new(),
        long: Vec::new(),
    };
    v.visit_file(&file);
    Ok(v.long)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().and_then(|e| e.to_str()) == Some("rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_function_in_src_is_long() {
    let root = root();
    let mut files = Vec::new();
    for member in members() {
        rust_files(&member.join("src"), &mut files);
    }
    assert!(files.len() > 50, "src files: {}", files.len());
    let mut offenders = Vec::new();
    let mut allowed_seen = Vec::new();
    for path in &files {
        let rel = path.strip_prefix(&root).unwrap_or(path).to_string_lossy();
        let source = std::fs::read_to_string(path).expect("read a src file");
        let long = long_fns(&source).unwrap_or_else(|e| panic!("{rel}: does not parse: {e}"));
        for f in long {
            if LONG_FNS_ALLOWED.contains(&(&*rel, f.name.as_str())) {
                allowed_seen.push((rel.to_string(), f.name));
            } else {
                offenders.push(format!(
                    "{rel}:{} fn {} ({} lines)",
                    f.line, f.name, f.lines
                ));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "functions over {MAX_FN_LINES} lines (split them: DESIGN.md, layout):\n{}",
        offenders.join("\n")
    );
    for (file, name) in LONG_FNS_ALLOWED {
        assert!(
            allowed_seen.iter().any(|(f, n)| f == file && n == name),
            "{file} fn {name} is allowed to be long but is not (any more): remove it from LONG_FNS_ALLOWED"
        );
    }
}

/// A source with `fn name` whose body spans `lines` lines, after a line of its own.
fn fn_of(name: &str, lines: usize) -> String {
    let mut s = format!("// first line\nfn {name}() {{\n");
    for _ in 0..lines - 2 {
        s.push_str("    let _ = 1;\n");
    }
    s.push_str("}\n");
    s
}

#[test]
fn long_fn_checker_counts_body_lines() {
    assert_eq!(long_fns(&fn_of("ok", MAX_FN_LINES)).unwrap(), vec![]);
    assert_eq!(
        long_fns(&fn_of("too_long", MAX_FN_LINES + 1)).unwrap(),
        vec![LongFn {
            name: "too_long".into(),
            line: 2,
            lines: MAX_FN_LINES + 1,
        }]
    );
    // Methods, default trait methods and nested functions are named by what holds them.
    let body = fn_of("inner", 151).replace("// first line\n", "");
    let source = format!(
        "struct S;\nimpl S {{ {} }}\ntrait T {{ {} }}\nfn outer() {{ {} }}\nmod m {{ {} }}",
        body.replace("fn inner", "fn method"),
        body.replace("fn inner", "fn provided"),
        body,
        body.replace("fn inner", "fn in_mod"),
    );
    let names: Vec<String> = long_fns(&source)
        .unwrap()
        .into_iter()
        .map(|f| f.name)
        .collect();
    assert_eq!(
        names,
        [
            "S::method",
            "T::provided",
            "outer",
            "outer::inner",
            "m::in_mod"
        ]
    );
}
