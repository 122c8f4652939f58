//! Why a command could not be parsed.

/// A grammar error in one command. The command is rejected with a tagged (or
/// untagged, when no tag could be read) `BAD`; the session state is unchanged
/// and the connection may go on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The command ended where more was required.
    #[error("unexpected end of command")]
    Eof,
    /// A specific token was required at this point.
    #[error("expected {0}")]
    Expected(&'static str),
    /// The command name is not one this grammar knows.
    #[error("unknown command")]
    UnknownCommand,
    /// Parentheses nested deeper than the grammar allows.
    #[error("nesting too deep")]
    TooDeep,
    /// A token had the right shape but an impossible value.
    #[error("invalid {0}")]
    Invalid(&'static str),
    /// Bytes remained after a complete command.
    #[error("unexpected data after command")]
    Trailing,
}
