//! Text from the API made harmless for a terminal. Job commands, parameters,
//! log lines and messages are written by other users: an escape sequence in
//! them would set the reader's window title, write their clipboard (OSC 52)
//! or clear their screen, and a bidirectional override would make a listing
//! lie. Everything a command prints goes through here (the writers of
//! `output.rs` apply [`clean`] to all of it); control characters come out
//! spelled as Rust escapes (`\x1b`, `\u{9b}`, `\u{202e}`), printable text
//! exactly as it was. `--json` prints the exact values: JSON escapes them.

use std::borrow::Cow;
use std::fmt::Write as _;

/// The colour sequences gpuq itself prints (state colours, marks): the only
/// escapes that reach a terminal, and only when colour is on. Text cannot be
/// told apart from ours once formatted, so another user's string holding one
/// of these six exact sequences passes too: at worst it colours a line.
pub const PALETTE: [&str; 6] = [
    "\x1b[0m", "\x1b[31m", "\x1b[32m", "\x1b[33m", "\x1b[35m", "\x1b[36m",
];

/// A character a terminal would act on rather than show: C0 controls, DEL, C1
/// controls (0x80-0x9f; 0x9b is a one-byte CSI) and the explicit bidirectional
/// formatting characters.
pub fn is_unsafe(c: char) -> bool {
    c.is_control() || gpuq_core::limits::is_bidi_control(c)
}

/// What may pass as it is.
#[derive(Debug, Clone, Copy, Default)]
pub struct Keep {
    /// Newlines and tabs (multi-line text: a diff, a message, the output itself).
    pub lines: bool,
    /// Carriage returns (a log's progress bars redraw their line).
    pub returns: bool,
    /// gpuq's own colours ([`PALETTE`]).
    pub palette: bool,
}

/// `s` with every unsafe character escaped, except what `keep` lets through.
pub fn clean(s: &str, keep: Keep) -> Cow<'_, str> {
    if !s.chars().any(is_unsafe) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    let mut rest = s;
    while let Some(c) = rest.chars().next() {
        if keep.palette && c == '\x1b' {
            if let Some(code) = PALETTE.iter().find(|p| rest.starts_with(**p)) {
                out.push_str(code);
                rest = &rest[code.len()..];
                continue;
            }
        }
        push_char(&mut out, c, keep);
        rest = &rest[c.len_utf8()..];
    }
    Cow::Owned(out)
}

/// A value shown on one line (a cell, a field): newlines escaped too.
pub fn one_line(s: &str) -> Cow<'_, str> {
    clean(s, Keep::default())
}

/// Multi-line text from the API (a diff, a message): newlines and tabs kept.
pub fn text(s: &str) -> Cow<'_, str> {
    clean(
        s,
        Keep {
            lines: true,
            ..Keep::default()
        },
    )
}

fn push_char(out: &mut String, c: char, keep: Keep) {
    let kept = match c {
        '\n' | '\t' => keep.lines,
        '\r' => keep.returns,
        _ => !is_unsafe(c),
    };
    if kept {
        out.push(c);
    } else if let Some(name) = match c {
        '\n' => Some("\\n"),
        '\t' => Some("\\t"),
        '\r' => Some("\\r"),
        _ => None,
    } {
        out.push_str(name);
    } else if (c as u32) < 0x80 {
        let _ = write!(out, "\\x{:02x}", c as u32);
    } else {
        let _ = write!(out, "\\u{{{:x}}}", c as u32);
    }
}

