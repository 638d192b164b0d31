//! One imported operation's request, built from a call's params: the path template filled
//! and percent-escaped, the query serialised per each parameter's `style`/`explode`, header
//! and cookie parameters, and the body as JSON (or as a form, where that is all the operation
//! takes).

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::{Map, Value};

use crate::request::{Built, StepRequest};

/// Every byte but RFC 3986's unreserved ones is escaped in a path segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// Where a parameter goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum In {
    Path,
    Query,
    Header,
    Cookie,
}

/// A parameter as the request needs it.
#[derive(Debug, Clone)]
pub struct Param {
    /// Its name in the request.
    pub name: String,
    /// Its member in the params (its name, unless another parameter has it too).
    pub prop: String,
    pub location: In,
    /// `form`, `simple`, `label`, `matrix`, `spaceDelimited`, `pipeDelimited`, `deepObject`.
    pub style: String,
    pub explode: bool,
    /// Described by `content` (a media type) rather than `schema`: sent as JSON text.
    pub json: bool,
}

/// How the `body` member is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    None,
    Json,
    Form,
}

/// An operation's request: a [`StepRequest`].
#[derive(Debug, Clone)]
pub struct Operation {
    pub method: reqwest::Method,
    /// The base URL, without a trailing `/`.
    pub base: String,
    /// The path template (`/pets/{petId}`).
    pub path: String,
    pub params: Vec<Param>,
    pub body: Body,
    /// The `[[openapi]] headers`.
    pub headers: Vec<(String, String)>,
    pub key_header: String,
}

impl StepRequest for Operation {
    fn build(&self, input: &[u8]) -> Result<Built, String> {
        let args: Map<String, Value> = match serde_json::from_slice(input) {
            Ok(Value::Object(o)) => o,
            Ok(Value::Null) => Map::new(),
            _ => return Err("the params must be an object of the operation's parameters and body".into()),
        };
        let mut path = self.path.clone();
        let mut query = form_urlencoded::Serializer::new(String::new());
        let mut headers = self.headers.clone();
        let mut cookies = Vec::new();
        for p in &self.params {
            let Some(v) = args.get(&p.prop).filter(|v| !v.is_null()) else {
                if p.location == In::Path {
                    return Err(format!("missing the path parameter {:?}", p.prop));
                }
                continue;
            };
            match p.location {
                In::Path => path = path.replace(&format!("{{{}}}", p.name), &path_value(p, v)),
                In::Query => add_query(&mut query, p, v),
                In::Header => {
                    let text = simple(p, v, &|s| s.to_owned());
                    if text.bytes().any(|b| b.is_ascii_control()) {
                        return Err(format!("the header parameter {:?} has a control character", p.prop));
                    }
                    headers.push((p.name.clone(), text));
                }
                In::Cookie => cookies.push(format!("{}={}", p.name, utf8_percent_encode(&text(v), SEGMENT))),
            }
        }
        if !cookies.is_empty() {
            headers.push(("cookie".into(), cookies.join("; ")));
        }
        let query = query.finish();
        let url = if query.is_empty() {
            format!("{}{path}", self.base)
        } else {
            format!("{}{path}?{query}", self.base)
        };
        let body = match (self.body, args.get("body")) {
            (Body::None, _) | (_, None) => None,
            (Body::Json, Some(b)) => {
                Some((serde_json::to_vec(b).map_err(|e| e.to_string())?, "application/json"))
            }
            (Body::Form, Some(b)) => Some((form(b).into_bytes(), "application/x-www-form-urlencoded")),
        };
        Ok(Built { method: self.method.clone(), url, headers, body })
    }

    fn key_header(&self) -> &str {
        &self.key_header
    }
}

/// A value as text: strings as they are, `null` empty, anything else as JSON.
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// `simple` style (path and header): `a,b,c`; objects `k,v,k,v` (`k=v,k=v` exploded); each
/// item through `enc`.
fn simple(p: &Param, v: &Value, enc: &dyn Fn(&str) -> String) -> String {
    if p.json {
        return enc(&v.to_string());
    }
    match v {
        Value::Array(items) => items.iter().map(|i| enc(&text(i))).collect::<Vec<_>>().join(","),
        Value::Object(o) => {
            let sep = if p.explode { "=" } else { "," };
            o.iter().map(|(k, v)| format!("{}{sep}{}", enc(k), enc(&text(v)))).collect::<Vec<_>>().join(",")
        }
        other => enc(&text(other)),
    }
}

/// A path parameter's text, escaped: `simple` by default, `label` (`.a`) or `matrix` (`;id=a`).
fn path_value(p: &Param, v: &Value) -> String {
    let enc = |s: &str| utf8_percent_encode(s, SEGMENT).to_string();
    match p.style.as_str() {
        "label" => {
            let sep = if p.explode { "." } else { "," };
            format!(".{}", simple(p, v, &enc).replace(',', sep))
        }
        "matrix" => match v {
            Value::Array(items) if p.explode => {
                items.iter().map(|i| format!(";{}={}", p.name, enc(&text(i)))).collect()
            }
            _ => format!(";{}={}", p.name, simple(p, v, &enc)),
        },
        _ => simple(p, v, &enc),
    }
}

