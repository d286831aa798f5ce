//! Frames in, model tensors out: resize an RGB8 frame of any size to the manifest's size and normalise it into
//! CHW f32 (`(x / 255 - mean) / std`).

use crate::manifest::ImageSpec;
use crate::ModelError;
use image::imageops::FilterType;
use stagewise_core::Frame;

/// Per-channel affine map equivalent to `(x / 255 - mean) / std`, precomputed once per model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Normaliser {
    pub width: u32,
    pub height: u32,
    scale: [f32; 3],
    offset: [f32; 3],
}

impl Normaliser {
    pub fn new(spec: &ImageSpec) -> Self {
        let mut scale = [0.0; 3];
        let mut offset = [0.0; 3];
        for c in 0..3 {
            scale[c] = 1.0 / (255.0 * spec.std[c]);
            offset[c] = -spec.mean[c] / spec.std[c];
        }
        Self {
            width: spec.width,
            height: spec.height,
            scale,
            offset,
        }
    }

    /// Values per preprocessed frame: `3 * height * width`.
    pub fn frame_len(&self) -> usize {
        3 * self.width as usize * self.height as usize
    }

    /// Writes `frame` into `out` (length [`Self::frame_len`]) as normalised CHW f32, resizing (triangle filter)
    /// when the frame is not already the model's size.
    pub fn write_chw(&self, frame: &Frame, out: &mut [f32]) -> Result<(), String> {
        self.write_chw_twice(frame, out, None)
    }

    /// Like [`Self::write_chw`], storing the same values into `mirror` too in the same pass (the frame windows
    /// keep every frame twice; one pass is cheaper than a pass and a copy).
    pub fn write_chw_twice(
        &self,
        frame: &Frame,
        out: &mut [f32],
        mirror: Option<&mut [f32]>,
    ) -> Result<(), String> {
        if frame.width() == 0 || frame.height() == 0 {
            return Err(format!(
                "frame is {}x{}: it must not be empty",
                frame.width(),
                frame.height()
            ));
        }
        for buf in std::iter::once(&*out).chain(mirror.as_deref()) {
            if buf.len() != self.frame_len() {
                return Err(format!(
                    "output buffer has {} values, expected {}",
                    buf.len(),
                    self.frame_len()
                ));
            }
        }
        let resized;
        let src = if frame.width() == self.width && frame.height() == self.height {
            frame
        } else {
            resized = image::imageops::resize(frame, self.width, self.height, FilterType::Triangle);
            &resized
        };
        let plane = self.width as usize * self.height as usize;
        let (r, rest) = out.split_at_mut(plane);
        let (g, b) = rest.split_at_mut(plane);
        let ([sr, sg, sb], [or, og, ob]) = (self.scale, self.offset);
        let pixels = src.as_raw().chunks_exact(3);
        // Zipped iterators: no bounds checks in the per-step hot loop, so it vectorises.
        match mirror {
            None => planes(src.as_raw(), [r, g, b], self.scale, self.offset),
            Some(m) => {
                let (r2, rest) = m.split_at_mut(plane);
                let (g2, b2) = rest.split_at_mut(plane);
                let mirrored = r.iter_mut().zip(g).zip(b).zip(r2).zip(g2).zip(b2);
                for (px, (((((r, g), b), r2), g2), b2)) in pixels.zip(mirrored) {
                    *r = f32::from(px[0]) * sr + or;
                    *g = f32::from(px[1]) * sg + og;
                    *b = f32::from(px[2]) * sb + ob;
                    (*r2, *g2, *b2) = (*r, *g, *b);
                }
            }
        }
        Ok(())
    }
}

/// RGB8 pixels into three normalised planes. Compiled a second time for AVX2 where the CPU has it (checked once
/// per call, cached by std): the stride-3 de-interleave then runs in 256-bit registers (about 3x faster here).
/// The same `x * scale + offset` in either build (no fused multiply-add), so the values are identical.
// The one `unsafe` of this crate (the workspace denies `unsafe_code`): calling the AVX2 build once the CPU is
// known to have AVX2.
#[allow(unsafe_code)]
fn planes(rgb: &[u8], [r, g, b]: [&mut [f32]; 3], scale: [f32; 3], offset: [f32; 3]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2 (checked just above).
        return unsafe { planes_avx2(rgb, [r, g, b], scale, offset) };
    }
    planes_portable(rgb, [r, g, b], scale, offset)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn planes_avx2(rgb: &[u8], planes: [&mut [f32]; 3], scale: [f32; 3], offset: [f32; 3]) {
    planes_portable(rgb, planes, scale, offset)
}

#[inline(always)]
fn planes_portable(rgb: &[u8], [r, g, b]: [&mut [f32]; 3], scale: [f32; 3], offset: [f32; 3]) {
    let ([sr, sg, sb], [or, og, ob]) = (scale, offset);
    // Zipped iterators: no bounds checks in the per-step hot loop, so it vectorises.
    for (((px, r), g), b) in rgb.chunks_exact(3).zip(r).zip(g).zip(b) {
        *r = f32::from(px[0]) * sr + or;
        *g = f32::from(px[1]) * sg + og;
        *b = f32::from(px[2]) * sb + ob;
    }
}

