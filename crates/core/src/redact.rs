//! What may be printed of untrusted or secret text: store URLs without their password
//! (SPEC §12), logged values with control characters escaped and method names bounded
//! (SPEC §7).

use std::borrow::Cow;
use std::fmt;

/// `url` with its password replaced by `***`: the `scheme://user:password@host…` form and a
/// `password=` query parameter. Errs on the side of hiding: everything between the first `:`
/// of the user info and its last `@` is replaced, whatever it contains.
pub fn redact_url(url: &str) -> Cow<'_, str> {
    // Without a scheme, the whole text is read as what follows `://`.
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (&url[..scheme.len() + 3], rest),
        None => ("", url),
    };
    let query_at = rest.find(['?', '#']).unwrap_or(rest.len());
    let (before_query, query) = rest.split_at(query_at);
    let mut out = String::new();
    let mut changed = false;
    // The user info ends at the last `@` before the query: a password may contain `/` or `@`.
    match before_query.rfind('@') {
        Some(at) if before_query[..at].contains(':') => {
            let user = &before_query[..before_query.find(':').unwrap_or(0)];
            out.push_str(&format!("{scheme}{user}:***{}", &before_query[at..]));
            changed = true;
        }
        _ => out.push_str(&format!("{scheme}{before_query}")),
    }
    // `?password=…` (libpq URLs accept it).
    for (i, part) in query.split('&').enumerate() {
        if i > 0 {
            out.push('&');
        }
        let (lead, param) = match part.strip_prefix(['?', '#']) {
            Some(p) => (&part[..1], p),
            None => ("", part),
        };
        out.push_str(lead);
        match param.split_once('=') {
            Some((name, value)) if name.eq_ignore_ascii_case("password") && !value.is_empty() => {
                out.push_str(name);
                out.push_str("=***");
                changed = true;
            }
            _ => out.push_str(param),
        }
    }
    if changed { Cow::Owned(out) } else { Cow::Borrowed(url) }
}

/// Longest logged method name, in characters (SPEC §7).
pub const LOG_MAX_CHARS: usize = 128;

/// Displays untrusted text for a log line: at most [`LOG_MAX_CHARS`] characters (then `…`),
/// `\n`, `\r`, `\t`, `\\` and `"` as escapes and every other control character as `\u{..}`,
/// so a value can neither forge a line nor make one unbounded.
#[derive(Clone, Copy)]
pub struct LogSafe<'a>(pub &'a str);

impl<'a> LogSafe<'a> {
    /// The text itself when it is written unchanged (printable ASCII with nothing to escape,
    /// within [`LOG_MAX_CHARS`]): the common case, a method name or a key.
    pub fn as_plain(&self) -> Option<&'a str> {
        (self.plain_len() == self.0.len()).then_some(self.0)
    }

    /// How many leading bytes are written as they are.
    fn plain_len(&self) -> usize {
        self.0
            .bytes()
            .take(LOG_MAX_CHARS)
            .take_while(|&b| (b' '..=b'~').contains(&b) && b != b'\\' && b != b'"')
            .count()
    }
}

impl fmt::Display for LogSafe<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use fmt::Write;
        // The common text is written whole, up to the first byte that needs a look (each char
        // written alone cost ~10 instructions).
        let plain = self.plain_len();
        f.write_str(&self.0[..plain])?;
        if plain == self.0.len() {
            return Ok(());
        }
        for (i, c) in self.0[plain..].chars().enumerate().map(|(i, c)| (i + plain, c)) {
            if i == LOG_MAX_CHARS {
                return f.write_char('…');
            }
            match c {
                '\n' => f.write_str("\\n")?,
                '\r' => f.write_str("\\r")?,
                '\t' => f.write_str("\\t")?,
                '\\' => f.write_str("\\\\")?,
                '"' => f.write_str("\\\"")?,
                c if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') => {
                    write!(f, "\\u{{{:x}}}", c as u32)?
                }
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

impl fmt::Debug for LogSafe<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// An error and its sources on one line, `: `-separated: `reqwest` and `hyper` keep the cause
/// ("connection refused") in the source chain, out of their own message.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        out.push_str(": ");
        out.push_str(&s.to_string());
        src = s.source();
    }
    out
}

