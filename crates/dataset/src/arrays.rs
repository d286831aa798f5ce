//! The training arrays of a stage-aware progress model, as `python -m stagewise.training train-dataset` reads them
//! (`stagewise train` / `adapt` write them; `--prepare-only` stops there): one directory of numpy `.npy` files
//! (format 1.0, C order, little-endian) and a `meta.json`:
//!
//! - `frames.npy`: `u8 [N, views, height, width, 3]`, written episode by episode as frames are decoded;
//! - `state.npy`: `f32 [N, state fields]`; `stage.npy`: `i64 [N]`; `tau.npy`: `f32 [N]`;
//! - `meta.json`: what the caller says (datasets, views, stages, episodes and their offsets).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::error::{io_err, DatasetError, Result};

/// The `.npy` header (format 1.0) of a C-order array of numpy type `descr` (e.g. `|u1`, `<f4`, `<i8`).
pub fn npy_header(descr: &str, shape: &[usize]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape = if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    };
    let mut h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    // magic (6) + version (2) + length (2) + header, padded with spaces to a multiple of 64, ending in '\n'.
    while (10 + h.len() + 1) % 64 != 0 {
        h.push(' ');
    }
    h.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(h.len() as u16).to_le_bytes());
    out.extend_from_slice(h.as_bytes());
    out
}

/// Writes a whole `.npy` file: header, then `bytes` (the array's data, little-endian, C order).
pub fn write_npy(path: &Path, descr: &str, shape: &[usize], bytes: &[u8]) -> Result<()> {
    let mut f = BufWriter::new(File::create(path).map_err(io_err(path))?);
    f.write_all(&npy_header(descr, shape))
        .and_then(|()| f.write_all(bytes))
        .and_then(|()| f.flush())
        .map_err(io_err(path))
}

fn le_bytes<T: Copy, const N: usize>(v: &[T], to: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    v.iter().flat_map(|&x| to(x)).collect()
}

/// A training-array directory being written (module doc): frames stream to `frames.npy`; state and targets are
/// kept until [`TrainingArrays::finish`].
pub struct TrainingArrays {
    dir: PathBuf,
    frames_path: PathBuf,
    frames: BufWriter<File>,
    /// Frames `frames.npy`'s header announces, and frames pushed so far.
    total: usize,
    pushed: usize,
    frame_bytes: usize,
    state_dim: usize,
    state: Vec<f32>,
    stage: Vec<i64>,
    tau: Vec<f32>,
}

impl TrainingArrays {
    /// Replaces `dir` (removed if it exists) by a new directory for `total` frames of `views` cameras at
    /// `width x height` and `state_dim` state fields, and writes `frames.npy`'s header.
    pub fn create(
        dir: &Path,
        total: usize,
        views: usize,
        (width, height): (u32, u32),
        state_dim: usize,
    ) -> Result<Self> {
        if dir.exists() {
            std::fs::remove_dir_all(dir).map_err(io_err(dir))?;
        }
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        let frames_path = dir.join("frames.npy");
        let mut frames = BufWriter::new(File::create(&frames_path).map_err(io_err(&frames_path))?);
        let (h, w) = (height as usize, width as usize);
        frames
            .write_all(&npy_header("|u1", &[total, views, h, w, 3]))
            .map_err(io_err(&frames_path))?;
        Ok(Self {
            dir: dir.to_owned(),
            frames_path,
            frames,
            total,
            pushed: 0,
            frame_bytes: views * h * w * 3,
            state_dim,
            state: Vec::with_capacity(total * state_dim),
            stage: Vec::with_capacity(total),
            tau: Vec::with_capacity(total),
        })
    }

    /// Appends one episode of `stage.len()` frames: its pixels (per frame, every view's `height x width x 3`
    /// bytes in view order), state rows and targets.
    pub fn push(&mut self, pixels: &[u8], state: &[f32], stage: &[i64], tau: &[f32]) -> Result<()> {
        let n = stage.len();
        let sizes = [
            ("pixels", pixels.len(), n * self.frame_bytes),
            ("state", state.len(), n * self.state_dim),
            ("tau", tau.len(), n),
        ];
        if let Some((what, got, want)) = sizes.into_iter().find(|(_, got, want)| got != want) {
            return Err(self.mismatch(format!(
                "an episode of {n} frames came with {got} {what} values, expected {want}"
            )));
        }
        if self.pushed + n > self.total {
            return Err(self.mismatch(format!(
                "{} frames pushed, the array holds {}",
                self.pushed + n,
                self.total
            )));
        }
        self.frames
            .write_all(pixels)
            .map_err(io_err(&self.frames_path))?;
        self.state.extend_from_slice(state);
        self.stage.extend_from_slice(stage);
        self.tau.extend_from_slice(tau);
        self.pushed += n;
        Ok(())
    }

