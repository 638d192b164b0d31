//! One-pass, borrowing parser for JSON-RPC 2.0 request bodies (SPEC §1).
//!
//! The body is read once by serde_json with a hand-written visitor. The visitor never fails
//! on a *shape* problem: a wrong `jsonrpc`, a missing method, an id of the wrong type or a
//! duplicate member becomes an [`Entry::Invalid`] that still carries the id when it could be
//! read. Only a *syntax* problem (invalid JSON or UTF-8, trailing bytes, nesting beyond
//! [`MAX_DEPTH`]) fails the whole body, which is what makes the difference between `-32700`
//! and `-32600` exact even inside a batch.
//!
//! `id` and `params` are kept as `&RawValue` slices of the input: ids are echoed byte for
//! byte and never pass through a number type.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use crate::error::RpcError;

/// The deepest nesting of arrays/objects accepted, counted from the body's root. serde_json
/// enforces the same limit on the parts it builds itself; `params` are checked against the
/// remainder so that no handler is ever given a value its own deserialiser would refuse.
pub const MAX_DEPTH: usize = 128;

/// A request id as received: a JSON string, number or `null`, kept as the exact input bytes.
#[derive(Clone, Copy)]
pub struct Id<'a>(&'a RawValue);

impl PartialEq for Id<'_> {
    /// Byte equality of the received text: `1` and `1.0` are different ids.
    fn eq(&self, other: &Self) -> bool {
        self.raw() == other.raw()
    }
}
impl Eq for Id<'_> {}

impl<'a> Id<'a> {
    /// An id read by a door's own parser: `None` unless the JSON value is one the rules
    /// allow (a string, a number or null), as [`parse`] checks it.
    pub fn from_raw(raw: &'a RawValue) -> Option<Id<'a>> {
        matches!(raw.get().as_bytes().first(), Some(b'"' | b'-' | b'0'..=b'9' | b'n')).then_some(Id(raw))
    }

    /// The id's JSON text exactly as received (`1.0`, `"a\u0062"`, `null`, …).
    pub fn raw(&self) -> &'a str {
        self.0.get()
    }

    pub fn as_raw_value(&self) -> &'a RawValue {
        self.0
    }

    pub fn is_null(&self) -> bool {
        self.raw() == "null"
    }

    /// The text used as a correlation id: a string id's decoded content, a number's digits.
    /// `None` for `null`.
    pub fn text(&self) -> Option<Cow<'a, str>> {
        let raw = self.raw();
        if raw.starts_with('"') {
            serde_json::from_str::<Cow<'a, str>>(raw).ok()
        } else if raw == "null" {
            None
        } else {
            Some(Cow::Borrowed(raw))
        }
    }
}

impl fmt::Debug for Id<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.raw())
    }
}

/// A well-formed request or notification.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub method: Cow<'a, str>,
    /// `params` as received (an object or an array), if present.
    pub params: Option<&'a RawValue>,
    /// `None` when the `id` member is absent: a notification. `Some(null)` is a request.
    pub id: Option<Id<'a>>,
}

impl Request<'_> {
    pub fn is_notification(&self) -> bool {
        self.id.is_none()
    }
}

/// One element of a body: a request, or the reason it is not one.
#[derive(Debug, Clone)]
pub enum Entry<'a> {
    Valid(Request<'a>),
    /// Answered with `-32600`; `id` is the entry's id when it could be read, else `null`.
    Invalid {
        id: Option<Id<'a>>,
        error: RpcError,
    },
}

/// A parsed body.
#[derive(Debug, Clone)]
pub enum Message<'a> {
    Single(Entry<'a>),
    /// The entries of a JSON array, in order (possibly empty).
    Batch(Vec<Entry<'a>>),
}

/// Parse a body. `Err` is always a `-32700 Parse error` for the whole body.
pub fn parse(body: &[u8]) -> Result<Message<'_>, RpcError> {
    let text =
        std::str::from_utf8(body).map_err(|e| RpcError::parse_error(format_args!("invalid UTF-8: {e}")))?;
    parse_str(text)
}

/// Parse a body that is already known to be UTF-8.
pub fn parse_str(text: &str) -> Result<Message<'_>, RpcError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let msg =
        MessageSeed.deserialize(&mut de).and_then(|m| de.end().map(|()| m)).map_err(RpcError::parse_error)?;
    Ok(msg)
}

struct MessageSeed;

impl<'de> DeserializeSeed<'de> for MessageSeed {
    type Value = Message<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(MessageVisitor)
    }
}

struct MessageVisitor;

