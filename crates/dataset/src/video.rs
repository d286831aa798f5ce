//! Video feature columns (cargo feature `video`): frames decoded by an `ffmpeg` subprocess.

use std::path::Path;
use std::process::{Command, Stdio};

use image::RgbImage;

use crate::error::{DatasetError, Result};

/// Decodes `frames` RGB frames of `width x height` starting at `from_timestamp` seconds of `path`.
pub fn decode_frames(
    path: &Path,
    column: &str,
    from_timestamp: f64,
    frames: usize,
    width: u32,
    height: u32,
) -> Result<Vec<RgbImage>> {
    let err = |reason: String| DatasetError::Video {
        path: path.to_owned(),
        column: column.to_owned(),
        reason,
    };
    if !path.exists() {
        return Err(err("video file does not exist".into()));
    }
    let output = Command::new("ffmpeg")
        .args(["-v", "error", "-nostdin", "-ss"])
        .arg(format!("{from_timestamp:.6}"))
        .arg("-i")
        .arg(path)
        .args([
            "-frames:v",
            &frames.to_string(),
            "-f",
            "rawvideo",
            "-pix_fmt",
            "rgb24",
            "-s",
        ])
        .arg(format!("{width}x{height}"))
        .arg("-")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            err(format!(
                "cannot run `ffmpeg` (is it installed and on PATH?): {e}"
            ))
        })?;
    if !output.status.success() {
        return Err(err(format!(
            "ffmpeg failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    let size = width as usize * height as usize * 3;
    let got = output.stdout.len() / size.max(1);
    if got < frames {
        return Err(err(format!(
            "ffmpeg decoded {got} frames from {from_timestamp}s, the episode has {frames}"
        )));
    }
    output
        .stdout
        .chunks_exact(size)
        .take(frames)
        .map(|c| {
            RgbImage::from_raw(width, height, c.to_vec())
                .ok_or_else(|| err("bad frame buffer".into()))
        })
        .collect()
}
