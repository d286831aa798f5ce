//! Files that survive a crash or a power cut. Every file the crate writes goes to a temporary name beside its
//! target (`<name>.tmp`), is fsynced, renamed over the target, and the directory is fsynced after the rename (so
//! the rename itself is on disk). A reader sees the previous file or the whole new one, never half a file; a
//! write that fails removes its temporary file and leaves the previous file as it was.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::{io_err, DatasetError, Result};

/// The temporary name a file is written under before it is renamed to `path`: `<name>.tmp` in the same
/// directory (a rename across directories would not be atomic).
pub fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Creates the temporary file for `path` (and `path`'s directory).
pub(crate) fn create_temp(path: &Path) -> Result<(PathBuf, File)> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io_err(parent))?;
    }
    let tmp = temp_path(path);
    let f = File::create(&tmp).map_err(io_err(&tmp))?;
    Ok((tmp, f))
}

/// fsyncs `file` (written at `tmp`), renames it to `path` and fsyncs `path`'s directory.
pub(crate) fn commit(tmp: &Path, file: File, path: &Path) -> Result<()> {
    file.sync_all().map_err(io_err(tmp))?;
    drop(file);
    std::fs::rename(tmp, path).map_err(|source| DatasetError::Rename {
        from: tmp.to_owned(),
        path: path.to_owned(),
        source,
    })?;
    sync_dir(parent_of(path))
}

/// Writes `path` durably: `write` fills the temporary file, then [`commit`]. When `write` (or the commit) fails
/// the temporary file is removed and a previous file at `path` is untouched.
pub fn write_atomic(path: &Path, write: impl FnOnce(&mut File) -> Result<()>) -> Result<()> {
    let (tmp, mut f) = create_temp(path)?;
    let done = write(&mut f).and_then(|()| commit(&tmp, f, path));
    if done.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    done
}

/// Writes `bytes` to `path` durably ([`write_atomic`]).
pub fn write_bytes(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic(path, |f| {
        std::io::Write::write_all(f, bytes).map_err(io_err(temp_path(path)))
    })
}

fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// fsyncs a directory, so the names created, renamed or removed in it are on disk (a no-op where directories
/// cannot be opened as files, i.e. off Unix).
pub fn sync_dir(dir: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io_err(dir))?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// fsyncs each of `dirs` and every directory above them up to and including `top`'s parent, each once:
/// directories made by `create_dir_all` are only on disk once their parents are.
pub(crate) fn sync_dirs_up_to(dirs: &[PathBuf], top: &Path) -> Result<()> {
    let mut todo: Vec<&Path> = Vec::new();
    for dir in dirs {
        let mut d = Some(dir.as_path());
        while let Some(cur) = d {
            if !todo.contains(&cur) {
                todo.push(cur);
            }
            if cur == top {
                break;
            }
            d = cur.parent().filter(|p| !p.as_os_str().is_empty());
        }
    }
    let above = parent_of(top);
    if !todo.contains(&above) {
        todo.push(above);
    }
    todo.into_iter().try_for_each(sync_dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_replaced_whole_and_a_failed_write_keeps_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/x.json");
        write_bytes(&path, b"first").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"first");
        assert!(!temp_path(&path).exists(), "the temporary file is renamed");
        write_bytes(&path, b"second").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        // A write that fails half way: the old file stays, the temporary file is gone, the error is the writer's.
        let err = write_atomic(&path, |f| {
            std::io::Write::write_all(f, b"half").unwrap();
            Err(DatasetError::Input("stopped half way".into()))
        })
        .unwrap_err();
        assert!(err.to_string().contains("stopped half way"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        assert!(!temp_path(&path).exists());
        assert_eq!(temp_path(&path), dir.path().join("sub/x.json.tmp"));
        sync_dirs_up_to(&[dir.path().join("sub")], dir.path()).unwrap();
        // A directory that does not exist is an error naming it.
        let e = sync_dir(&dir.path().join("nope")).unwrap_err();
        assert!(e.to_string().contains("nope"), "{e}");
    }
}