/// JSON text (as serde_json writes it: C0 already escaped) with DEL, C1 and
/// bidi controls written as `\uXXXX` too. They can only stand inside strings,
/// so the value read back is exactly the same.
pub fn json(s: &str) -> Cow<'_, str> {
    // Newlines are the pretty printer's whitespace (inside strings they are escaped).
    let unsafe_here = |c: char| c != '\n' && is_unsafe(c);
    if !s.chars().any(unsafe_here) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if unsafe_here(c) {
            let _ = write!(out, "\\u{:04x}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Bytes of someone else's log, cleaned as they stream: invalid UTF-8 is shown
/// as `\xNN`, unsafe characters escaped, newlines, tabs and carriage returns
/// kept. A character cut between two chunks waits for the rest.
#[derive(Debug, Default)]
pub struct ByteFilter {
    pending: Vec<u8>,
}

impl ByteFilter {
    const KEEP: Keep = Keep {
        lines: true,
        returns: true,
        palette: false,
    };

    pub fn push(&mut self, data: &[u8]) -> Vec<u8> {
        self.pending.extend_from_slice(data);
        let mut out = String::with_capacity(self.pending.len());
        let mut at = 0;
        loop {
            match std::str::from_utf8(&self.pending[at..]) {
                Ok(s) => {
                    out.push_str(&clean(s, Self::KEEP));
                    at = self.pending.len();
                    break;
                }
                Err(e) => {
                    let good = at + e.valid_up_to();
                    // Valid up to there, by valid_up_to().
                    let s = std::str::from_utf8(&self.pending[at..good]).unwrap_or_default();
                    out.push_str(&clean(s, Self::KEEP));
                    match e.error_len() {
                        Some(n) => {
                            for b in &self.pending[good..good + n] {
                                let _ = write!(out, "\\x{b:02x}");
                            }
                            at = good + n;
                        }
                        // Cut short: the rest may come in the next chunk.
                        None => {
                            at = good;
                            break;
                        }
                    }
                }
            }
        }
        self.pending.drain(..at);
        out.into_bytes()
    }

    /// What is left at the end of the stream (an incomplete character).
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = String::new();
        for b in self.pending.drain(..) {
            let _ = write!(out, "\\x{b:02x}");
        }
        out.into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const ATTACK: &str =
        "x\x1b]0;pwned\x07\x1b]52;c;ZWNobyBoaQ==\x07\x1b[2J\u{202e}cba\u{2066}\u{9b}31m\x7f\x08\ry";

    #[test]
    fn escapes_are_spelled_out() {
        assert_eq!(
            one_line(ATTACK),
            "x\\x1b]0;pwned\\x07\\x1b]52;c;ZWNobyBoaQ==\\x07\\x1b[2J\\u{202e}cba\\u{2066}\\u{9b}31m\\x7f\\x08\\ry"
        );
        assert_eq!(one_line("a\nb\tc"), "a\\nb\\tc");
        assert_eq!(text("a\nb\tc\r"), "a\nb\tc\\r");
        assert!(matches!(
            one_line("train.py --lr 0.1 é 中"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn only_gpuqs_own_colours_pass_and_only_when_asked() {
        let keep = Keep {
            lines: true,
            returns: false,
            palette: true,
        };
        assert_eq!(
            clean("\x1b[33mqueued\x1b[0m \x1b[8mhid\x1b[0m", keep),
            "\x1b[33mqueued\x1b[0m \\x1b[8mhid\x1b[0m"
        );
        assert_eq!(one_line("\x1b[33m"), "\\x1b[33m");
    }

    #[test]
    fn a_log_is_cleaned_across_chunks() {
        let bidi = "\u{202e}".as_bytes();
        let mut f = ByteFilter::default();
        let mut out = f.push(b"ok \x1b[2J\r\n\xff ");
        out.extend(f.push(&bidi[..1]));
        out.extend(f.push(&bidi[1..]));
        out.extend(f.push(b"\xe4\xb8"));
        out.extend(f.finish());
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "ok \\x1b[2J\r\n\\xff \\u{202e}\\xe4\\xb8"
        );
    }

    #[test]
    fn json_stays_exact() {
        let value = serde_json::json!({"note": ATTACK, "k\u{85}": "\u{2069}"});
        let text = serde_json::to_string_pretty(&value).unwrap();
        let safe = json(&text);
        assert!(!safe.chars().any(|c| is_unsafe(c) && c != '\n'), "{safe}");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&safe).unwrap(),
            value
        );
    }

    proptest! {
        #[test]
        fn no_unsafe_character_survives(s in any::<String>()) {
            let out = one_line(&s);
            prop_assert!(!out.chars().any(is_unsafe), "{out:?}");
            let out = text(&s);
            prop_assert!(!out.chars().any(|c| is_unsafe(c) && c != '\n' && c != '\t'));
        }

        #[test]
        fn printable_text_is_unchanged(s in "[^\\p{Cc}\u{202a}-\u{202e}\u{2066}-\u{2069}\u{200e}\u{200f}\u{61c}]*") {
            prop_assert_eq!(one_line(&s), s.as_str());
        }

        #[test]
        fn no_raw_escape_leaves_a_byte_stream(chunks in proptest::collection::vec(any::<Vec<u8>>(), 0..6)) {
            let mut f = ByteFilter::default();
            let mut out = Vec::new();
            for c in &chunks {
                out.extend(f.push(c));
            }
            out.extend(f.finish());
            let out = String::from_utf8(out).expect("the filter writes UTF-8");
            prop_assert!(!out.chars().any(|c| is_unsafe(c) && !"\n\t\r".contains(c)));
        }
    }
}