impl<'de> Visitor<'de> for MessageVisitor {
    type Value = Message<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON-RPC request object or a batch array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut entries = Vec::with_capacity(seq.size_hint().unwrap_or(4).min(64));
        // Entries sit at depth 2 (array, object); their params start at depth 3.
        while let Some(entry) = seq.next_element_seed(EntrySeed { depth: 2 })? {
            entries.push(entry);
        }
        Ok(Message::Batch(entries))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        EntryVisitor { depth: 1 }.visit_map(map).map(Message::Single)
    }

    forward_scalars_to_invalid!(Message::Single);
}

/// Every non-object entry (number, string, bool, null) is an invalid request with `id: null`.
macro_rules! forward_scalars_to_invalid {
    ($wrap:expr) => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok($wrap(not_an_object("a boolean")))
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok($wrap(not_an_object("a number")))
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok($wrap(not_an_object("a number")))
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok($wrap(not_an_object("a number")))
        }
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok($wrap(not_an_object("a string")))
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok($wrap(not_an_object("null")))
        }
    };
}
use forward_scalars_to_invalid;

fn not_an_object(what: &str) -> Entry<'static> {
    Entry::Invalid {
        id: None,
        error: RpcError::invalid_request(format_args!("a request must be an object, not {what}")),
    }
}

struct EntrySeed {
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for EntrySeed {
    type Value = Entry<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(EntryVisitor { depth: self.depth })
    }
}

struct EntryVisitor {
    /// Depth of the entry object itself.
    depth: usize,
}

impl<'de> Visitor<'de> for EntryVisitor {
    type Value = Entry<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON-RPC request object")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        // A nested array inside a batch: consume it (checking syntax and depth), reject it.
        while let Some(raw) = seq.next_element::<&'de RawValue>()? {
            check_depth(raw.get(), self.depth).map_err(de::Error::custom)?;
        }
        Ok(not_an_object("an array"))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut jsonrpc: Option<Text<'de>> = None;
        let mut method: Option<Text<'de>> = None;
        let mut params: Option<&'de RawValue> = None;
        let mut id: Option<&'de RawValue> = None;
        let mut duplicate: Option<Cow<'de, str>> = None;
        // A set, not a list: a body of 100,000 distinct unknown members must not cost
        // 10^10 comparisons. (An empty HashSet does not allocate.)
        let mut others: HashSet<Cow<'de, str>> = HashSet::new();

        while let Some(field) = map.next_key::<Field<'de>>()? {
            let name = field.name();
            let seen = match field {
                Field::Jsonrpc => {
                    let raw: &'de RawValue = map.next_value()?;
                    check_depth(raw.get(), self.depth).map_err(de::Error::custom)?;
                    jsonrpc.replace(Text::from_raw(raw).map_err(de::Error::custom)?).is_some()
                }
                Field::Method => {
                    let raw: &'de RawValue = map.next_value()?;
                    check_depth(raw.get(), self.depth).map_err(de::Error::custom)?;
                    method.replace(Text::from_raw(raw).map_err(de::Error::custom)?).is_some()
                }
                Field::Params => {
                    let raw: &'de RawValue = map.next_value()?;
                    check_depth(raw.get(), self.depth).map_err(de::Error::custom)?;
                    params.replace(raw).is_some()
                }
                Field::Id => {
                    let raw: &'de RawValue = map.next_value()?;
                    check_depth(raw.get(), self.depth).map_err(de::Error::custom)?;
                    id.replace(raw).is_some()
                }
                Field::Other(name) => {
                    let raw: &'de RawValue = map.next_value()?;
                    check_depth(raw.get(), self.depth).map_err(de::Error::custom)?;
                    if others.contains(&name) {
                        duplicate.get_or_insert(name);
                    } else {
                        others.insert(name);
                    }
                    false
                }
            };
            if seen && duplicate.is_none() {
                duplicate = Some(Cow::Borrowed(name));
            }
        }

        // The id first, so that every later rejection can carry it.
        let id = match id {
            None => None,
            Some(raw) => match raw.get().as_bytes()[0] {
                b'"' | b'-' | b'0'..=b'9' | b'n' => Some(Id(raw)),
                b'{' => return Ok(bad_id("an object")),
                b'[' => return Ok(bad_id("an array")),
                _ => return Ok(bad_id("a boolean")),
            },
        };
        let invalid = |reason: String| Entry::Invalid { id, error: RpcError::invalid_request(reason) };

        if let Some(name) = duplicate {
            // `{"id":1,"id":2}`: which id would we echo? Neither.
            let id = if name == "id" { None } else { id };
            return Ok(Entry::Invalid {
                id,
                error: RpcError::invalid_request(format_args!("duplicate member \"{name}\"")),
            });
        }
        match jsonrpc {
            Some(Text::Str(v)) if v == "2.0" => {}
            Some(_) => return Ok(invalid("\"jsonrpc\" must be exactly \"2.0\"".into())),
            None => return Ok(invalid("missing \"jsonrpc\": \"2.0\"".into())),
        }
        let method = match method {
            Some(Text::Str(m)) => m,
            Some(Text::Other) => return Ok(invalid("\"method\" must be a string".into())),
            None => return Ok(invalid("missing \"method\"".into())),
        };
        if let Some(p) = params
            && !matches!(p.get().as_bytes()[0], b'{' | b'[')
        {
            return Ok(invalid("\"params\" must be an object or an array".into()));
        }
        Ok(Entry::Valid(Request { method, params, id }))
    }

    forward_scalars_to_invalid!(std::convert::identity);
}

