//! LeRobot `video` features: MP4 files under `videos/<key>/chunk-NNN/file-NNN.mp4`, written and read through an
//! `ffmpeg` subprocess (the distribution's ffmpeg, installed by `scripts/setup.sh`). Nothing is linked: the crate
//! builds without libav, and the program is needed only when a dataset has video features.
//!
//! What LeRobot does (huggingface/lerobot, `src/lerobot/...`), and so what this module does:
//! - Encoder defaults (`configs/video.py` `VideoEncoderConfig`): `libsvtav1`, `yuv420p`, GOP `g = 2`, `crf = 30`,
//!   `preset = 12`, `fast_decode = 0` (`svtav1-params fast-decode=0`). The stream's canonical codec name goes to
//!   `features.<key>.info["video.codec"]` (`av1`), the encoder fields to `video.g`, `video.crf`, ...
//!   (`get_video_info`).
//! - The episodes of one camera follow each other in one file until it passes `video_files_size_in_mb`; an
//!   episode's `videos/<key>/from_timestamp` is the duration of the file before it and `to_timestamp` is
//!   `from_timestamp` + its duration (`dataset_writer.py` `_save_episode_video`).
//! - The frame of a data row with timestamp `ts` is the decoded frame nearest `from_timestamp + ts`; farther than
//!   `tolerance_s` (1e-4 s by default) is an error (`dataset_reader.py` `_query_videos`,
//!   `video_utils.py` `decode_video_frames_pyav`).
//!
//! SVT-AV1 (1.4, Debian 12) refuses frames under 64x64; smaller frames are encoded to AV1 with `libaom-av1`
//! (realtime usage, `cpu-used 8`), and when ffmpeg has no AV1 encoder at all, to H.264 (`libx264`), with a warning.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;

use image::RgbImage;

use crate::error::{io_err, DatasetError, Result, FFMPEG_INSTALL_HINT};

/// LeRobot's default `tolerance_s`: how far the nearest decoded frame may be from a row's timestamp.
pub const VIDEO_TOLERANCE_S: f64 = 1e-4;
/// Names the ffmpeg program to run (default: `ffmpeg` on `PATH`).
pub const FFMPEG_ENV: &str = "STAGEWISE_FFMPEG";

/// The codec of written videos.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VideoCodec {
    /// AV1, LeRobot's default (`libsvtav1`, or `libaom-av1` for frames under 64x64).
    Av1,
    /// H.264 (`libx264`).
    H264,
}

impl std::str::FromStr for VideoCodec {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "av1" => Ok(Self::Av1),
            "h264" => Ok(Self::H264),
            _ => Err(format!("unknown video codec {s:?} (av1 or h264)")),
        }
    }
}

impl std::fmt::Display for VideoCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Av1 => "av1",
            Self::H264 => "h264",
        })
    }
}

/// How [`crate::DatasetWriter`] encodes its cameras when they are stored as video.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VideoSettings {
    pub codec: VideoCodec,
    /// Constant-quality factor (LeRobot's default 30; lower is better and larger).
    pub crf: u32,
    /// Keyframe interval in frames (LeRobot's default 2: any frame is at most one frame from a keyframe).
    pub gop: u32,
}

impl Default for VideoSettings {
    fn default() -> Self {
        Self {
            codec: VideoCodec::Av1,
            crf: 30,
            gop: 2,
        }
    }
}

/// The ffmpeg encoder chosen for a camera, its arguments and the `info` block LeRobot keeps in info.json.
#[derive(Debug, Clone, PartialEq)]
pub struct VideoEncoding {
    /// ffmpeg encoder name (`libsvtav1`, `libaom-av1`, `libx264`).
    pub encoder: String,
    /// The stream's codec (`av1`, `h264`), as LeRobot's `video.codec`.
    pub codec: VideoCodec,
    /// Why the encoder differs from what was asked for (e.g. H.264 because ffmpeg has no AV1 encoder).
    pub note: Option<String>,
    args: Vec<String>,
    preset: Option<u32>,
    settings: VideoSettings,
}

