//! Key expressions under `stagewise/<robot>/` (docs/wire.md, "Key expressions").

use std::fmt;

/// The first chunk of every Stagewise key expression.
pub const PREFIX: &str = "stagewise";

/// Longest robot name accepted (bytes).
pub const MAX_ROBOT_LEN: usize = 128;

/// A robot name that cannot be one chunk of a key expression.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("robot name is empty: give a name such as `arm-0`")]
    Empty,
    #[error("robot name {name:?} is {len} bytes long; at most {max} are allowed")]
    TooLong {
        name: String,
        len: usize,
        max: usize,
    },
    #[error(
        "robot name {name:?} contains {ch:?} at byte {index}: only ASCII letters, digits, '-', '_' and '.' \
         are allowed (no '/', '*', '$', '#', '?', '@' or spaces: they have meaning in zenoh key expressions)"
    )]
    BadChar {
        name: String,
        ch: char,
        index: usize,
    },
    #[error("robot name {name:?} is not allowed: '.' and '..' are reserved")]
    Reserved { name: String },
}

/// Builds the key expressions of one robot. The robot name is validated once, in [`Keys::new`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Keys {
    robot: String,
}

/// Checks that `robot` can be one chunk of a key expression: 1..=128 bytes of `[A-Za-z0-9_.-]`, not `.`/`..`.
pub fn validate_robot(robot: &str) -> Result<(), KeyError> {
    if robot.is_empty() {
        return Err(KeyError::Empty);
    }
    if robot.len() > MAX_ROBOT_LEN {
        return Err(KeyError::TooLong {
            name: robot.to_string(),
            len: robot.len(),
            max: MAX_ROBOT_LEN,
        });
    }
    if let Some((index, ch)) = robot
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(KeyError::BadChar {
            name: robot.to_string(),
            ch,
            index,
        });
    }
    if robot == "." || robot == ".." {
        return Err(KeyError::Reserved {
            name: robot.to_string(),
        });
    }
    Ok(())
}

impl Keys {
    /// Keys of the robot `robot` (validated: see [`validate_robot`]).
    pub fn new(robot: impl Into<String>) -> Result<Self, KeyError> {
        let robot = robot.into();
        validate_robot(&robot)?;
        Ok(Self { robot })
    }

    pub fn robot(&self) -> &str {
        &self.robot
    }

    fn key(&self, suffix: &str) -> String {
        format!("{PREFIX}/{}/{suffix}", self.robot)
    }

    /// `stagewise/<robot>/transition`: one [`crate::TransitionMsg`] per environment step.
    pub fn transition(&self) -> String {
        self.key("transition")
    }
    /// `stagewise/<robot>/progress`: one [`crate::ProgressMsg`] per step (dropped under congestion).
    pub fn progress(&self) -> String {
        self.key("progress")
    }
    /// `stagewise/<robot>/episode`: one [`crate::EpisodeMsg`] per finished episode.
    pub fn episode(&self) -> String {
        self.key("episode")
    }
    /// `stagewise/<robot>/steps`: [`crate::StepsMsg`], batches of steps for a viewer (`serve --rerun`).
    pub fn steps(&self) -> String {
        self.key("steps")
    }
    /// `stagewise/<robot>/policy`: [`crate::PolicyMsg`] put by a learner, read by the actor.
    pub fn policy(&self) -> String {
        self.key("policy")
    }
    /// `stagewise/<robot>/env/reset`: queryable, [`crate::ResetRequest`] -> [`crate::ResetReply`].
    pub fn env_reset(&self) -> String {
        self.key("env/reset")
    }
    /// `stagewise/<robot>/env/step`: queryable, [`crate::StepRequest`] -> [`crate::StepReply`].
    pub fn env_step(&self) -> String {
        self.key("env/step")
    }
    /// `stagewise/<robot>/env/*`: both env queryables (one declaration serves both).
    pub fn env_any(&self) -> String {
        self.key("env/*")
    }
    /// `stagewise/<robot>/alive`: the robot's liveliness token.
    pub fn alive(&self) -> String {
        self.key("alive")
    }
    /// `stagewise/<robot>/**`: everything of this robot.
    pub fn all(&self) -> String {
        self.key("**")
    }

    /// `stagewise/*/<suffix>`: the same key of every robot (e.g. `any_robot("transition")` for a learner
    /// fed by many actors).
    pub fn any_robot(suffix: &str) -> String {
        format!("{PREFIX}/*/{suffix}")
    }

    /// The robot named by a concrete key `stagewise/<robot>/...`, if it has that shape.
    pub fn robot_of(key: &str) -> Option<&str> {
        let rest = key.strip_prefix(PREFIX)?.strip_prefix('/')?;
        let (robot, _) = rest.split_once('/')?;
        validate_robot(robot).ok().map(|_| robot)
    }
}

impl fmt::Display for Keys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PREFIX}/{}", self.robot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_every_key() {
        let k = Keys::new("arm-0").expect("valid name");
        assert_eq!(k.transition(), "stagewise/arm-0/transition");
        assert_eq!(k.progress(), "stagewise/arm-0/progress");
        assert_eq!(k.episode(), "stagewise/arm-0/episode");
        assert_eq!(k.policy(), "stagewise/arm-0/policy");
        assert_eq!(k.env_reset(), "stagewise/arm-0/env/reset");
        assert_eq!(k.env_step(), "stagewise/arm-0/env/step");
        assert_eq!(k.env_any(), "stagewise/arm-0/env/*");
        assert_eq!(k.alive(), "stagewise/arm-0/alive");
        assert_eq!(k.all(), "stagewise/arm-0/**");
        assert_eq!(Keys::any_robot("episode"), "stagewise/*/episode");
        assert_eq!(k.to_string(), "stagewise/arm-0");
    }

    #[test]
    fn rejects_bad_names_with_a_reason() {
        assert_eq!(Keys::new(""), Err(KeyError::Empty));
        for bad in ["a/b", "a*", "$x", "a#", "what?", "a b", "@r", "é", "a\n"] {
            let err = Keys::new(bad).expect_err(bad);
            assert!(matches!(err, KeyError::BadChar { .. }), "{bad}: {err}");
            assert!(err.to_string().contains("only ASCII letters"), "{err}");
        }
        assert!(matches!(
            Keys::new("x".repeat(129)),
            Err(KeyError::TooLong { len: 129, .. })
        ));
        assert!(matches!(Keys::new(".."), Err(KeyError::Reserved { .. })));
        assert!(Keys::new("Robot_1.lab-2").is_ok());
    }

    #[test]
    fn robot_of_parses_concrete_keys() {
        assert_eq!(Keys::robot_of("stagewise/arm-0/transition"), Some("arm-0"));
        assert_eq!(Keys::robot_of("stagewise/arm-0"), None);
        assert_eq!(Keys::robot_of("other/arm-0/transition"), None);
        assert_eq!(Keys::robot_of("stagewise/*/transition"), None);
    }
}
