//! Printing an error with its causes, each once.
//!
//! Stagewise's library errors keep their causes as [`std::error::Error::source`] and do not repeat a cause's
//! message in their own `Display` (anyhow's `{:?}` and `{:#}` walk the chain, and would otherwise print a cause
//! twice). Where a library error is printed as one line outside anyhow (a log field, a reply to a remote
//! learner), [`ErrorChain`] writes it with its causes: `outer: cause: root cause`.

use std::error::Error;
use std::fmt;

/// `Display` of an error followed by each of its sources, joined with `": "`.
///
/// ```
/// use stagewise_core::ErrorChain;
/// let io = std::io::Error::other("disk full");
/// let e = stagewise_core::EnvError::backend("simulator", io);
/// assert_eq!(ErrorChain(&e).to_string(), "the simulator failed: disk full");
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ErrorChain<'a>(pub &'a (dyn Error + 'a));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut next = self.0.source();
        while let Some(e) = next {
            write!(f, ": {e}")?;
            next = e.source();
        }
        Ok(())
    }
}

/// The messages of `e` and of each of its sources, outermost first.
pub fn chain_messages(e: &dyn Error) -> Vec<String> {
    let mut out = vec![e.to_string()];
    let mut next = e.source();
    while let Some(s) = next {
        out.push(s.to_string());
        next = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("reading {path}")]
    struct Outer {
        path: &'static str,
        #[source]
        source: std::io::Error,
    }

    #[test]
    fn every_cause_once_in_order() {
        let e = Outer {
            path: "a.toml",
            source: std::io::Error::other("no such file"),
        };
        assert_eq!(ErrorChain(&e).to_string(), "reading a.toml: no such file");
        assert_eq!(chain_messages(&e), ["reading a.toml", "no such file"]);
    }
}
