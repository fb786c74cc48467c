//! Text from outside the fleet made safe to show: control and bidirectional-formatting
//! characters written as visible escapes.
//!
//! Scenario names, error messages, worker ids, a spec's target and every other string that a
//! submitter, a harness or a worker chose can reach a terminal or a Markdown page. Raw, an ESC
//! starts a terminal sequence (a title change, a cleared screen, a moved cursor), a newline or
//! a carriage return forges a table row, and U+202E and the other bidi controls reorder what
//! the reader sees. Each output kind has one function, and every print site goes through it:
//! [`for_terminal`] for stderr/stdout text, `report::markdown::escape_md` (which calls
//! [`escape_unsafe`]) for Markdown.

use std::fmt::Write as _;

/// `true` for a character that must not reach a reader raw: C0 controls (tab and newline
/// included: every place we print is one line or one table cell), DEL, C1 controls, and the
/// Unicode bidirectional formatting characters (U+061C, U+200E, U+200F, U+202A–U+202E,
/// U+2066–U+2069).
pub fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// The first unsafe character of `text` and its 0-based character index, for an intake error
/// that says where it is.
pub fn first_unsafe(text: &str) -> Option<(usize, char)> {
    text.chars().enumerate().find(|(_, c)| is_unsafe(*c))
}

/// `c` as a visible escape: `\x1b` below U+0100, `\u{202e}` above.
pub fn escape_char(c: char) -> String {
    let code = u32::from(c);
    if code < 0x100 {
        format!("\\x{code:02x}")
    } else {
        format!("\\u{{{code:04x}}}")
    }
}

/// `text` with every unsafe character replaced by `escape(c)`; other characters unchanged.
pub fn escape_unsafe(text: &str, mut escape: impl FnMut(char, &mut String)) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if is_unsafe(c) {
            escape(c, &mut out);
        } else {
            out.push(c);
        }
    }
    out
}

/// `text` for a terminal: every unsafe character as its visible escape ([`escape_char`]), so
/// one string prints as one line that moves no cursor and changes no setting.
pub fn for_terminal(text: &str) -> String {
    if !text.chars().any(is_unsafe) {
        return text.to_owned();
    }
    escape_unsafe(text, |c, out| {
        let _ = write!(out, "{}", escape_char(c));
    })
}

/// Text of several lines for a terminal: each line as [`for_terminal`] writes it, the line
/// breaks kept. For a rendered block (a summary, a table with notes) whose own `\n` are
/// meant; a carriage return or any other control inside a line is escaped.
pub fn for_terminal_lines(text: &str) -> String {
    if !text.chars().any(|c| c != '\n' && is_unsafe(c)) {
        return text.to_owned();
    }
    text.split('\n')
        .map(for_terminal)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Why free text may not be taken, naming its first unsafe character; `None` when it has
/// none.
pub fn unsafe_text_reason(text: &str) -> Option<String> {
    let (index, c) = first_unsafe(text)?;
    Some(format!(
        "holds the control character {} at character {index} ({:?}); control and bidi \
         characters would reach terminals and reports raw, remove them",
        escape_char(c),
        for_terminal(text)
    ))
}

/// [`unsafe_text_reason`] for the field `field`, for an intake error naming it.
pub fn unsafe_text_problem(field: &str, text: &str) -> Option<String> {
    unsafe_text_reason(text).map(|reason| format!("{field}: {reason}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_text_shows_controls_as_escapes() {
        assert_eq!(for_terminal("plain ünïcode ✓"), "plain ünïcode ✓");
        assert_eq!(
            for_terminal("a\u{1b}]0;pwned\u{7}b\nc\r\td\u{7f}\u{9b}"),
            "a\\x1b]0;pwned\\x07b\\x0ac\\x0d\\x09d\\x7f\\x9b"
        );
        assert_eq!(for_terminal("gpj.\u{202e}exe"), "gpj.\\u{202e}exe");
        for bidi in [
            '\u{061c}', '\u{200e}', '\u{200f}', '\u{202a}', '\u{2066}', '\u{2069}',
        ] {
            assert!(is_unsafe(bidi), "{bidi:?}");
        }
        assert!(!is_unsafe('\u{2070}'));
    }

    #[test]
    fn lines_keep_their_breaks_and_lose_the_rest() {
        assert_eq!(
            for_terminal_lines("line 1\nline\r2\u{1b}[2J\n"),
            "line 1\nline\\x0d2\\x1b[2J\n"
        );
    }

    #[test]
    fn a_problem_names_the_field_and_the_character() {
        assert_eq!(unsafe_text_problem("spec.targetDisplay", "fine"), None);
        let problem = unsafe_text_problem("spec.targetDisplay", "s\u{1b}[2J").expect("unsafe");
        assert!(problem.starts_with("spec.targetDisplay: "), "{problem}");
        assert!(problem.contains("\\x1b at character 1"), "{problem}");
        assert!(!problem.contains('\u{1b}'), "{problem}");
    }
}
