//! nvml-sim's errors as types (each implements `std::error::Error`):
//! [`Invalid`], a value, file or request refused, in the words of the
//! person who wrote it; [`At`], one found at a byte offset of a scenario
//! file; [`ScenarioError`], one with the file and line of a scenario, and
//! [`ParseError`], one with the line of a capture.

use std::fmt;

/// What is wrong, in words a person acts on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Invalid(String);

impl Invalid {
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }

    pub fn message(&self) -> &str {
        &self.0
    }

    pub fn into_message(self) -> String {
        self.0
    }
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Invalid {}

impl From<String> for Invalid {
    fn from(message: String) -> Self {
        Self(message)
    }
}

impl From<&str> for Invalid {
    fn from(message: &str) -> Self {
        Self(message.into())
    }
}

/// An error reads as its words: callers (and the tests that pin a
/// message) look into it as they would into the message.
impl std::ops::Deref for Invalid {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

/// An error at a byte offset of a scenario file; `None`: the table being
/// checked, whose own position the caller knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct At {
    pub offset: Option<usize>,
    pub error: Invalid,
}

impl At {
    pub fn new(offset: Option<usize>, error: impl Into<Invalid>) -> Self {
        Self {
            offset,
            error: error.into(),
        }
    }
}

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.offset {
            Some(o) => write!(f, "at byte {o}: {}", self.error),
            None => self.error.fmt(f),
        }
    }
}

impl std::error::Error for At {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// A message alone is an error in the table being checked.
impl From<Invalid> for At {
    fn from(error: Invalid) -> Self {
        Self {
            offset: None,
            error,
        }
    }
}

impl From<String> for At {
    fn from(message: String) -> Self {
        Self::from(Invalid(message))
    }
}

#[derive(Debug, Clone)]
pub struct ScenarioError {
    pub source: String,
    pub line: Option<usize>,
    pub message: String,
}

impl ScenarioError {
    /// `file:line: warning: message`, as a warning is printed.
    pub fn as_warning(&self) -> String {
        match self.line {
            Some(line) => format!("{}:{line}: warning: {}", self.source, self.message),
            None => format!("{}: warning: {}", self.source, self.message),
        }
    }
}

impl std::fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{}: {}", self.source, line, self.message),
            None => write!(f, "{}: {}", self.source, self.message),
        }
    }
}

impl std::error::Error for ScenarioError {}

/// What is wrong with a capture, and where.
#[derive(Debug, Clone, PartialEq)]
pub struct ParseError {
    pub line: usize,
    /// The element (or, for text captures, the label's element) it was in.
    pub element: Option<String>,
    pub message: String,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.element {
            Some(e) => write!(f, "line {}: <{e}>: {}", self.line, self.message),
            None => write!(f, "line {}: {}", self.line, self.message),
        }
    }
}

impl std::error::Error for ParseError {}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each is a `std::error::Error` whose text is its message; `At`
    /// keeps its offset and its cause.
    #[test]
    fn errors_are_errors_with_their_words_and_place() {
        let e: Box<dyn std::error::Error> = Box::new(Invalid::from("count must be at least 1"));
        assert_eq!(e.to_string(), "count must be at least 1");
        let at = At::new(Some(12), "bad");
        assert_eq!(at.to_string(), "at byte 12: bad");
        assert_eq!(
            std::error::Error::source(&at).map(ToString::to_string),
            Some("bad".into())
        );
        assert_eq!(At::from(Invalid::from("x")).offset, None);
    }
}
