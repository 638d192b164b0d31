//! Property tests of the params fingerprint (SPEC §3, issue "fingerprints compare f64s"):
//!
//! (a) every spelling of one decimal value — the significand scaled by 10^k with the exponent
//!     adjusted, trailing zeros, leading zeros in the fraction or the exponent, `e`/`E`, `+` —
//!     fingerprints the same, and its canonical form is the one the rule predicts;
//! (b) distinct values fingerprint differently: big integers (20–60 digits) that an `f64`
//!     would merge, and arbitrary decimals;
//! (c) a JSON object fingerprints the same whatever its member order, whitespace, string
//!     escapes, integer spelling and reserved members, and the same as its `Value`;
//! (d) decimals an `f64` held keep the text serde_json wrote for them, so fingerprints stored
//!     before this change still match;
//! (e) no text makes the canonical walker panic.

use oncerpc_core::idempotency::{CommandParams, canonical_json, command_params, fingerprint};
use oncerpc_core::protocol::{RawValue, RpcError};
use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::Value;
use std::collections::BTreeMap;

fn params(text: &str) -> Result<CommandParams, RpcError> {
    let raw = RawValue::from_string(text.to_owned()).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    command_params(Some(&raw))
}

fn fp(text: &str) -> String {
    params(text).unwrap_or_else(|e| panic!("{text}: {e:?}")).fingerprint
}

fn canon(text: &str) -> String {
    canonical_json(text).unwrap_or_else(|e| panic!("{text}: {e:?}"))
}

// ---------------------------------------------------------------------------------------------
// (a) / (b) numbers

/// A non-zero decimal value `±D × 10^E`: `D` significant digits without leading or trailing
/// zeros.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Decimal {
    negative: bool,
    digits: String,
    exp: i64,
}

impl Decimal {
    /// The canonical form the rule predicts: a plain integer up to 40 digits; else fixed
    /// when the leading digit is at 10^-5…10^15, else scientific (serde_json's `f64` layout).
    fn canonical(&self) -> String {
        let sign = if self.negative { "-" } else { "" };
        let d = &self.digits;
        let point = d.len() as i64 + self.exp;
        if self.exp >= 0 && point <= 40 {
            format!("{sign}{d}{}", "0".repeat(self.exp as usize))
        } else if (1..=16).contains(&point) {
            format!("{sign}{}.{}", &d[..point as usize], &d[point as usize..])
        } else if (-4..=0).contains(&point) {
            format!("{sign}0.{}{d}", "0".repeat(point.unsigned_abs() as usize))
        } else {
            let rest = if d.len() > 1 { format!(".{}", &d[1..]) } else { String::new() };
            let esign = if point - 1 < 0 { '-' } else { '+' };
            format!("{sign}{}{rest}e{esign}{}", &d[..1], (point - 1).unsigned_abs())
        }
    }
}

fn decimal() -> impl Strategy<Value = Decimal> {
    // Half near zero, where plain integers and short decimals live.
    (any::<bool>(), "[1-9]([0-9]{0,40}[1-9])?", prop_oneof![-400i64..400, -8i64..40])
        .prop_map(|(negative, digits, exp)| Decimal { negative, digits, exp })
}

/// How to write a [`Decimal`]: every choice keeps the value.
#[derive(Debug, Clone)]
struct Spelling {
    /// Zeros appended to the significand (the exponent goes down as much).
    scale: usize,
    /// Zeros put before the significand (written as `0.000…`, so the point goes first).
    leading: usize,
    /// Where the point goes in the scaled significand (when there are no leading zeros).
    point: usize,
    /// Zeros added after the fraction.
    trailing: usize,
    /// Leading zeros of the exponent.
    exp_zeros: usize,
    upper_e: bool,
    plus: bool,
    /// Leave out a zero exponent.
    omit_zero_exp: bool,
}

fn spelling() -> impl Strategy<Value = Spelling> {
    (
        0usize..25,
        prop_oneof![3 => Just(0usize), 1 => 1usize..6],
        0usize..70,
        0usize..4,
        0usize..4,
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(scale, leading, point, trailing, exp_zeros, upper_e, plus, omit_zero_exp)| {
            Spelling { scale, leading, point, trailing, exp_zeros, upper_e, plus, omit_zero_exp }
        })
}