    /// Closes `frames.npy`, writes `state.npy`, `tau.npy`, `stage.npy` and `meta` as `meta.json`.
    pub fn finish(mut self, meta: &serde_json::Value) -> Result<()> {
        if self.pushed != self.total {
            return Err(self.mismatch(format!(
                "{} frames pushed, the array holds {}",
                self.pushed, self.total
            )));
        }
        self.frames.flush().map_err(io_err(&self.frames_path))?;
        drop(self.frames);
        let (dir, total) = (&self.dir, self.total);
        write_npy(
            &dir.join("state.npy"),
            "<f4",
            &[total, self.state_dim],
            &le_bytes(&self.state, f32::to_le_bytes),
        )?;
        write_npy(
            &dir.join("tau.npy"),
            "<f4",
            &[total],
            &le_bytes(&self.tau, f32::to_le_bytes),
        )?;
        write_npy(
            &dir.join("stage.npy"),
            "<i8",
            &[total],
            &le_bytes(&self.stage, i64::to_le_bytes),
        )?;
        let path = dir.join("meta.json");
        let text = serde_json::to_string_pretty(meta).map_err(|source| DatasetError::Json {
            path: path.clone(),
            source,
        })?;
        std::fs::write(&path, text).map_err(io_err(&path))
    }

    fn mismatch(&self, reason: String) -> DatasetError {
        DatasetError::Field {
            path: self.frames_path.clone(),
            field: "frames".into(),
            reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npy_headers_are_aligned() {
        let h = npy_header("|u1", &[10, 3, 32, 32, 3]);
        assert_eq!(h.len() % 64, 0);
        assert!(h.starts_with(b"\x93NUMPY\x01\x00"));
        assert!(String::from_utf8_lossy(&h).contains("'shape': (10, 3, 32, 32, 3)"));
        assert!(String::from_utf8_lossy(&npy_header("<f4", &[7])).contains("(7,)"));
    }

    #[test]
    fn arrays_hold_every_pushed_frame() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("stale.npy"), b"old").unwrap();
        let mut a = TrainingArrays::create(&dir, 3, 2, (4, 2), 1).unwrap();
        assert!(
            !dir.join("stale.npy").exists(),
            "the old directory is replaced"
        );
        let px = vec![7u8; 2 * 2 * 4 * 2 * 3];
        a.push(&px, &[0.5, 1.5], &[0, 1], &[0.25, 1.0]).unwrap();
        assert!(
            a.push(&px, &[0.5], &[0], &[0.5]).is_err(),
            "pixels of two frames for one"
        );
        a.push(&px[..48], &[2.5], &[1], &[1.0]).unwrap();
        a.finish(&serde_json::json!({"views": ["a", "b"]})).unwrap();
        let len = |f: &str| std::fs::metadata(dir.join(f)).unwrap().len() as usize;
        let header = |d: &str, shape: &[usize]| npy_header(d, shape).len();
        assert_eq!(len("frames.npy"), header("|u1", &[3, 2, 2, 4, 3]) + 3 * 48);
        assert_eq!(len("state.npy"), header("<f4", &[3, 1]) + 3 * 4);
        assert_eq!(len("stage.npy"), header("<i8", &[3]) + 3 * 8);
        let tau = std::fs::read(dir.join("tau.npy")).unwrap();
        let h = header("<f4", &[3]);
        assert_eq!(&tau[h..h + 4], &0.25f32.to_le_bytes());
        let meta: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("meta.json")).unwrap()).unwrap();
        assert_eq!(meta["views"][1], "b");
    }

    #[test]
    fn missing_frames_are_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        let a = TrainingArrays::create(tmp.path(), 2, 1, (2, 2), 0).unwrap();
        let err = a.finish(&serde_json::json!({})).unwrap_err();
        assert!(
            err.to_string()
                .contains("0 frames pushed, the array holds 2"),
            "{err}"
        );
    }
}
