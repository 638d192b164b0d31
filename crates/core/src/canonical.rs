//! The canonical form of JSON text behind every fingerprint (SPEC §3): one iterative pass
//! over the raw text that sorts members, unescapes strings and writes every number by its exact
//! decimal value — see [`Walker`] for the form and why it is hand-written — plus
//! [`without_members`], which cuts members out of a text without touching any other byte.
//!
//! Why one file of about 690 lines: the walker, its string unescaper and its exact-decimal
//! number writer share one output buffer and one set of invariants (no recursion, every byte
//! of the input read once); split apart, each piece would expose the walker's internals to the
//! others. The fingerprints of every stored record depend on this form byte for byte, so it is
//! kept where it can be read, and changed, as one.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;

use oncerpc_protocol::{ErrorCode, RpcError};

/// Members of `params` that belong to oncerpc, not to the method (SPEC §3): the key, force
/// retry, and `_meta` (a request's metadata, such as its W3C trace context: it differs
/// between attempts of the same call, so it is no part of what the call asks for). They are
/// left out of the fingerprint, the schema's view and a flow's step input.
pub const RESERVED_PARAMS: [&str; 3] = ["idempotency_key", "force_retry", "_meta"];

/// Integers with at most this many digits (significant digits plus trailing zeros) are
/// written out as plain integers in the canonical form.
const PLAIN_INTEGER_DIGITS: i128 = 40;

/// The JSON text of an object `params` without its top-level members named in `names`
/// (compared unescaped); every other member byte for byte. Borrowed when nothing is removed.
/// The flows door forwards this to the first upstream step: it never passes through a
/// number type, so `100000000000000000001` reaches the upstream as written.
pub fn without_members<'a>(params: &'a str, names: &[&str]) -> Result<Cow<'a, str>, RpcError> {
    let mut w = Walker::new(params, false, usize::MAX);
    w.skip_ws();
    if w.peek() != Some(b'{') {
        return Ok(Cow::Borrowed(params));
    }
    w.pos += 1;
    // (start, end) of each member kept, and whether one was dropped.
    let mut kept: Vec<(usize, usize)> = Vec::new();
    let mut dropped = false;
    w.skip_ws();
    if w.peek() == Some(b'}') {
        return Ok(Cow::Borrowed(params));
    }
    loop {
        w.skip_ws();
        let start = w.pos;
        let name = w.member_name().map_err(WalkError::into_rpc)?;
        w.skip_ws();
        w.skip_value().map_err(WalkError::into_rpc)?;
        if names.contains(&&*name) {
            dropped = true;
        } else {
            kept.push((start, w.pos));
        }
        w.skip_ws();
        match w.next_byte() {
            Some(b',') => continue,
            Some(b'}') => break,
            _ => return Err(WalkError::Syntax("expected , or } after an object member", w.pos).into_rpc()),
        }
    }
    if !dropped {
        return Ok(Cow::Borrowed(params));
    }
    let mut out = String::with_capacity(params.len());
    out.push('{');
    for (i, &(s, e)) in kept.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        // Member boundaries sit on ASCII bytes (`"` and the value's last byte).
        out.push_str(params.get(s..e).ok_or_else(|| WalkError::Syntax("member bounds", s).into_rpc())?);
    }
    out.push('}');
    Ok(Cow::Owned(out))
}

/// Why a walk stopped.
#[derive(Debug)]
pub(crate) enum WalkError {
    /// Not JSON: what was expected, at which byte.
    Syntax(&'static str, usize),
    TooDeep(usize),
    Duplicate(String),
    KeyNotString,
    ForceRetryNotBool,
}

impl WalkError {
    pub(crate) fn into_rpc(self) -> RpcError {
        match self {
            WalkError::Syntax(what, at) => {
                RpcError::invalid_params(format!("invalid params: {what} at byte {at}"))
            }
            WalkError::TooDeep(limit) => {
                RpcError::invalid_params(format!("invalid params: nested deeper than {limit} levels"))
            }
            WalkError::Duplicate(name) => {
                // Named as a JSON string, cut so a megabyte-long name does not become the message.
                let mut shown: String = name.chars().take(64).collect();
                if shown.len() < name.len() {
                    shown.push('…');
                }
                let quoted = serde_json::to_string(&shown).unwrap_or_default();
                RpcError::with_message(
                    ErrorCode::InvalidRequest,
                    format!("duplicate member {quoted} in params"),
                )
            }
            WalkError::KeyNotString => RpcError::invalid_params("invalid idempotency key: must be a string"),
            WalkError::ForceRetryNotBool => {
                RpcError::invalid_params("invalid params: force_retry must be a boolean")
            }
        }
    }
}

/// What a walk produced.
pub(crate) struct Walked {
    /// The canonical text.
    pub out: Vec<u8>,
    pub key: Option<Arc<str>>,
    pub force_retry: bool,
}

/// A reserved top-level member.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reserved {
    Key,
    ForceRetry,
    /// Left out, unread.
    Meta,
}

