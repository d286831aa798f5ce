//! Training targets of stage-aware progress models from SARM stage annotations (DESIGN.md, "Progress"): stage
//! `k` of frame `t` and `tau = clip((t - s_k) / (e_k - s_k), 0, 1)`, stage boundaries at given proportions of an
//! episode (time-linear progress), and the checks an annotation must pass first.
//!
//! An annotation comes as its stages' start and end frames (`s_k`, `e_k`, end exclusive), so core needs no
//! dataset type (stagewise-dataset's `StageAnnotation` holds them). Frames between two stages keep the earlier
//! stage at tau 1, frames before the first stage stage 0 at tau 0, and the last frame of an episode not marked
//! unsuccessful, whose last stage ends with it, has tau 1 (as stagewise.training.train does).

/// Why an annotation cannot give targets.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TargetsError {
    #[error("{names} stage names, {starts} start frames, {ends} end frames")]
    Counts {
        names: usize,
        starts: usize,
        ends: usize,
    },
    #[error(
        "stage {stage} ({name:?}) spans frames {start}..{end}: stages must be ordered, non-overlapping and within \
         0..{len}"
    )]
    Span {
        stage: usize,
        name: String,
        start: i64,
        end: i64,
        len: usize,
    },
}

/// Checks that `names`, `starts` and `ends` describe at least one stage, ordered, non-overlapping and within an
/// episode of `len` frames.
pub fn check_stages(
    names: &[String],
    starts: &[i64],
    ends: &[i64],
    len: usize,
) -> Result<(), TargetsError> {
    let k = names.len();
    if k == 0 || starts.len() != k || ends.len() != k {
        return Err(TargetsError::Counts {
            names: k,
            starts: starts.len(),
            ends: ends.len(),
        });
    }
    let mut prev = 0;
    for i in 0..k {
        let (s, e) = (starts[i], ends[i]);
        if s < prev || e < s || e > len as i64 {
            return Err(TargetsError::Span {
                stage: i,
                name: names[i].clone(),
                start: s,
                end: e,
                len,
            });
        }
        prev = e;
    }
    Ok(())
}

/// Stage `k` and `tau` of every frame of an episode of `len` frames whose stages span `starts[k]..ends[k]`
/// (module doc); `success` is the episode's flag, if it has one.
pub fn frame_targets(
    starts: &[i64],
    ends: &[i64],
    len: usize,
    success: Option<bool>,
) -> (Vec<i64>, Vec<f32>) {
    let k = starts.len().min(ends.len());
    let mut stage = vec![0i64; len];
    let mut tau = vec![0f32; len];
    for t in 0..len {
        let ti = t as i64;
        let (s, tt) = match (0..k).find(|&s| starts[s] <= ti && ti < ends[s]) {
            Some(s) => {
                let (a, b) = (starts[s], ends[s]);
                (s, ((ti - a) as f64 / (b - a).max(1) as f64).clamp(0.0, 1.0))
            }
            None => match (0..k).rev().find(|&s| ends[s] <= ti) {
                Some(s) => (s, 1.0),
                None => (0, 0.0),
            },
        };
        stage[t] = s as i64;
        tau[t] = tt as f32;
    }
    if len > 0 && success != Some(false) && ends[..k].last() == Some(&(len as i64)) {
        tau[len - 1] = 1.0;
    }
    (stage, tau)
}

/// Stage `(starts, ends)` at `proportions` of an episode of `len` frames (time-linear progress); the last stage
/// ends with the episode.
pub fn stages_from_proportions(proportions: &[f64], len: usize) -> (Vec<i64>, Vec<i64>) {
    let total: f64 = proportions.iter().sum::<f64>().max(1e-12);
    let mut acc = 0.0;
    let mut starts = Vec::with_capacity(proportions.len());
    let mut ends = Vec::with_capacity(proportions.len());
    for (i, p) in proportions.iter().enumerate() {
        let s = (acc / total * len as f64).round() as i64;
        acc += p;
        let e = if i + 1 == proportions.len() {
            len as i64
        } else {
            (acc / total * len as f64).round() as i64
        };
        starts.push(s);
        ends.push(e.max(s));
    }
    (starts, ends)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("s{i}")).collect()
    }

    #[test]
    fn targets_follow_design_formula() {
        let (k, tau) = frame_targets(&[0, 4], &[4, 8], 8, Some(true));
        assert_eq!(k, vec![0, 0, 0, 0, 1, 1, 1, 1]);
        assert_eq!(tau, vec![0.0, 0.25, 0.5, 0.75, 0.0, 0.25, 0.5, 1.0]);
        // A gap between stages keeps the earlier stage at tau 1; before the first stage, stage 0 at 0.
        let (k, tau) = frame_targets(&[2, 6], &[4, 8], 8, Some(false));
        assert_eq!(k, vec![0, 0, 0, 0, 0, 0, 1, 1]);
        assert_eq!(tau, vec![0.0, 0.0, 0.0, 0.5, 1.0, 1.0, 0.0, 0.5]);
    }

    #[test]
    fn proportions_give_time_linear_stages() {
        let (starts, ends) = stages_from_proportions(&[0.25, 0.25, 0.5], 100);
        assert_eq!(starts, vec![0, 25, 50]);
        assert_eq!(ends, vec![25, 50, 100]);
        check_stages(&names(3), &starts, &ends, 100).unwrap();
    }

    #[test]
    fn bad_stages_are_refused_with_what_was_wrong() {
        assert_eq!(
            check_stages(&names(2), &[0], &[4, 8], 8),
            Err(TargetsError::Counts {
                names: 2,
                starts: 1,
                ends: 2
            })
        );
        assert!(check_stages(&[], &[], &[], 8).is_err());
        let overlap = check_stages(&names(2), &[0, 3], &[4, 8], 8).unwrap_err();
        assert_eq!(
            overlap.to_string(),
            "stage 1 (\"s1\") spans frames 3..8: stages must be ordered, non-overlapping and within 0..8"
        );
        assert!(check_stages(&names(1), &[0], &[9], 8).is_err());
    }
}