/// `d` written as `s` says: significand `0…0 D 0…0` with a point somewhere, and the exponent
/// that makes it the same value.
fn spell(d: &Decimal, s: &Spelling) -> String {
    let scaled = format!("{}{}", d.digits, "0".repeat(s.scale));
    let (int, frac) = if s.leading > 0 {
        ("0".to_string(), format!("{}{}", "0".repeat(s.leading - 1), scaled))
    } else {
        let p = s.point.min(scaled.len());
        let (i, f) = scaled.split_at(p);
        (if i.is_empty() { "0".to_string() } else { i.to_string() }, f.to_string())
    };
    // value = int.frac × 10^e  ⇔  e = E − scale + |frac| (the zeros before D are in frac).
    let e = d.exp - s.scale as i64 + frac.len() as i64;
    let frac = if frac.is_empty() && s.trailing == 0 {
        String::new()
    } else {
        format!(".{frac}{}", "0".repeat(s.trailing))
    };
    let sign = if d.negative { "-" } else { "" };
    let exp = if e == 0 && s.omit_zero_exp {
        String::new()
    } else {
        let esign = if e < 0 {
            "-"
        } else if s.plus {
            "+"
        } else {
            ""
        };
        format!("{}{esign}{}{}", if s.upper_e { 'E' } else { 'e' }, "0".repeat(s.exp_zeros), e.unsigned_abs())
    };
    format!("{sign}{int}{frac}{exp}")
}

/// Zero, spelled many ways.
fn zero() -> impl Strategy<Value = String> {
    (any::<bool>(), 0usize..5, any::<bool>(), -500i64..500).prop_map(|(neg, frac, exp, e)| {
        let mut s = format!("{}0", if neg { "-" } else { "" });
        if frac > 0 {
            s.push('.');
            s.push_str(&"0".repeat(frac));
        }
        if exp {
            s.push_str(&format!("e{e}"));
        }
        s
    })
}

// ---------------------------------------------------------------------------------------------
// (c) objects

/// A JSON tree whose objects have unique member names (in generation order).
#[derive(Debug, Clone)]
enum Node {
    Null,
    Bool(bool),
    Int(i64),
    Str(String),
    Array(Vec<Node>),
    Object(Vec<(String, Node)>),
}

fn node() -> impl Strategy<Value = Node> {
    let leaf = prop_oneof![
        Just(Node::Null),
        any::<bool>().prop_map(Node::Bool),
        any::<i64>().prop_map(Node::Int),
        "[a-zA-Z0-9 é\"\\\\/\n😀]{0,6}".prop_map(Node::Str),
    ];
    leaf.prop_recursive(5, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Node::Array),
            prop::collection::btree_map("[a-z_é]{1,6}", inner, 0..6)
                .prop_map(|m: BTreeMap<String, Node>| Node::Object(m.into_iter().collect())),
        ]
    })
}

fn value(n: &Node) -> Value {
    match n {
        Node::Null => Value::Null,
        Node::Bool(b) => Value::Bool(*b),
        Node::Int(i) => Value::from(*i),
        Node::Str(s) => Value::String(s.clone()),
        Node::Array(items) => Value::Array(items.iter().map(value).collect()),
        Node::Object(members) => Value::Object(members.iter().map(|(k, v)| (k.clone(), value(v))).collect()),
    }
}

/// A small keyed hash, to order members pseudo-randomly per seed.
fn mix(seed: u64, s: &str) -> u64 {
    let mut h = seed ^ 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Write `n` with members in a seed-given order; `odd` also varies whitespace, string
/// escapes and integer spelling (`5` as `5.0`, `50e-1`, `0.5E1`).
fn write(n: &Node, seed: u64, odd: bool, out: &mut String) {
    let ws = |out: &mut String, salt: &str| {
        if odd && mix(seed, salt).is_multiple_of(3) {
            out.push_str(" \n\t");
        }
    };
    match n {
        Node::Null => out.push_str("null"),
        Node::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Node::Int(i) => {
            if odd {
                match mix(seed, &i.to_string()) % 4 {
                    0 => out.push_str(&format!("{i}.0")),
                    1 => out.push_str(&format!("{i}0e-1")),
                    2 => out.push_str(&format!("{i}00E-0002")),
                    _ => out.push_str(&i.to_string()),
                }
            } else {
                out.push_str(&i.to_string());
            }
        }
        Node::Str(s) => write_str(s, seed, odd, out),
        Node::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                ws(out, &format!("a{i}"));
                write(item, seed, odd, out);
            }
            out.push(']');
        }
        Node::Object(members) => {
            let mut members: Vec<&(String, Node)> = members.iter().collect();
            members.sort_by_key(|(k, _)| mix(seed, k));
            out.push('{');
            for (i, (k, v)) in members.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                ws(out, k);
                write_str(k, seed, odd, out);
                ws(out, k);
                out.push(':');
                write(v, seed, odd, out);
            }
            out.push('}');
        }
    }
}