/// A query parameter, per its style (`form` by default, exploded unless `explode: false`).
fn add_query(q: &mut form_urlencoded::Serializer<'_, String>, p: &Param, v: &Value) {
    if p.json {
        q.append_pair(&p.name, &v.to_string());
        return;
    }
    match v {
        Value::Array(items) if p.explode && p.style != "deepObject" => {
            for i in items {
                q.append_pair(&p.name, &text(i));
            }
        }
        Value::Array(items) => {
            let sep = match p.style.as_str() {
                "spaceDelimited" => " ",
                "pipeDelimited" => "|",
                _ => ",",
            };
            q.append_pair(&p.name, &items.iter().map(text).collect::<Vec<_>>().join(sep));
        }
        Value::Object(o) if p.style == "deepObject" => {
            for (k, v) in o {
                q.append_pair(&format!("{}[{k}]", p.name), &text(v));
            }
        }
        Value::Object(o) if p.explode => {
            for (k, v) in o {
                q.append_pair(k, &text(v));
            }
        }
        Value::Object(o) => {
            let flat: Vec<String> = o.iter().flat_map(|(k, v)| [k.clone(), text(v)]).collect();
            q.append_pair(&p.name, &flat.join(","));
        }
        other => {
            q.append_pair(&p.name, &text(other));
        }
    }
}

/// A form body: members as pairs, nested objects and arrays in brackets (`a[b]=1`, `l[0]=x`),
/// the way form APIs (Stripe's) read them.
fn form(body: &Value) -> String {
    fn walk(q: &mut form_urlencoded::Serializer<'_, String>, key: &str, v: &Value) {
        match v {
            Value::Object(o) => o.iter().for_each(|(k, v)| walk(q, &format!("{key}[{k}]"), v)),
            Value::Array(a) => a.iter().enumerate().for_each(|(i, v)| walk(q, &format!("{key}[{i}]"), v)),
            Value::Null => {}
            other => {
                q.append_pair(key, &text(other));
            }
        }
    }
    let mut q = form_urlencoded::Serializer::new(String::new());
    if let Value::Object(o) = body {
        for (k, v) in o {
            walk(&mut q, k, v);
        }
    }
    q.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn param(name: &str, location: In, style: &str, explode: bool) -> Param {
        Param { name: name.into(), prop: name.into(), location, style: style.into(), explode, json: false }
    }

    fn op(params: Vec<Param>, body: Body) -> Operation {
        Operation {
            method: reqwest::Method::POST,
            base: "http://api.test/v1".into(),
            path: "/pets/{petId}/toys".into(),
            params,
            body,
            headers: vec![("x-api-version".into(), "7".into())],
            key_header: "Idempotency-Key".into(),
        }
    }

    #[test]
    fn path_query_headers_and_body_are_built_and_escaped() {
        let o = op(
            vec![
                param("petId", In::Path, "simple", false),
                param("tags", In::Query, "form", true),
                param("ids", In::Query, "form", false),
                param("filter", In::Query, "deepObject", true),
                param("q", In::Query, "form", true),
                param("X-Trace", In::Header, "simple", false),
            ],
            Body::Json,
        );
        let input = json!({"petId": "a/b c?", "tags": ["x", "y z"], "ids": [1, 2], "filter": {"kind": "dog"},
            "q": "a&b=c", "X-Trace": "t-1", "body": {"name": "Rex"}});
        let b = o.build(input.to_string().as_bytes()).unwrap();
        assert_eq!(
            b.url,
            "http://api.test/v1/pets/a%2Fb%20c%3F/toys?tags=x&tags=y+z&ids=1%2C2&filter%5Bkind%5D=dog&q=a%26b%3Dc"
        );
        assert_eq!(b.headers, vec![("x-api-version".into(), "7".into()), ("X-Trace".into(), "t-1".into())]);
        assert_eq!(b.body, Some((br#"{"name":"Rex"}"#.to_vec(), "application/json")));
        assert_eq!(b.method, reqwest::Method::POST);
    }

    #[test]
    fn missing_path_parameters_and_bad_input_are_refused_not_sent() {
        let o = op(vec![param("petId", In::Path, "simple", false)], Body::None);
        assert!(o.build(b"{}").unwrap_err().contains("petId"));
        assert!(o.build(b"[1]").is_err());
        let h = op(
            vec![param("petId", In::Path, "simple", false), param("X", In::Header, "simple", false)],
            Body::None,
        );
        let c = op(
            vec![param("petId", In::Path, "simple", false), param("session", In::Cookie, "form", true)],
            Body::None,
        );
        let b = c.build(br#"{"petId":1,"session":"a b;c"}"#).unwrap();
        assert_eq!(b.headers.last().unwrap(), &("cookie".to_owned(), "session=a%20b%3Bc".to_owned()));
        assert!(h.build(br#"{"petId":1,"X":"a\r\nInjected: 1"}"#).unwrap_err().contains("control"));
    }

    #[test]
    fn path_styles_and_form_bodies() {
        let mut p = param("id", In::Path, "label", false);
        assert_eq!(path_value(&p, &json!([3, 4])), ".3,4");
        p.style = "matrix".into();
        assert_eq!(path_value(&p, &json!("x y")), ";id=x%20y");
        let body = form(&json!({"amount": 5, "metadata": {"o": "1"}, "items": ["a"]}));
        let mut pairs: Vec<&str> = body.split('&').collect();
        pairs.sort();
        assert_eq!(pairs, ["amount=5", "items%5B0%5D=a", "metadata%5Bo%5D=1"]);
    }
}