impl VideoEncoding {
    /// `features.<key>.info` for a camera of `width x height` at `fps` (LeRobot's `get_video_info` keys, plus
    /// `video.encoder`, the ffmpeg encoder that wrote the file).
    pub fn info(&self, width: u32, height: u32, fps: u32) -> serde_json::Value {
        serde_json::json!({
            "video.height": height,
            "video.width": width,
            "video.codec": self.codec.to_string(),
            "video.pix_fmt": "yuv420p",
            "video.fps": fps,
            "video.channels": 3,
            "has_audio": false,
            "video.g": self.settings.gop,
            "video.crf": self.settings.crf,
            "video.preset": self.preset,
            "video.fast_decode": 0,
            "video.extra_options": {},
            "video.encoder": self.encoder,
            "is_depth_map": false,
        })
    }
}

struct Ffmpeg {
    program: PathBuf,
    encoders: Vec<String>,
}

/// The ffmpeg program ([`FFMPEG_ENV`] or `ffmpeg`).
pub fn ffmpeg_program() -> PathBuf {
    std::env::var_os(FFMPEG_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("ffmpeg"))
}

/// Runs `ffmpeg -encoders` once per program and keeps the list.
fn ffmpeg() -> Result<Arc<Ffmpeg>> {
    static CACHE: OnceLock<Mutex<HashMap<PathBuf, Arc<Ffmpeg>>>> = OnceLock::new();
    let program = ffmpeg_program();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(f) = cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&program)
    {
        return Ok(f.clone());
    }
    let tool_err = |reason: String| DatasetError::VideoTool {
        program: program.clone(),
        reason,
    };
    let out = Command::new(&program)
        .args(["-hide_banner", "-encoders"])
        .stdin(Stdio::null())
        .output()
        .map_err(|source| DatasetError::VideoToolSpawn {
            program: program.clone(),
            source,
        })?;
    if !out.status.success() {
        return Err(tool_err(format!(
            "`-encoders` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let encoders = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let flags = it.next()?;
            let name = it.next()?;
            (flags.len() == 6 && flags.starts_with('V')).then(|| name.to_owned())
        })
        .collect();
    let f = Arc::new(Ffmpeg {
        program: program.clone(),
        encoders,
    });
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(program, f.clone());
    Ok(f)
}

/// Whether ffmpeg runs (the error says what is missing and how to install it).
pub fn check_ffmpeg() -> Result<()> {
    ffmpeg().map(|_| ())
}

/// Picks the encoder for `settings` and frames of `width x height`: AV1 with `libsvtav1` (LeRobot's default),
/// `libaom-av1` for frames under 64x64 (SVT-AV1's minimum) or when SVT-AV1 is missing, H.264 when ffmpeg has no
/// AV1 encoder (with a note saying so). Frames must have an even width and height (`yuv420p`).
pub fn choose_encoding(settings: VideoSettings, width: u32, height: u32) -> Result<VideoEncoding> {
    let ff = ffmpeg()?;
    if !width.is_multiple_of(2) || !height.is_multiple_of(2) || width == 0 || height == 0 {
        return Err(DatasetError::Input(format!(
            "video cameras need an even, non-zero width and height (yuv420p, as LeRobot writes): got {width}x{height}"
        )));
    }
    let has = |e: &str| ff.encoders.iter().any(|x| x == e);
    let crf = settings.crf.to_string();
    let gop = settings.gop.max(1).to_string();
    let mk = |encoder: &str, codec, args: Vec<&str>, preset, note: Option<String>| VideoEncoding {
        encoder: encoder.to_owned(),
        codec,
        note,
        args: args.into_iter().map(str::to_owned).collect(),
        preset,
        settings,
    };
    let h264 = |note| {
        mk(
            "libx264",
            VideoCodec::H264,
            vec!["-c:v", "libx264", "-crf", &crf, "-g", &gop],
            None,
            note,
        )
    };
    match settings.codec {
        VideoCodec::Av1 if has("libsvtav1") && width >= 64 && height >= 64 => Ok(mk(
            "libsvtav1",
            VideoCodec::Av1,
            vec![
                "-c:v",
                "libsvtav1",
                "-preset",
                "12",
                "-crf",
                &crf,
                "-g",
                &gop,
                "-svtav1-params",
                "fast-decode=0",
            ],
            Some(12),
            None,
        )),
        VideoCodec::Av1 if has("libaom-av1") => Ok(mk(
            "libaom-av1",
            VideoCodec::Av1,
            vec![
                "-c:v",
                "libaom-av1",
                "-crf",
                &crf,
                "-b:v",
                "0",
                "-g",
                &gop,
                "-usage",
                "realtime",
                "-cpu-used",
                "8",
                "-row-mt",
                "1",
            ],
            None,
            (has("libsvtav1")).then(|| {
                format!("libaom-av1 instead of libsvtav1: SVT-AV1 needs frames of at least 64x64, these are {width}x{height}")
            }),
        )),
        VideoCodec::Av1 if has("libx264") => Ok(h264(Some(format!(
            "H.264 instead of AV1: {} has neither libsvtav1 nor libaom-av1",
            ff.program.display()
        )))),
        VideoCodec::H264 if has("libx264") => Ok(h264(None)),
        _ => Err(DatasetError::VideoTool {
            program: ff.program.clone(),
            reason: format!(
                "has no encoder for {} (looked for libsvtav1, libaom-av1, libx264); {FFMPEG_INSTALL_HINT}",
                settings.codec
            ),
        }),
    }
}

/// A running ffmpeg encoder: raw RGB frames in (stdin), an MP4 out, written under its temporary name
/// ([`crate::durable::temp_path`]) and renamed into place by [`VideoEncoder::finish`].
pub(crate) struct VideoEncoder {
    child: Child,
    stdin: Option<ChildStdin>,
    stderr: Option<JoinHandle<Vec<u8>>>,
    pub(crate) tmp: PathBuf,
    pub(crate) path: PathBuf,
    pub(crate) frames: u64,
    column: String,
    width: u32,
    height: u32,
}

impl VideoEncoder {
    pub(crate) fn start(
        enc: &VideoEncoding,
        column: &str,
        path: &Path,
        width: u32,
        height: u32,
        fps: u32,
    ) -> Result<Self> {
        let ff = ffmpeg()?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io_err(parent))?;
        }
        let tmp = crate::durable::temp_path(path);
        let mut child = Command::new(&ff.program)
            .args(["-hide_banner", "-nostdin", "-nostats", "-loglevel", "error"])
            .args(["-y", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s"])
            .arg(format!("{width}x{height}"))
            .args(["-r", &fps.to_string(), "-i", "-", "-an"])
            .args(&enc.args)
            .args(["-pix_fmt", "yuv420p", "-f", "mp4"])
            .arg(&tmp)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| DatasetError::VideoToolSpawn {
                program: ff.program.clone(),
                source,
            })?;
        let stdin = child.stdin.take();
        let stderr = child.stderr.take().map(|mut s| {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let _ = s.read_to_end(&mut buf);
                buf
            })
        });
        Ok(Self {
            child,
            stdin,
            stderr,
            tmp,
            path: path.to_owned(),
            frames: 0,
            column: column.to_owned(),
            width,
            height,
        })
    }

    fn fail(&mut self, what: String) -> DatasetError {
        drop(self.stdin.take());
        let status = self.child.wait().ok();
        let log = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        let _ = std::fs::remove_file(&self.tmp);
        DatasetError::Video {
            path: self.path.clone(),
            column: self.column.clone(),
            reason: format!(
                "{what}; ffmpeg {}: {}",
                status.map_or_else(|| "did not exit".to_string(), |s| s.to_string()),
                String::from_utf8_lossy(&log).trim()
            ),
        }
    }

    pub(crate) fn write(&mut self, frame: &RgbImage) -> Result<()> {
        if frame.dimensions() != (self.width, self.height) {
            return Err(DatasetError::Input(format!(
                "{}: frame is {}x{}, the video is {}x{}",
                self.path.display(),
                frame.width(),
                frame.height(),
                self.width,
                self.height
            )));
        }
        let res = match self.stdin.as_mut() {
            Some(s) => s.write_all(frame.as_raw()),
            None => Err(std::io::Error::other("encoder input closed")),
        };
        match res {
            Ok(()) => {
                self.frames += 1;
                Ok(())
            }
            Err(e) => Err(self.fail(format!("writing frame {} to the encoder: {e}", self.frames))),
        }
    }

    /// Bytes of the file written so far.
    pub(crate) fn bytes_written(&self) -> u64 {
        std::fs::metadata(&self.tmp).map(|m| m.len()).unwrap_or(0)
    }

    /// Ends the stream, waits for ffmpeg, fsyncs the file and renames it into place.
    pub(crate) fn finish(mut self) -> Result<()> {
        drop(self.stdin.take());
        let status = self.child.wait().map_err(io_err(&self.tmp))?;
        let log = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        if !status.success() {
            let _ = std::fs::remove_file(&self.tmp);
            return Err(DatasetError::Video {
                path: self.path.clone(),
                column: self.column.clone(),
                reason: format!(
                    "encoding {} frames failed (ffmpeg {status}): {}",
                    self.frames,
                    String::from_utf8_lossy(&log).trim()
                ),
            });
        }
        let f = std::fs::File::open(&self.tmp).map_err(io_err(&self.tmp))?;
        crate::durable::commit(&self.tmp, f, &self.path)
    }
}

