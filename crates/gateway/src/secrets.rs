//! Secrets from the environment (SPEC §13): any string value of the config file may be
//! `"${NAME}"`, replaced by the environment variable `NAME` when the file is read. A missing
//! variable is a config error naming it and the key. `"$${NAME}"` is the literal text
//! `${NAME}`. Which keys came from the environment is remembered, so that `check-config`
//! shows `${NAME}` and never the value.

use std::collections::BTreeMap;

/// Where each substituted value came from: the key's dotted path (`store.url`,
/// `tenants[0].api_keys[1]`) → the variable's name.
pub type EnvRefs = BTreeMap<String, String>;

/// A `${NAME}` reference that could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingVar {
    pub key: String,
    pub var: String,
}

/// `Some(NAME)` when `s` is exactly `${NAME}` with a valid variable name.
fn reference(s: &str) -> Option<&str> {
    let name = s.strip_prefix("${")?.strip_suffix('}')?;
    let mut chars = name.chars();
    let first = chars.next()?;
    ((first.is_ascii_alphabetic() || first == '_') && chars.all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .then_some(name)
}

/// Replace every `${NAME}` string in `value` (recursively) through `lookup`; returns the
/// references it replaced, or the first that `lookup` could not resolve.
pub fn substitute(
    value: &mut toml::Value,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<EnvRefs, MissingVar> {
    let mut refs = EnvRefs::new();
    walk(value, String::new(), lookup, &mut refs)?;
    Ok(refs)
}

fn walk(
    value: &mut toml::Value,
    path: String,
    lookup: &dyn Fn(&str) -> Option<String>,
    refs: &mut EnvRefs,
) -> Result<(), MissingVar> {
    match value {
        toml::Value::String(s) => {
            if let Some(literal) = s.strip_prefix('$').filter(|rest| reference(rest).is_some()) {
                *s = literal.to_owned();
            } else if let Some(var) = reference(s) {
                let var = var.to_owned();
                let Some(v) = lookup(&var) else {
                    return Err(MissingVar { key: path, var });
                };
                *s = v;
                refs.insert(path, var);
            }
        }
        toml::Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                walk(item, format!("{path}[{i}]"), lookup, refs)?;
            }
        }
        toml::Value::Table(table) => {
            for (k, item) in table.iter_mut() {
                let child = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                walk(item, child, lookup, refs)?;
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "DB_URL" => Some("postgres://app:s3cret@db/prod".into()),
            "KEY_A" => Some("key-from-the-environment".into()),
            _ => None,
        }
    }

    #[test]
    fn references_are_replaced_and_remembered_by_key() {
        let mut v: toml::Value = toml::from_str(
            r#"
            listen = "127.0.0.1:8080"
            [store]
            url = "${DB_URL}"
            [[tenants]]
            name = "acme"
            api_keys = ["plain-key-0123456789", "${KEY_A}"]
            "#,
        )
        .unwrap();
        let refs = substitute(&mut v, &env).unwrap();
        assert_eq!(v["store"]["url"].as_str(), Some("postgres://app:s3cret@db/prod"));
        assert_eq!(v["tenants"][0]["api_keys"][1].as_str(), Some("key-from-the-environment"));
        assert_eq!(v["listen"].as_str(), Some("127.0.0.1:8080"));
        let expected: EnvRefs = [("store.url", "DB_URL"), ("tenants[0].api_keys[1]", "KEY_A")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        assert_eq!(refs, expected);
    }

    #[test]
    fn a_missing_variable_names_itself_and_the_key() {
        let mut v: toml::Value = toml::from_str("[upstream]\nca_file = \"${NOPE}\"\n").unwrap();
        assert_eq!(
            substitute(&mut v, &env),
            Err(MissingVar { key: "upstream.ca_file".into(), var: "NOPE".into() })
        );
    }

    #[test]
    fn only_a_whole_reference_is_replaced_and_a_doubled_dollar_is_literal() {
        let text = "a = \"x${DB_URL}\"\nb = \"$${DB_URL}\"\nc = \"${1BAD}\"\nd = \"${}\"\ne = \"$$x\"\n";
        let mut v: toml::Value = toml::from_str(text).unwrap();
        let refs = substitute(&mut v, &env).unwrap();
        assert!(refs.is_empty());
        assert_eq!(v["a"].as_str(), Some("x${DB_URL}"));
        assert_eq!(v["b"].as_str(), Some("${DB_URL}"));
        assert_eq!(v["c"].as_str(), Some("${1BAD}"));
        assert_eq!(v["d"].as_str(), Some("${}"));
        assert_eq!(v["e"].as_str(), Some("$$x"));
    }
}