struct Member<'a> {
    /// Unescaped.
    name: Cow<'a, str>,
    /// Where its canonical value sits in the walker's output.
    value: Range<usize>,
    reserved: Option<Reserved>,
}

enum Frame<'a> {
    Array,
    Object {
        /// Output length when the object opened: its members' values are written from here,
        /// then rewritten sorted when it closes.
        start: usize,
        members: Vec<Member<'a>>,
        /// The params' top-level object, whose reserved members are read and left out.
        root: bool,
    },
}

/// The canonical serialiser behind every fingerprint: one iterative pass over JSON text.
///
/// # Canonical form
/// - no insignificant whitespace; object members sorted by their unescaped name (UTF-8 byte
///   order); a duplicate name at any depth is an error;
/// - strings written as serde_json writes the unescaped string (`"a\u0062"` is `"ab"`);
/// - numbers by their exact decimal value `±D × 10^e` (`D` the significant digits, without
///   leading or trailing zeros), each value written one way only:
///   - zero is `0` (also `-0`, `0.0`, `0e5`);
///   - an integer of at most 40 digits is written out: `100`, `-12`, `100000000000000000001`;
///   - anything else laid out as serde_json 1.0.154 (the version pinned when fingerprints
///     were taken over `f64`s) writes an `f64`: fixed when the leading digit is at
///     10^-5…10^15 (`12.5`, `0.00001`), else scientific (`1e-6`, `1.5e+300`, `1e+400`,
///     `1.0000000000000000000000000000000000000001e+40`) — but with every digit of the value.
///
///   So `1`, `1.0`, `1e0` and `10e-1` are the same and `100000000000000000001` and
///   `100000000000000000002` are not. The form is a JSON number whose exact value is the
///   input's, hence distinct values never share it. Integers that fit `i64`/`u64` and
///   decimals an `f64` held exactly in its shortest form (`9.99`, `0.001`, `1.5e+300`) are
///   written as serde_json wrote them before, so their fingerprints (and the records
///   keyed by them) did not change when numbers stopped going through `f64`; what changed
///   is what was wrong: `1.0` (was `1.0`, now `1`), `-0`, and numbers an `f64` rounded.
///
/// The output is itself valid JSON.
///
/// # Why hand-written
/// A `serde_json::Value` has already lost the number: without the `arbitrary_precision`
/// feature every number past `u64` is an `f64` (and `1.0` stays distinct from `1`), and that
/// feature cannot be enabled without breaking `RawValue` and untagged enums across the
/// workspace. RFC 8785 (JCS) and the crates implementing it serialise numbers as IEEE doubles,
/// which is the very bug. So this walker reads the text itself.
///
/// # Robustness
/// No recursion (an explicit stack, bounded by `max_depth`), no indexing that can panic, and
/// no expansion an input can blow up: the exponent is carried as text (a huge one, as in
/// `1e999999999999999999999`, is adjusted by decimal string arithmetic, never expanded),
/// plain integers are at most 40 digits and a `0.000…` form has at most 5 added zeros.
/// Anything that is not JSON is an error, never a panic.
pub(crate) struct Walker<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    out: Vec<u8>,
    stack: Vec<Frame<'a>>,
    strip_reserved: bool,
    max_depth: usize,
    key: Option<Arc<str>>,
    force_retry: bool,
}