impl Drop for VideoEncoder {
    fn drop(&mut self) {
        // An encoder dropped without finish (an error elsewhere): stop ffmpeg, keep no half file.
        if self.stdin.is_some() {
            drop(self.stdin.take());
            let _ = self.child.kill();
            let _ = self.child.wait();
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Where a read is (for error messages).
#[derive(Debug, Clone, Copy)]
pub struct FrameQuery<'a> {
    pub column: &'a str,
    pub episode: usize,
    /// `from_timestamp` of the episode in this file.
    pub from_timestamp: f64,
    /// The episode's `timestamp` column, seconds from its start.
    pub timestamps: &'a [f32],
    pub fps: u32,
    pub width: u32,
    pub height: u32,
    pub tolerance_s: f64,
}

/// Decodes the frames of one episode from `path`: for row `i`, the decoded frame nearest
/// `from_timestamp + timestamps[i]`, which must be within `tolerance_s` (LeRobot's rule). Errors name the file,
/// the column, the episode, the frame and the timestamp.
pub fn decode_frames(path: &Path, q: &FrameQuery) -> Result<Vec<RgbImage>> {
    let want: Vec<Wanted> = q
        .timestamps
        .iter()
        .enumerate()
        .map(|(frame, &t)| Wanted {
            episode: q.episode,
            frame,
            time: q.from_timestamp + f64::from(t),
        })
        .collect();
    decode_wanted(
        path,
        q.column,
        &want,
        q.fps,
        q.width,
        q.height,
        q.tolerance_s,
    )
}

/// One frame to decode: the row (`episode`, `frame`) and its time in the file.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wanted {
    pub episode: usize,
    pub frame: usize,
    pub time: f64,
}

/// [`decode_frames`] for any rows of one file (of one or several episodes), in one ffmpeg run.
pub(crate) fn decode_wanted(
    path: &Path,
    column: &str,
    wanted: &[Wanted],
    fps: u32,
    width: u32,
    height: u32,
    tolerance_s: f64,
) -> Result<Vec<RgbImage>> {
    let video_err = |reason: String| DatasetError::Video {
        path: path.to_owned(),
        column: column.to_owned(),
        reason,
    };
    let Some(w0) = wanted.first() else {
        return Ok(Vec::new());
    };
    let episodes = match wanted.last() {
        Some(w1) if w1.episode != w0.episode => format!("episodes {}-{}", w0.episode, w1.episode),
        _ => format!("episode {}", w0.episode),
    };
    if !path.is_file() {
        return Err(video_err(format!(
            "the video file does not exist ({episodes})"
        )));
    }
    let want: Vec<f64> = wanted.iter().map(|w| w.time).collect();
    let first = want.iter().copied().fold(f64::INFINITY, f64::min);
    let last = want.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let fps = f64::from(fps.max(1));
    // Seek a frame early (accurate seeking drops frames before the seek point) and decode a few frames past the
    // last one wanted; `-copyts` keeps the file's own timestamps.
    let seek = (first - 1.0 / fps).max(0.0);
    let count = ((last - seek) * fps).ceil().max(0.0) as u64 + 3;
    let ff = ffmpeg()?;
    let mut child = Command::new(&ff.program)
        .args(["-hide_banner", "-nostdin", "-nostats", "-loglevel", "info"])
        .args(["-copyts", "-ss"])
        .arg(format!("{seek:.6}"))
        .arg("-i")
        .arg(path)
        .args([
            "-map",
            "0:v:0",
            "-vf",
            "showinfo",
            "-fps_mode",
            "passthrough",
        ])
        .args(["-frames:v", &count.to_string()])
        .args(["-f", "rawvideo", "-pix_fmt", "rgb24", "-"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| DatasetError::VideoToolSpawn {
            program: ff.program.clone(),
            source,
        })?;
    let stderr = child.stderr.take().map(|mut s| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = s.read_to_end(&mut buf);
            buf
        })
    });
    let mut raw = Vec::new();
    if let Some(mut out) = child.stdout.take() {
        out.read_to_end(&mut raw).map_err(io_err(path))?;
    }
    let status = child.wait().map_err(io_err(path))?;
    let log = stderr.and_then(|h| h.join().ok()).unwrap_or_default();
    let log = String::from_utf8_lossy(&log);
    if !status.success() {
        let errors: Vec<&str> = log
            .lines()
            .filter(|l| !l.contains("Parsed_showinfo") && !l.starts_with(' '))
            .collect();
        let tail = errors[errors.len().saturating_sub(4)..].join(" | ");
        return Err(video_err(format!(
            "ffmpeg cannot decode it from {seek:.4} s ({episodes}; a truncated or corrupt file?): {} ({status})",
            tail.trim()
        )));
    }
    let info = parse_showinfo(&log).map_err(&video_err)?;
    if let Some((w, h)) = info.size {
        if (w, h) != (width, height) {
            return Err(video_err(format!(
                "frames are {w}x{h}, meta/info.json says {width}x{height} ({episodes})"
            )));
        }
    }
    let size = width as usize * height as usize * 3;
    let decoded = raw.len() / size.max(1);
    if info.pts.len() < decoded {
        return Err(video_err(format!(
            "ffmpeg returned {decoded} frames but reported timestamps for {}",
            info.pts.len()
        )));
    }
    let (num, den) = info.time_base;
    let times: Vec<f64> = info.pts[..decoded]
        .iter()
        .map(|&p| p as f64 * num as f64 / den as f64)
        .collect();
    // Decoded frames by time (binary search for the nearest of each wanted time).
    let mut by_time: Vec<(f64, usize)> = times.iter().copied().zip(0..).collect();
    by_time.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out = Vec::with_capacity(want.len());
    for (i, &t) in want.iter().enumerate() {
        let at = by_time.partition_point(|&(x, _)| x < t);
        let nearest = [at.checked_sub(1), Some(at)]
            .into_iter()
            .flatten()
            .filter_map(|k| by_time.get(k))
            .min_by(|a, b| (a.0 - t).abs().total_cmp(&(b.0 - t).abs()))
            .map(|&(x, j)| (j, x));
        let frame_err = |reason: String| DatasetError::VideoFrame {
            path: path.to_owned(),
            column: column.to_owned(),
            episode: wanted[i].episode,
            frame: wanted[i].frame,
            timestamp: t,
            reason,
        };
        let Some((j, got)) = nearest else {
            return Err(frame_err(format!(
                "no frame decodes from {seek:.4} s on: the video ends before the episode's frames (truncated?)"
            )));
        };
        if (got - t).abs() > tolerance_s {
            let end = times.last().copied().unwrap_or(got);
            let reason = if t > end + tolerance_s && decoded < count as usize {
                format!("the video ends at {end:.4} s (its last frame): it is shorter than the episode (truncated?)")
            } else {
                format!(
                    "the nearest frame is at {got:.6} s, {:.6} s away (tolerance {} s): the video does not match \
                     the episode's timestamps",
                    (got - t).abs(),
                    tolerance_s
                )
            };
            return Err(frame_err(reason));
        }
        let img = RgbImage::from_raw(width, height, raw[j * size..(j + 1) * size].to_vec())
            .ok_or_else(|| frame_err("bad frame buffer".into()))?;
        out.push(img);
    }
    Ok(out)
}

