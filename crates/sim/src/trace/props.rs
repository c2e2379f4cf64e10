//! Properties over a trace (none yet).

use std::fmt;

use super::format::Trace;

/// One property's outcome over one trace.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub name: &'static str,
    pub holds: bool,
    pub figures: Vec<String>,
}

impl Outcome {
    pub fn holds(&self) -> bool {
        self.holds
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {:?}", self.holds, self.name, self.figures)
    }
}

/// Every property.
pub fn check_all(_trace: &Trace) -> Vec<Outcome> {
    Vec::new()
}