/// Builds an RGB8 frame from raw interleaved bytes, refusing anything that is not 3-channel 8-bit or whose size
/// disagrees with its bytes.
pub fn frame_from_bytes(
    width: u32,
    height: u32,
    channels: u32,
    bytes: Vec<u8>,
) -> Result<Frame, ModelError> {
    let bad = |reason: String| ModelError::BadInput {
        tensor: "frame".into(),
        reason,
    };
    if width == 0 || height == 0 {
        return Err(bad(format!(
            "frame is {width}x{height}: it must not be empty"
        )));
    }
    if channels != 3 {
        return Err(bad(format!(
            "frame has {channels} channels: expected RGB (3 channels, 8 bit)"
        )));
    }
    let expected = width as usize * height as usize * 3;
    if bytes.len() != expected {
        return Err(bad(format!(
            "{width}x{height} RGB8 frame needs {expected} bytes, got {}",
            bytes.len()
        )));
    }
    Frame::from_raw(width, height, bytes)
        .ok_or_else(|| bad("frame bytes do not fit its size".into()))
}

/// Decodes an image file into an RGB8 frame. Images that are not 8-bit RGB (grey, RGBA, 16-bit) are refused
/// rather than silently converted: a reward model trained on RGB must see RGB.
pub fn load_frame(path: &std::path::Path) -> Result<Frame, ModelError> {
    let img = image::open(path).map_err(|source| ModelError::ImageDecode {
        path: path.to_path_buf(),
        source,
    })?;
    match img {
        image::DynamicImage::ImageRgb8(f) if f.width() > 0 && f.height() > 0 => Ok(f),
        image::DynamicImage::ImageRgb8(f) => Err(ModelError::BadInput {
            tensor: path.display().to_string(),
            reason: format!(
                "image is {}x{}: it must not be empty",
                f.width(),
                f.height()
            ),
        }),
        other => Err(ModelError::BadInput {
            tensor: path.display().to_string(),
            reason: format!("image is {:?}: expected 8-bit RGB", other.color()),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(w: u32, h: u32) -> ImageSpec {
        ImageSpec {
            width: w,
            height: h,
            mean: [0.5, 0.25, 0.0],
            std: [0.5, 0.25, 1.0],
        }
    }

    #[test]
    fn normalises_into_chw() {
        let n = Normaliser::new(&spec(2, 1));
        let frame = Frame::from_raw(2, 1, vec![255, 0, 51, 0, 255, 102]).unwrap();
        let mut out = vec![0.0; n.frame_len()];
        n.write_chw(&frame, &mut out).unwrap();
        let expect = [
            (1.0 - 0.5) / 0.5,
            (0.0 - 0.5) / 0.5, // R plane
            (0.0 - 0.25) / 0.25,
            (1.0 - 0.25) / 0.25, // G plane
            0.2,
            0.4, // B plane
        ];
        for (a, b) in out.iter().zip(expect) {
            assert!((a - b).abs() < 1e-6, "{out:?}");
        }
    }

    /// The build `planes` dispatches to (AVX2 on a CPU that has it) gives the portable loop's values bit for bit:
    /// every byte value in every channel, and a pixel count that leaves a tail past the vector width.
    #[test]
    fn dispatched_planes_are_bit_identical_to_the_portable_loop() {
        let pixels = 3 * 256 + 5;
        // Pixel p, channel c: (7 p + 85 c) mod 256, every value in each channel (7 and 256 are coprime).
        let rgb: Vec<u8> = (0..pixels * 3)
            .map(|i| ((i / 3 * 7 + i % 3 * 85) % 256) as u8)
            .collect();
        let (scale, offset) = (
            [1.0 / 63.75, 1.0 / 127.5, 0.003_921_569],
            [-2.0, -1.0, 0.37],
        );
        let run = |dispatch: bool| {
            let (mut r, mut g, mut b) =
                (vec![0f32; pixels], vec![0f32; pixels], vec![0f32; pixels]);
            if dispatch {
                planes(&rgb, [&mut r, &mut g, &mut b], scale, offset);
            } else {
                planes_portable(&rgb, [&mut r, &mut g, &mut b], scale, offset);
            }
            [r, g, b].map(|p| p.iter().map(|v| v.to_bits()).collect::<Vec<u32>>())
        };
        assert_eq!(run(true), run(false));
        for c in 0..3 {
            let seen: std::collections::HashSet<u8> =
                rgb.iter().skip(c).step_by(3).copied().collect();
            assert_eq!(seen.len(), 256, "channel {c} covers every byte value");
        }
    }

    #[test]
    fn resizes_any_size() {
        let n = Normaliser::new(&spec(8, 8));
        let frame = Frame::from_pixel(31, 17, image::Rgb([255, 255, 255]));
        let mut out = vec![0.0; n.frame_len()];
        n.write_chw(&frame, &mut out).unwrap();
        assert!(out[..64].iter().all(|v| (v - 1.0).abs() < 1e-5));
    }

    #[test]
    fn refuses_empty_and_non_rgb() {
        let n = Normaliser::new(&spec(4, 4));
        let mut out = vec![0.0; n.frame_len()];
        assert!(n.write_chw(&Frame::new(0, 4), &mut out).is_err());
        assert!(frame_from_bytes(2, 2, 4, vec![0; 16]).is_err());
        assert!(frame_from_bytes(2, 2, 3, vec![0; 11]).is_err());
        assert!(frame_from_bytes(0, 2, 3, vec![]).is_err());
        assert!(frame_from_bytes(2, 2, 3, vec![0; 12]).is_ok());
    }
}