/// A JSON string; `odd`: some characters as `\uXXXX` escapes (surrogate pairs included).
fn write_str(s: &str, seed: u64, odd: bool, out: &mut String) {
    if !odd {
        out.push_str(&serde_json::to_string(s).unwrap());
        return;
    }
    out.push('"');
    for (i, c) in s.chars().enumerate() {
        if mix(seed, &format!("{s}{i}")).is_multiple_of(2) {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{u:04X}"));
            }
        } else {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '/' => out.push_str("\\/"),
                c => out.push(c),
            }
        }
    }
    out.push('"');
}

/// A JSON-ish token soup, for (d).
fn soup() -> impl Strategy<Value = String> {
    let token = prop::sample::select(vec![
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        "\"",
        "\\",
        "\"a\"",
        "\"\\u0061\"",
        "\"\\ud800\"",
        "1",
        "-",
        "0",
        "1.5",
        "e",
        "E",
        "+",
        "1e999999999999999999999999999999999999",
        "-0.0e-0",
        "true",
        "nul",
        " ",
        "\u{1}",
        "é",
        "\"idempotency_key\"",
        "\"force_retry\"",
    ]);
    prop::collection::vec(token, 0..40).prop_map(|t| t.concat())
}

proptest! {
    #![proptest_config(Config { cases: 512, ..Config::default() })]

    /// (a) Every spelling of one value has the fingerprint of every other, and the predicted
    /// canonical form.
    #[test]
    fn spellings_of_one_value_fingerprint_equal(d in decimal(), a in spelling(), b in spelling()) {
        let (sa, sb) = (spell(&d, &a), spell(&d, &b));
        prop_assert_eq!(canon(&sa), d.canonical(), "{}", sa);
        prop_assert_eq!(canon(&sb), d.canonical(), "{}", sb);
        // The form is a JSON number of the same value, and its own canonical form.
        let c = d.canonical();
        prop_assert_eq!(canon(&c), c.clone());
        prop_assert_eq!(c.parse::<f64>().unwrap(), sa.parse::<f64>().unwrap());
        prop_assert_eq!(fp(&format!(r#"{{"amount":{sa}}}"#)), fp(&format!(r#"{{"amount":{sb}}}"#)));
    }

    #[test]
    fn zero_has_one_form(z in zero()) {
        prop_assert_eq!(canon(&z), "0");
        prop_assert_eq!(fp(&format!("[{z}]")), fp("[0]"));
    }

    /// (b) Different big integers (where f64 keeps only ~17 digits) fingerprint differently.
    #[test]
    fn distinct_big_integers_fingerprint_differently(
        a in "-?[1-9][0-9]{19,59}",
        b in "-?[1-9][0-9]{19,59}",
    ) {
        prop_assume!(a != b);
        prop_assert_ne!(canon(&a), canon(&b));
        prop_assert_ne!(fp(&format!(r#"{{"amount":{a}}}"#)), fp(&format!(r#"{{"amount":{b}}}"#)));
    }

    /// (b) One digit apart: the pairs an f64 merges.
    #[test]
    fn big_integers_one_digit_apart_fingerprint_differently(
        a in "[1-9][0-9]{19,59}",
        at in any::<prop::sample::Index>(),
        step in 0u8..72,
    ) {
        let mut b = a.clone().into_bytes();
        let i = at.index(b.len());
        let old = b[i] - b'0';
        // Another digit; never a leading zero.
        b[i] = b'0' + if i == 0 { 1 + (old - 1 + 1 + step % 8) % 9 } else { (old + 1 + step % 9) % 10 };
        prop_assert_ne!(b[i], b'0' + old);
        let b = String::from_utf8(b).unwrap();
        prop_assert_ne!(fp(&format!(r#"{{"amount":{a}}}"#)), fp(&format!(r#"{{"amount":{b}}}"#)));
        // Integers up to 40 digits stay plain integers.
        if a.len() <= 40 {
            prop_assert_eq!(canon(&a), a);
        }
    }

    /// (b) Distinct decimals have distinct canonical forms.
    #[test]
    fn distinct_decimals_fingerprint_differently(x in decimal(), y in decimal(), sx in spelling(), sy in spelling()) {
        prop_assume!(x != y);
        let (a, b) = (spell(&x, &sx), spell(&y, &sy));
        prop_assert_ne!(canon(&a), canon(&b), "{} vs {}", a, b);
        prop_assert_ne!(fp(&format!("[{a}]")), fp(&format!("[{b}]")));
    }

    /// (c) Member order, whitespace, escapes, integer spelling and the reserved members do not
    /// change the fingerprint, which is also the `Value`'s.
    #[test]
    fn shuffled_objects_fingerprint_equal(
        members in prop::collection::btree_map("[a-z]{1,6}", node(), 0..8),
        s1 in any::<u64>(),
        s2 in any::<u64>(),
        key in prop::option::of("[a-z0-9-]{3,10}"),
    ) {
        let members: BTreeMap<String, Node> = members
            .into_iter()
            .filter(|(k, _)| k != "idempotency_key" && k != "force_retry")
            .collect();
        let tree = Node::Object(members.into_iter().collect());
        let mut plain = String::new();
        write(&tree, s1, false, &mut plain);
        let mut odd = String::new();
        write(&tree, s2, true, &mut odd);
        if let Some(k) = &key {
            // The key at the front, in the middle of the text's order or at the end.
            let inner = odd.strip_prefix('{').unwrap().strip_suffix('}').unwrap();
            odd = if inner.is_empty() {
                format!(r#"{{"idempotency_key":"{k}"}}"#)
            } else if s2 % 2 == 0 {
                format!(r#"{{"idempotency_key":"{k}",{inner}}}"#)
            } else {
                format!(r#"{{{inner},"force_retry":false,"idempotency_key":"{k}"}}"#)
            };
        }
        let p = params(&odd).unwrap_or_else(|e| panic!("{odd}: {e:?}"));
        prop_assert_eq!(&p.fingerprint, &fp(&plain), "{} vs {}", plain, odd);
        prop_assert_eq!(&p.fingerprint, &fingerprint(&value(&tree)));
        prop_assert_eq!(p.key.as_deref(), key.as_deref());
        // The canonical form is JSON that means the same as the input.
        let c: Value = serde_json::from_str(&canon(&plain)).unwrap();
        prop_assert_eq!(c, value(&tree));
    }

    /// (d) Decimals an `f64` holds keep the text serde_json wrote for them (the fingerprints
    /// stored before numbers stopped going through `f64`), except integers up to 40 digits,
    /// now written out (`1.0` was `1.0`, `1e20` was `1e+20`), and `-0.0`, now `0`.
    #[test]
    fn f64_texts_keep_their_form(x in any::<f64>().prop_filter("finite", |x| x.is_finite())) {
        let text = serde_json::to_string(&x).unwrap();
        let c = canon(&text);
        if x == 0.0 {
            prop_assert_eq!(c, "0");
        } else if x.fract() == 0.0 && x.abs() < 1e40 {
            prop_assert!(c.bytes().all(|b| b.is_ascii_digit() || b == b'-'), "{} -> {}", text, c);
            prop_assert_eq!(c.parse::<f64>().unwrap(), x);
        } else {
            prop_assert_eq!(c, text);
        }
    }

    /// (e) The walker answers every text, never panics.
    #[test]
    fn no_text_panics(s in soup(), junk in ".{0,64}") {
        let _ = canonical_json(&s);
        let _ = canonical_json(&junk);
        let _ = oncerpc_core::idempotency::without_members(&s, &oncerpc_core::RESERVED_PARAMS);
        // And a text the walker accepts is JSON.
        if canonical_json(&s).is_ok() {
            prop_assert!(serde_json::from_str::<&RawValue>(&s).is_ok(), "{}", s);
        }
    }
}

/// The issue's example, literally.
#[test]
fn wei_amounts_past_u64_are_different_params() {
    let a = fp(r#"{"amount":100000000000000000001,"idempotency_key":"pay-1"}"#);
    let b = fp(r#"{"amount":100000000000000000002,"idempotency_key":"pay-1"}"#);
    assert_ne!(a, b);
    // … and they were equal as f64 (the bug).
    let fa: f64 = "100000000000000000001".parse().unwrap();
    let fb: f64 = "100000000000000000002".parse().unwrap();
    assert_eq!(fa, fb);
    assert_eq!(fp(r#"{"amount":1}"#), fp(r#"{"amount":1.0}"#));
}