struct ShowInfo {
    time_base: (u64, u64),
    pts: Vec<i64>,
    size: Option<(u32, u32)>,
}

/// Reads the `showinfo` filter's lines: `config in time_base: N/D` and per frame `n: .. pts: P .. s:WxH`.
fn parse_showinfo(log: &str) -> std::result::Result<ShowInfo, String> {
    let mut time_base = None;
    let mut pts = Vec::new();
    let mut size = None;
    for line in log.lines().filter(|l| l.contains("Parsed_showinfo")) {
        if let Some(rest) = line.split("config in time_base:").nth(1) {
            let tb = rest.split(',').next().unwrap_or("").trim();
            if let Some((n, d)) = tb.split_once('/') {
                if let (Ok(n), Ok(d)) = (n.trim().parse::<u64>(), d.trim().parse::<u64>()) {
                    if d > 0 {
                        time_base = Some((n, d));
                    }
                }
            }
        } else if line.contains(" n:") {
            let field = |name: &str| -> Option<&str> {
                let pos = line.find(name)? + name.len();
                line[pos..].split_whitespace().next()
            };
            let p: i64 = field(" pts:")
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("cannot read a frame's pts from ffmpeg's line {line:?}"))?;
            pts.push(p);
            if size.is_none() {
                size = field(" s:").and_then(|s| {
                    let (w, h) = s.split_once('x')?;
                    Some((w.parse().ok()?, h.parse().ok()?))
                });
            }
        }
    }
    let time_base = time_base
        .ok_or_else(|| "ffmpeg reported no stream time base (no video stream?)".to_string())?;
    Ok(ShowInfo {
        time_base,
        pts,
        size,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_showinfo_lines() {
        let log = "[Parsed_showinfo_0 @ 0x1] config in time_base: 1/12800, frame_rate: 50/1\n\
                   [Parsed_showinfo_0 @ 0x1] config out time_base: 0/0, frame_rate: 0/0\n\
                   [Parsed_showinfo_0 @ 0x1] n:   0 pts: 134400 pts_time:10.5    pos:   228340 fmt:yuv420p sar:1/1 s:32x24 i:P\n\
                   [Parsed_showinfo_0 @ 0x1] color_range:tv color_space:unknown\n\
                   [Parsed_showinfo_0 @ 0x1] n:   1 pts: 134656 pts_time:10.52   pos:   228359 fmt:yuv420p sar:1/1 s:32x24 i:P\n";
        let s = parse_showinfo(log).unwrap();
        assert_eq!(s.time_base, (1, 12800));
        assert_eq!(s.pts, vec![134400, 134656]);
        assert_eq!(s.size, Some((32, 24)));
        assert!(parse_showinfo("Input #0").is_err());
    }
}