fn bad_id(what: &str) -> Entry<'static> {
    Entry::Invalid {
        id: None,
        error: RpcError::invalid_request(format_args!(
            "\"id\" must be a string, a number or null, not {what}"
        )),
    }
}

/// Rejects a raw value (inside a container at depth `base`) nested deeper than [`MAX_DEPTH`]
/// in total. serde_json skips a raw value iteratively (no recursion, no limit), so this scan
/// is what makes a 200,000-deep `params`, `id` or unknown member a parse error, and stops
/// such a value from ever reaching a handler's recursive deserialiser. Public for the doors that
/// take params outside the envelope (the flows door's body, as params: `base` 1).
pub fn check_depth(raw: &str, base: usize) -> Result<(), String> {
    let bytes = raw.as_bytes();
    // Scalars and shallow values are the common case: nothing to scan.
    if !matches!(bytes.first(), Some(b'{' | b'[')) {
        return Ok(());
    }
    // Depth grows only at an opening bracket: with no more of them than the room left (those
    // inside strings counted too), it cannot pass the limit. A count is one vectorised pass;
    // the exact scan below runs only for values that hold that many brackets.
    let openers = memchr::memchr2_iter(b'{', b'[', bytes).count();
    if base + openers <= MAX_DEPTH {
        return Ok(());
    }
    let (mut depth, mut in_str, mut esc) = (base, false, false);
    for &b in bytes {
        if in_str {
            if esc {
                esc = false;
            } else if b == b'\\' {
                esc = true;
            } else if b == b'"' {
                in_str = false;
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(format!("nesting deeper than {MAX_DEPTH} levels"));
                }
            }
            b'}' | b']' => depth -= 1,
            _ => {}
        }
    }
    Ok(())
}

/// A member name, classified without allocating for the four known ones.
enum Field<'a> {
    Jsonrpc,
    Method,
    Params,
    Id,
    Other(Cow<'a, str>),
}

impl Field<'_> {
    fn name(&self) -> &'static str {
        match self {
            Field::Jsonrpc => "jsonrpc",
            Field::Method => "method",
            Field::Params => "params",
            Field::Id => "id",
            Field::Other(_) => "",
        }
    }
}

impl<'de> de::Deserialize<'de> for Field<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Field<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(known(v).unwrap_or(Field::Other(Cow::Borrowed(v))))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(known(v).unwrap_or_else(|| Field::Other(Cow::Owned(v.to_owned()))))
            }
        }
        fn known(v: &str) -> Option<Field<'static>> {
            Some(match v {
                "jsonrpc" => Field::Jsonrpc,
                "method" => Field::Method,
                "params" => Field::Params,
                "id" => Field::Id,
                _ => return None,
            })
        }
        d.deserialize_str(V)
    }
}

/// A member value that should be a string: the string (borrowed when it has no escapes),
/// or the fact that it was something else (syntax- and depth-checked as a raw value, dropped).
///
/// Read from a `&RawValue` rather than through `deserialize_any`, so that a non-string value
/// is never interpreted: `"method": 1e400` is an invalid request, not a number overflow, and
/// a deeply nested `"method": [[[…]]]` meets [`check_depth`] like every other member.
enum Text<'a> {
    Str(Cow<'a, str>),
    Other,
}

impl<'de> Text<'de> {
    fn from_raw(raw: &'de RawValue) -> Result<Self, serde_json::Error> {
        let s = raw.get();
        if !s.starts_with('"') {
            return Ok(Text::Other);
        }
        // A raw string is already syntax-checked: quotes at both ends, no control characters.
        let inner = &s[1..s.len() - 1];
        if !inner.contains('\\') {
            return Ok(Text::Str(Cow::Borrowed(inner)));
        }
        // Escapes are decoded (and a lone surrogate refused) by serde_json.
        serde_json::from_str::<String>(s).map(|v| Text::Str(Cow::Owned(v)))
    }
}