impl<'a> Walker<'a> {
    pub(crate) fn new(text: &'a str, strip_reserved: bool, max_depth: usize) -> Self {
        Walker {
            text,
            bytes: text.as_bytes(),
            pos: 0,
            out: Vec::with_capacity(text.len().min(1 << 16) + 16),
            stack: Vec::new(),
            strip_reserved,
            max_depth,
            key: None,
            force_retry: false,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn next_byte(&mut self) -> Option<u8> {
        let b = self.peek();
        if b.is_some() {
            self.pos += 1;
        }
        b
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    pub(crate) fn run(mut self) -> Result<Walked, WalkError> {
        'value: loop {
            self.skip_ws();
            match self.peek() {
                Some(open @ (b'{' | b'[')) => {
                    self.pos += 1;
                    if self.stack.len() >= self.max_depth {
                        return Err(WalkError::TooDeep(self.max_depth));
                    }
                    self.skip_ws();
                    let close = if open == b'{' { b'}' } else { b']' };
                    if self.peek() == Some(close) {
                        self.pos += 1;
                        self.out.extend_from_slice(if open == b'{' { b"{}" } else { b"[]" });
                    } else if open == b'{' {
                        let root = self.strip_reserved && self.stack.is_empty();
                        let start = self.out.len();
                        self.stack.push(Frame::Object { start, members: Vec::new(), root });
                        self.open_member()?;
                        continue 'value;
                    } else {
                        self.out.push(b'[');
                        self.stack.push(Frame::Array);
                        continue 'value;
                    }
                }
                Some(b'"') => {
                    let (token, escaped) = self.string_token()?;
                    if escaped {
                        let s = unescape(token, self.pos)?;
                        write_string(&mut self.out, &s);
                    } else {
                        // Nothing to unescape: the token is already what serde_json writes.
                        self.out.extend_from_slice(token.as_bytes());
                    }
                }
                Some(b't') => self.literal(b"true")?,
                Some(b'f') => self.literal(b"false")?,
                Some(b'n') => self.literal(b"null")?,
                Some(b'-' | b'0'..=b'9') => self.number()?,
                Some(_) => return Err(WalkError::Syntax("expected a value", self.pos)),
                None => return Err(WalkError::Syntax("unexpected end, expected a value", self.pos)),
            }
            // A value is complete: close what it completes, up to the next value to read.
            loop {
                match self.stack.last() {
                    None => {
                        self.skip_ws();
                        if self.pos != self.bytes.len() {
                            return Err(WalkError::Syntax("trailing characters", self.pos));
                        }
                        return Ok(Walked { out: self.out, key: self.key, force_retry: self.force_retry });
                    }
                    Some(Frame::Array) => {
                        self.skip_ws();
                        match self.next_byte() {
                            Some(b',') => {
                                self.out.push(b',');
                                continue 'value;
                            }
                            Some(b']') => {
                                self.out.push(b']');
                                self.stack.pop();
                            }
                            _ => return Err(WalkError::Syntax("expected , or ] in an array", self.pos)),
                        }
                    }
                    Some(Frame::Object { .. }) => {
                        self.close_member()?;
                        self.skip_ws();
                        match self.next_byte() {
                            Some(b',') => {
                                self.open_member()?;
                                continue 'value;
                            }
                            Some(b'}') => self.close_object()?,
                            _ => return Err(WalkError::Syntax("expected , or } in an object", self.pos)),
                        }
                    }
                }
            }
        }
    }

    /// `"name" :` of the innermost object; its value is read next.
    fn open_member(&mut self) -> Result<(), WalkError> {
        self.skip_ws();
        let name = self.member_name()?;
        let at = self.out.len();
        let Some(Frame::Object { members, root, .. }) = self.stack.last_mut() else {
            return Err(WalkError::Syntax("a member outside an object", self.pos));
        };
        let reserved = match &*name {
            _ if !*root => None,
            n if n == RESERVED_PARAMS[0] => Some(Reserved::Key),
            n if n == RESERVED_PARAMS[1] => Some(Reserved::ForceRetry),
            n if n == RESERVED_PARAMS[2] => Some(Reserved::Meta),
            _ => None,
        };
        members.push(Member { name, value: at..at, reserved });
        Ok(())
    }

    /// `"name" :`, the name unescaped.
    fn member_name(&mut self) -> Result<Cow<'a, str>, WalkError> {
        if self.peek() != Some(b'"') {
            return Err(WalkError::Syntax("expected a member name", self.pos));
        }
        let (token, escaped) = self.string_token()?;
        let name = if escaped {
            Cow::Owned(unescape(token, self.pos)?)
        } else {
            // Strip the quotes (ASCII, so on character boundaries).
            Cow::Borrowed(token.get(1..token.len() - 1).unwrap_or_default())
        };
        self.skip_ws();
        if self.next_byte() != Some(b':') {
            return Err(WalkError::Syntax("expected : after a member name", self.pos));
        }
        Ok(name)
    }

    /// The innermost object's last member has its value: note where it ends; read a
    /// reserved one and take it out of the output.
    fn close_member(&mut self) -> Result<(), WalkError> {
        let end = self.out.len();
        let Some(Frame::Object { members, .. }) = self.stack.last_mut() else {
            return Err(WalkError::Syntax("a member outside an object", self.pos));
        };
        let Some(m) = members.last_mut() else {
            return Err(WalkError::Syntax("a value without a member name", self.pos));
        };
        m.value.end = end;
        let Some(reserved) = m.reserved else { return Ok(()) };
        let value = self.out.get(m.value.clone()).unwrap_or_default();
        match reserved {
            // The value's canonical form: a JSON string exactly when the value is one.
            Reserved::Key => match value {
                // Without an escape, the text between the quotes is the key: taken as it is,
                // not parsed into a `String` first and copied again into the `Arc`.
                [b'"', inner @ .., b'"'] if !inner.contains(&b'\\') => match std::str::from_utf8(inner) {
                    Ok(k) => self.key = Some(Arc::from(k)),
                    Err(_) => return Err(WalkError::KeyNotString),
                },
                [b'"', ..] => match serde_json::from_slice::<String>(value) {
                    Ok(k) => self.key = Some(Arc::from(k)),
                    Err(_) => return Err(WalkError::KeyNotString),
                },
                _ => return Err(WalkError::KeyNotString),
            },
            Reserved::ForceRetry => match value {
                b"true" => self.force_retry = true,
                b"false" => self.force_retry = false,
                _ => return Err(WalkError::ForceRetryNotBool),
            },
            Reserved::Meta => {}
        }
        let start = m.value.start;
        m.value.end = start;
        self.out.truncate(start);
        Ok(())
    }

    /// Rewrite the innermost object with its members sorted by name.
    fn close_object(&mut self) -> Result<(), WalkError> {
        let Some(Frame::Object { start, mut members, .. }) = self.stack.pop() else {
            return Err(WalkError::Syntax("} without an object", self.pos));
        };
        let values = self.out.split_off(start);
        members.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        if let Some(w) = members.windows(2).find(|w| w[0].name == w[1].name) {
            return Err(WalkError::Duplicate(w[0].name.clone().into_owned()));
        }
        self.out.push(b'{');
        let mut first = true;
        for m in members.iter().filter(|m| m.reserved.is_none()) {
            if !first {
                self.out.push(b',');
            }
            first = false;
            write_string(&mut self.out, &m.name);
            self.out.push(b':');
            let value = m
                .value
                .start
                .checked_sub(start)
                .zip(m.value.end.checked_sub(start))
                .and_then(|(s, e)| values.get(s..e))
                .ok_or(WalkError::Syntax("member bounds", self.pos))?;
            self.out.extend_from_slice(value);
        }
        self.out.push(b'}');
        Ok(())
    }

    /// A string token, quotes included, and whether it holds an escape. Not unescaped.
    fn string_token(&mut self) -> Result<(&'a str, bool), WalkError> {
        let start = self.pos;
        self.pos += 1;
        let mut escaped = false;
        loop {
            match self.peek() {
                None => return Err(WalkError::Syntax("unterminated string", start)),
                Some(b'"') => {
                    self.pos += 1;
                    break;
                }
                Some(b'\\') => {
                    // The escape itself is checked when the token is unescaped.
                    escaped = true;
                    self.pos += 2;
                }
                Some(b) if b < 0x20 => {
                    return Err(WalkError::Syntax("control character in a string", self.pos));
                }
                Some(_) => self.pos += 1,
            }
        }
        // Both ends are `"`, so on character boundaries.
        let token = self.text.get(start..self.pos).ok_or(WalkError::Syntax("invalid string", start))?;
        Ok((token, escaped))
    }

    fn literal(&mut self, word: &'static [u8]) -> Result<(), WalkError> {
        if self.bytes.get(self.pos..self.pos + word.len()) != Some(word) {
            return Err(WalkError::Syntax("invalid literal", self.pos));
        }
        self.pos += word.len();
        self.out.extend_from_slice(word);
        Ok(())
    }

    fn digits(&mut self) -> &'a [u8] {
        let start = self.pos;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
        self.bytes.get(start..self.pos).unwrap_or_default()
    }

