//! The house progress plot (plotters on an in-memory RGB buffer, saved as PNG): an episode's steps on x, progress
//! in [-0.02, 1.05] on y, grey grid lines at 0, 0.25 .. 1, optional ground-truth stage bands behind, then lines and
//! dots in the order they were added. No text: no font is shipped. `eval model` and `label` draw with it.

use anyhow::Context;
use image::RgbImage;
use plotters::prelude::*;
use std::path::Path;

pub use plotters::style::{RGBColor, BLACK, BLUE};

/// RA-BC weights (`label`).
pub const ORANGE: RGBColor = RGBColor(245, 140, 30);

/// Background colours of the ground-truth stages (stage k gets `STAGE_COLORS[k % 6]`).
const STAGE_COLORS: [RGBColor; 6] = [
    RGBColor(255, 224, 178),
    RGBColor(200, 230, 201),
    RGBColor(187, 222, 251),
    RGBColor(225, 190, 231),
    RGBColor(255, 205, 210),
    RGBColor(220, 220, 220),
];

/// The grid lines' colour (visible on the stage bands too).
const GRID: RGBColor = RGBColor(170, 170, 170);

/// What gets drawn, in order.
enum Layer {
    Line(Vec<f64>, RGBColor, u32),
    Dots(Vec<(usize, f64)>, RGBColor),
}

/// A progress-over-steps plot: build it, then [`ProgressPlot::render`] or [`ProgressPlot::save`].
pub struct ProgressPlot {
    width: u32,
    height: u32,
    steps: usize,
    stages: Vec<usize>,
    layers: Vec<Layer>,
}

impl ProgressPlot {
    /// A `width` x `height` plot of an episode of `steps` steps.
    pub fn new(width: u32, height: u32, steps: usize) -> Self {
        Self {
            width,
            height,
            steps,
            stages: Vec::new(),
            layers: Vec::new(),
        }
    }

    /// Colour the background by the ground-truth stage of each step (contiguous runs become bands).
    pub fn stage_bands(mut self, stage_per_step: &[usize]) -> Self {
        self.stages = stage_per_step.to_vec();
        self
    }

    /// A line through one value per step.
    pub fn line(
        mut self,
        values: impl IntoIterator<Item = f64>,
        color: RGBColor,
        width: u32,
    ) -> Self {
        self.layers
            .push(Layer::Line(values.into_iter().collect(), color, width));
        self
    }

    /// Dots at (step, value).
    pub fn dots(mut self, points: impl IntoIterator<Item = (usize, f64)>, color: RGBColor) -> Self {
        self.layers
            .push(Layer::Dots(points.into_iter().collect(), color));
        self
    }

    /// The plot as an image.
    pub fn render(&self) -> anyhow::Result<RgbImage> {
        let (width, height) = (self.width, self.height);
        let mut buf = vec![255u8; (width * height * 3) as usize];
        {
            let root = BitMapBackend::with_buffer(&mut buf, (width, height)).into_drawing_area();
            root.fill(&WHITE)?;
            let x_max = (self.steps.max(2) - 1) as f64;
            let (y0, y1) = (-0.02f64, 1.05f64);
            let mut chart = ChartBuilder::on(&root)
                .margin(12)
                .build_cartesian_2d(0f64..x_max, y0..y1)?;
            let mut start = 0usize;
            for t in 1..=self.stages.len() {
                if t == self.stages.len() || self.stages[t] != self.stages[start] {
                    let c = STAGE_COLORS[self.stages[start] % STAGE_COLORS.len()];
                    chart.draw_series(std::iter::once(Rectangle::new(
                        [(start as f64, y0), (t as f64, y1)],
                        c.filled(),
                    )))?;
                    start = t;
                }
            }
            for y in [0.0, 0.25, 0.5, 0.75, 1.0] {
                chart.draw_series(LineSeries::new(
                    [(0.0, y), (x_max, y)],
                    GRID.stroke_width(1),
                ))?;
            }
            for layer in &self.layers {
                match layer {
                    Layer::Line(v, c, w) => {
                        chart.draw_series(LineSeries::new(
                            v.iter().enumerate().map(|(t, &p)| (t as f64, p)),
                            c.stroke_width(*w),
                        ))?;
                    }
                    Layer::Dots(p, c) => {
                        chart.draw_series(
                            p.iter()
                                .map(|&(t, y)| Circle::new((t as f64, y), 3, c.filled())),
                        )?;
                    }
                }
            }
            root.present()?;
        }
        RgbImage::from_raw(width, height, buf).context("plot buffer has the wrong size")
    }

    /// Renders and writes the plot as a PNG.
    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        save_png(&self.render()?, path)
    }
}

/// Writes `img` as a PNG, naming the file in the error.
pub fn save_png(img: &RgbImage, path: &Path) -> anyhow::Result<()> {
    img.save_with_format(path, image::ImageFormat::Png)
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plot_draws_its_bands_lines_and_dots() {
        let img = ProgressPlot::new(200, 100, 10)
            .stage_bands(&[0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
            .line((0..10).map(|t| t as f64 / 9.0), BLUE, 2)
            .dots([(3, 0.5)], BLACK)
            .render()
            .unwrap();
        assert_eq!(img.dimensions(), (200, 100));
        let has = |c: RGBColor| img.pixels().any(|p| p.0 == [c.0, c.1, c.2]);
        assert!(has(STAGE_COLORS[0]) && has(STAGE_COLORS[1]));
        assert!(has(BLUE) && has(BLACK) && has(GRID));
        assert!(!has(STAGE_COLORS[2]));
        // Without bands the background stays white.
        let plain = ProgressPlot::new(200, 100, 10).render().unwrap();
        assert!(!plain.pixels().any(|p| p.0 == [255, 224, 178]));
    }
}
