//! Camera sources for [`crate::RobotEnv`]: a directory of images, a closure (the CLI backs it with the simulator
//! renderer), and V4L2 (feature `v4l2`; not implemented in this build, see [`V4l2Camera`]).

use stagewise_core::{View, ViewSpec};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum CameraError {
    #[error("camera {name}: cannot read directory {dir}")]
    Dir {
        name: String,
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("camera {name}: no .png images in {dir}")]
    Empty { name: String, dir: PathBuf },
    #[error("camera {name}: cannot decode {path}")]
    Decode {
        name: String,
        path: PathBuf,
        source: image::ImageError,
    },
    #[error("camera {name}: {path} is {got_w}x{got_h}, the camera is {want_w}x{want_h}")]
    Size {
        name: String,
        path: PathBuf,
        got_w: u32,
        got_h: u32,
        want_w: u32,
        want_h: u32,
    },
    #[error(
        "camera {device}: not built with v4l2 (rebuild stagewise-bridge with `--features v4l2`)"
    )]
    NotBuiltWithV4l2 { device: PathBuf },
    #[error(
        "camera {device}: V4L2 capture is not implemented in this version of stagewise-bridge"
    )]
    V4l2NotImplemented { device: PathBuf },
    #[error("camera {name}: {message}")]
    Source { name: String, message: String },
    #[error("scene channel tcp://{addr}: {message}")]
    Scene { addr: String, message: String },
    #[error("scene channel tcp://{addr}: reading the scene header")]
    SceneHeaderRead {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("scene channel tcp://{addr}: bad scene header")]
    SceneHeader {
        addr: String,
        #[source]
        source: stagewise_protocol::scene::SceneError,
    },
    #[error("scene channel tcp://{addr}: not a HOST:PORT address")]
    SceneAddress {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "scene channel tcp://{addr}: cannot connect within {timeout:?} (is the emulator running with its scene \
         channel, or a camera server?)"
    )]
    SceneConnect {
        addr: String,
        timeout: std::time::Duration,
        #[source]
        source: std::io::Error,
    },
}

/// Something that gives one frame per control step.
pub trait CameraSource: Send {
    fn spec(&self) -> &ViewSpec;
    /// The frame for control step `step` of the current episode.
    fn capture(&mut self, step: u64) -> Result<View, CameraError>;
}

/// Replays the `.png` files of a directory in name order, one per step, looping. All must have the size of the
/// first one.
pub struct ImageDirCamera {
    spec: ViewSpec,
    files: Vec<PathBuf>,
}

impl ImageDirCamera {
    pub fn open(name: &str, dir: &Path) -> Result<Self, CameraError> {
        let rd = std::fs::read_dir(dir).map_err(|source| CameraError::Dir {
            name: name.to_string(),
            dir: dir.to_path_buf(),
            source,
        })?;
        let mut files: Vec<PathBuf> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x.eq_ignore_ascii_case("png")))
            .collect();
        files.sort();
        let first = files.first().ok_or_else(|| CameraError::Empty {
            name: name.to_string(),
            dir: dir.to_path_buf(),
        })?;
        let img = load(name, first)?;
        Ok(Self {
            spec: ViewSpec {
                name: name.to_string(),
                width: img.width(),
                height: img.height(),
            },
            files,
        })
    }
}

fn load(name: &str, path: &Path) -> Result<image::RgbImage, CameraError> {
    image::open(path)
        .map(|i| i.to_rgb8())
        .map_err(|source| CameraError::Decode {
            name: name.to_string(),
            path: path.to_path_buf(),
            source,
        })
}

impl CameraSource for ImageDirCamera {
    fn spec(&self) -> &ViewSpec {
        &self.spec
    }

    fn capture(&mut self, step: u64) -> Result<View, CameraError> {
        let path = &self.files[(step % self.files.len() as u64) as usize];
        let img = load(&self.spec.name, path)?;
        if img.width() != self.spec.width || img.height() != self.spec.height {
            return Err(CameraError::Size {
                name: self.spec.name.clone(),
                path: path.clone(),
                got_w: img.width(),
                got_h: img.height(),
                want_w: self.spec.width,
                want_h: self.spec.height,
            });
        }
        Ok(View::new(self.spec.name.clone(), img))
    }
}

/// A camera backed by a closure (e.g. the simulator's renderer, or a frame grabber the caller owns).
pub struct FnCamera<F> {
    spec: ViewSpec,
    f: F,
}

impl<F: FnMut(u64) -> Result<View, CameraError> + Send> FnCamera<F> {
    pub fn new(spec: ViewSpec, f: F) -> Self {
        Self { spec, f }
    }
}

impl<F: FnMut(u64) -> Result<View, CameraError> + Send> CameraSource for FnCamera<F> {
    fn spec(&self) -> &ViewSpec {
        &self.spec
    }

    fn capture(&mut self, step: u64) -> Result<View, CameraError> {
        let v = (self.f)(step)?;
        if v.rgb.width() != self.spec.width || v.rgb.height() != self.spec.height {
            return Err(CameraError::Source {
                name: self.spec.name.clone(),
                message: format!(
                    "frame is {}x{}, the camera is {}x{}",
                    v.rgb.width(),
                    v.rgb.height(),
                    self.spec.width,
                    self.spec.height
                ),
            });
        }
        Ok(v)
    }
}

/// A V4L2 device (`/dev/videoN`). Not implemented in this version: `open` always fails with a clear error
/// ([`CameraError::NotBuiltWithV4l2`] without the `v4l2` feature, [`CameraError::V4l2NotImplemented`] with it).
pub struct V4l2Camera {
    _private: (),
}

impl V4l2Camera {
    pub fn open(device: &Path, _width: u32, _height: u32) -> Result<Self, CameraError> {
        if cfg!(feature = "v4l2") {
            Err(CameraError::V4l2NotImplemented {
                device: device.to_path_buf(),
            })
        } else {
            Err(CameraError::NotBuiltWithV4l2 {
                device: device.to_path_buf(),
            })
        }
    }
}