    /// A number, checked against the JSON grammar, written in canonical form.
    fn number(&mut self) -> Result<(), WalkError> {
        let at = self.pos;
        let negative = self.peek() == Some(b'-');
        if negative {
            self.pos += 1;
        }
        let int = self.digits();
        if int.is_empty() || (int.len() > 1 && int[0] == b'0') {
            return Err(WalkError::Syntax("invalid number", at));
        }
        let mut frac: &[u8] = &[];
        if self.peek() == Some(b'.') {
            self.pos += 1;
            frac = self.digits();
            if frac.is_empty() {
                return Err(WalkError::Syntax("invalid number", at));
            }
        }
        let mut exp_negative = false;
        let mut exp: &[u8] = b"0";
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            match self.peek() {
                Some(b'-') => {
                    exp_negative = true;
                    self.pos += 1;
                }
                Some(b'+') => self.pos += 1,
                _ => {}
            }
            exp = self.digits();
            if exp.is_empty() {
                return Err(WalkError::Syntax("invalid number", at));
            }
        }
        write_number(&mut self.out, negative, int, frac, exp_negative, exp)
            .map_err(|()| WalkError::Syntax("invalid number", at))
    }

    /// Skip one value (for [`without_members`]): syntax is checked only as far as finding
    /// its end needs.
    fn skip_value(&mut self) -> Result<(), WalkError> {
        let mut depth = 0usize;
        loop {
            self.skip_ws();
            match self.peek() {
                None => return Err(WalkError::Syntax("unexpected end", self.pos)),
                Some(b'"') => {
                    self.string_token()?;
                }
                Some(b'{' | b'[') => {
                    depth += 1;
                    self.pos += 1;
                    continue;
                }
                Some(b'}' | b']') if depth > 0 => {
                    depth -= 1;
                    self.pos += 1;
                }
                Some(b',' | b':') if depth > 0 => {
                    self.pos += 1;
                    continue;
                }
                Some(b'}' | b']' | b',' | b':') => {
                    return Err(WalkError::Syntax("expected a value", self.pos));
                }
                Some(_) => {
                    while !matches!(
                        self.peek(),
                        None | Some(b',' | b'}' | b']' | b':' | b' ' | b'\t' | b'\n' | b'\r')
                    ) {
                        self.pos += 1;
                    }
                }
            }
            if depth == 0 {
                return Ok(());
            }
        }
    }
}