/// Whether a URL carries a user or password (`https://user:pass@host/…`). Configuration refuses
/// such URLs where a credential belongs in a header: a URL reaches log lines. The user info
/// ends at the last `@` before the query, as [`redact_url`] reads it (a password may hold `/`);
/// an `@` later in the path (`/users/@me`) is none.
pub fn has_userinfo(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let before_query = &rest[..rest.find(['?', '#']).unwrap_or(rest.len())];
    before_query.rfind('@').is_some_and(|at| {
        let user = &before_query[..at];
        user.contains(':') || !user.contains('/')
    })
}

#[cfg(test)]
mod tests {

    #[test]
    fn user_info_is_found_before_the_query_and_a_password_may_hold_a_slash() {
        for yes in ["https://bot:s3cret@mail.example/mcp", "http://bot@h/x", "https://u:p/w@h/mcp"] {
            assert!(has_userinfo(yes), "{yes}");
        }
        for no in ["https://mail.example/mcp?to=a@b.example", "http://h/users/@me", "http://127.0.0.1:4318"] {
            assert!(!has_userinfo(no), "{no}");
        }
    }
    use super::*;

    #[test]
    fn passwords_are_masked() {
        assert_eq!(
            redact_url("postgres://app:s3cret@127.0.0.1:5432/db"),
            "postgres://app:***@127.0.0.1:5432/db"
        );
        assert_eq!(redact_url("redis://:pw@host:6379/0"), "redis://:***@host:6379/0");
        assert_eq!(
            redact_url("postgres://a:p/w@d@h/db?sslmode=disable"),
            "postgres://a:***@h/db?sslmode=disable"
        );
        assert_eq!(
            redact_url("postgres://h/db?sslmode=disable&password=x"),
            "postgres://h/db?sslmode=disable&password=***"
        );
        assert_eq!(redact_url("postgres://h/db?password=x"), "postgres://h/db?password=***");
        assert_eq!(redact_url("app:pw@host/db"), "app:***@host/db");
        for same in
            ["postgres://app@h/db", "redis://h:6379", "sqlite://oncerpc.db", "memory://?capacity=5", "x"]
        {
            assert!(matches!(redact_url(same), Cow::Borrowed(s) if s == same), "{same}");
        }
    }

    #[test]
    fn log_safe_escapes_and_bounds() {
        assert_eq!(LogSafe("a\nb\r\tc\u{1b}\u{7f}\"\\").to_string(), "a\\nb\\r\\tc\\u{1b}\\u{7f}\\\"\\\\");
        let long = "é".repeat(1000);
        let shown = LogSafe(&long).to_string();
        assert_eq!(shown.chars().count(), LOG_MAX_CHARS + 1);
        assert!(shown.ends_with('…'));
        assert_eq!(LogSafe(&"x".repeat(LOG_MAX_CHARS)).to_string(), "x".repeat(LOG_MAX_CHARS));
    }

    /// The char-by-char rule the plain-prefix fast path must agree with.
    fn reference(text: &str) -> String {
        let mut out = String::new();
        for (i, c) in text.chars().enumerate() {
            if i == LOG_MAX_CHARS {
                out.push('…');
                break;
            }
            match c {
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                c if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') => {
                    out.push_str(&format!("\\u{{{:x}}}", c as u32))
                }
                c => out.push(c),
            }
        }
        out
    }

    proptest::proptest! {
        #[test]
        fn log_safe_writes_what_the_char_by_char_rule_writes(
            plain in "[ -~]{0,140}",
            rest in proptest::collection::vec(proptest::prelude::any::<char>(), 0..8),
        ) {
            let text: String = plain.chars().chain(rest).collect();
            proptest::prop_assert_eq!(LogSafe(&text).to_string(), reference(&text));
        }
    }

    #[test]
    fn log_safe_cuts_a_plain_prefix_at_the_limit() {
        for n in [LOG_MAX_CHARS - 1, LOG_MAX_CHARS, LOG_MAX_CHARS + 1] {
            for tail in ["", "\"", "é", "\n", "\u{2028}"] {
                let text = format!("{}{tail}", "k".repeat(n));
                assert_eq!(LogSafe(&text).to_string(), reference(&text), "{n} {tail:?}");
            }
        }
    }
}