/// Unescape a string token (quotes included), checking its escapes.
fn unescape(token: &str, at: usize) -> Result<String, WalkError> {
    serde_json::from_str::<String>(token).map_err(|_| WalkError::Syntax("invalid string escape", at))
}

/// A string as serde_json writes it: only `"`, `\` and control characters escaped.
fn write_string(out: &mut Vec<u8>, s: &str) {
    // Writing a `&str` into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

/// The canonical form of the number `-? int . frac e ±exp` (grammar already checked, all
/// slices ASCII digits, `int` and `exp` non-empty). `Err` only if the exponent arithmetic
/// meets a case its preconditions exclude.
fn write_number(
    out: &mut Vec<u8>,
    negative: bool,
    int: &[u8],
    frac: &[u8],
    exp_negative: bool,
    exp: &[u8],
) -> Result<(), ()> {
    // The significand's digits are int ++ frac; the value is that integer × 10^(exp - |frac|).
    let digit = |i: usize| if i < int.len() { int[i] } else { frac[i - int.len()] };
    let total = int.len() + frac.len();
    let Some(first) = (0..total).find(|&i| digit(i) != b'0') else {
        out.push(b'0');
        return Ok(());
    };
    let last = (first..total).rev().find(|&i| digit(i) != b'0').unwrap_or(first);
    // The value is ±D × 10^e with D = digits[first..=last], n digits long, and
    // e = exp + shift, shift = trailing zeros − |frac| (bounded by the text's length).
    let n = last - first + 1;
    let d = |i: usize| digit(first + i);
    let shift = (total - 1 - last) as i128 - frac.len() as i128;
    let exp = strip_leading_zeros(exp);
    if negative {
        out.push(b'-');
    }
    if exp.len() > 30 {
        // |exp| ≥ 10^30 is far beyond |shift| and n: only the scientific form applies, and
        // its exponent e + n − 1 keeps exp's sign; its magnitude moves by decimal arithmetic
        // on the digits themselves.
        let delta = shift + (n as i128 - 1);
        let magnitude = add_to_decimal(exp, if exp_negative { -delta } else { delta })?;
        write_scientific(out, n, d, exp_negative, &magnitude);
        return Ok(());
    }
    // |exp| < 10^30 and |shift|, n < 2^64: no overflow in i128.
    let e = exp.iter().fold(0i128, |acc, d| acc * 10 + i128::from(d - b'0'));
    let e = if exp_negative { -e } else { e } + shift;
    // The decimal point sits after the first `point` digits of D: 10^(point-1) ≤ |v| < 10^point.
    let point = n as i128 + e;
    if e >= 0 && point <= PLAIN_INTEGER_DIGITS {
        (0..n).for_each(|i| out.push(d(i)));
        out.extend(std::iter::repeat_n(b'0', e as usize));
    } else if (1..=16).contains(&point) {
        // e < 0 here (else the integer above): digits on both sides of the point.
        let point = point as usize;
        (0..point).for_each(|i| out.push(d(i)));
        out.push(b'.');
        (point..n).for_each(|i| out.push(d(i)));
    } else if (-4..=0).contains(&point) {
        out.extend_from_slice(b"0.");
        out.extend(std::iter::repeat_n(b'0', point.unsigned_abs() as usize));
        (0..n).for_each(|i| out.push(d(i)));
    } else {
        let sci = point - 1;
        write_scientific(out, n, d, sci < 0, sci.unsigned_abs().to_string().as_bytes());
    }
    Ok(())
}

/// `D.DDDe+X` / `D.DDDe-X` (`De+X` for one digit), as serde_json writes an `f64`.
fn write_scientific(out: &mut Vec<u8>, n: usize, d: impl Fn(usize) -> u8, negative: bool, magnitude: &[u8]) {
    out.push(d(0));
    if n > 1 {
        out.push(b'.');
        (1..n).for_each(|i| out.push(d(i)));
    }
    out.extend_from_slice(if negative { b"e-" } else { b"e+" });
    out.extend_from_slice(magnitude);
}

fn strip_leading_zeros(digits: &[u8]) -> &[u8] {
    let zeros = digits.iter().take_while(|&&d| d == b'0').count();
    &digits[zeros..]
}

/// `digits + delta` for a decimal digit string much larger than `|delta|`, as a digit
/// string without leading zeros. `Err` if the result would not be positive.
fn add_to_decimal(digits: &[u8], delta: i128) -> Result<Vec<u8>, ()> {
    let mut v = digits.to_vec();
    let mut carry = delta;
    for d in v.iter_mut().rev() {
        if carry == 0 {
            break;
        }
        let x = i128::from(*d - b'0') + carry;
        *d = b'0' + x.rem_euclid(10) as u8;
        carry = x.div_euclid(10);
    }
    if carry < 0 {
        return Err(());
    }
    if carry > 0 {
        let mut out = carry.to_string().into_bytes();
        out.extend_from_slice(&v);
        return Ok(out);
    }
    let out = strip_leading_zeros(&v);
    if out.is_empty() {
        return Err(());
    }
    Ok(out.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_string_arithmetic() {
        assert_eq!(add_to_decimal(b"999", 1).unwrap(), b"1000");
        assert_eq!(add_to_decimal(b"1000", -1).unwrap(), b"999");
        assert_eq!(
            add_to_decimal(b"1000000000000000000000000000000000", -999).unwrap(),
            b"999999999999999999999999999999001"
        );
        assert_eq!(add_to_decimal(b"5", 0).unwrap(), b"5");
        assert_eq!(add_to_decimal(b"5", 1_000_000).unwrap(), b"1000005");
        assert!(add_to_decimal(b"5", -5).is_err());
        assert!(add_to_decimal(b"5", -6).is_err());
    }
}
