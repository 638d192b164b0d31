//! What every console page shares: the frame, the login and refusal pages, status badges,
//! times and redacted JSON. maud escapes every value it renders: a tag or a flow name holding
//! HTML shows as text.

use std::time::{Duration, UNIX_EPOCH};

use axum::http::StatusCode;
use maud::{DOCTYPE, Markup, html};

use super::Session;

/// The route the "Sign in with …" link opens.
pub(crate) const START_PATH: &str = "/console/oidc/start";

/// The text a redacted value shows.
pub(crate) const REDACTED: &str = "[redacted]";

/// A page of a logged-in operator: the navigation (with the logout form) around `body`.
pub(crate) fn page(title: &str, session: &Session, active: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body {
                header.top {
                    span.brand { "oncerpc console" }
                    nav {
                        a.active[active == "events"] href="/console/events" { "Events" }
                        a.active[active == "status"] href="/console/status" { "Status" }
                    }
                    span.tenant { "tenant " strong { (session.tenant) } }
                    form method="post" action="/console/logout" {
                        input type="hidden" name="csrf" value=(session.csrf);
                        button.link type="submit" { "Log out" }
                    }
                }
                main { (body) }
            }
        }
    }
}

fn head(title: &str) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            // htmx must not inject its indicator styles: the CSP allows this origin's stylesheet only.
            meta name="htmx-config" content=r#"{"includeIndicatorStyles":false,"allowEval":false}"#;
            title { (title) " · oncerpc" }
            link rel="stylesheet" href="/console/assets/console.css";
            script src="/console/assets/htmx.min.js" defer {}
        }
    }
}

/// The login page (`open`: no tenants are configured, any key opens the default tenant;
/// `provider`: the identity provider offered beside the API key).
pub(crate) fn login(csrf: &str, open: bool, provider: Option<&str>, error: Option<&str>) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head("Log in"))
            body.login {
                main {
                    h1 { "oncerpc console" }
                    @if let Some(e) = error { p.error role="alert" { (e) } }
                    form method="post" action="/console/login" {
                        input type="hidden" name="csrf" value=(csrf);
                        label for="api_key" { "API key" }
                        input #api_key type="password" name="api_key" autocomplete="off" autofocus;
                        button type="submit" { "Log in" }
                    }
                    @if let Some(name) = provider {
                        p.oidc { a #oidc href=(START_PATH) { "Sign in with " (name) } }
                    }
                    @if open { p.hint { "No tenants are configured: any key opens the default tenant." } }
                }
            }
        }
    }
}

/// After a sign-in with the identity provider: on to the events. The browser came from the
/// provider's site, and the session cookie (`SameSite=Strict`) goes only with a navigation
/// this site starts: this page's refresh (or its link) is one.
pub(crate) fn signed_in() -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="refresh" content="0; url=/console/events";
                title { "Signed in · oncerpc" }
                link rel="stylesheet" href="/console/assets/console.css";
            }
            body.login {
                main {
                    h1 { "Signed in" }
                    p { a #continue href="/console/events" { "Continue to the console" } }
                }
            }
        }
    }
}

/// The page of a refused request.
pub(crate) fn refusal(status: StatusCode, message: &str) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(status.canonical_reason().unwrap_or("Refused")))
            body.login {
                main {
                    h1 { (status.as_u16()) " " (status.canonical_reason().unwrap_or("")) }
                    p.error role="alert" { (message) }
                    p { a href="/console/events" { "Back to the events" } }
                }
            }
        }
    }
}

/// A status as a coloured badge.
pub(crate) fn badge(status: &str) -> Markup {
    html! { span class={ "badge " (status) } { (status) } }
}

/// A time as RFC 3339 (UTC, milliseconds).
pub(crate) fn time(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// A duration between two times, e.g. `12 ms`, `3.4 s`.
pub(crate) fn span(from_ms: u64, to_ms: u64) -> String {
    let ms = to_ms.saturating_sub(from_ms);
    if ms < 1000 { format!("{ms} ms") } else { format!("{:.1} s", ms as f64 / 1000.0) }
}

/// JSON text, pretty-printed, with the values at the `redact` pointers replaced.
pub(crate) fn json(text: &str, redact: &[String]) -> Markup {
    let shown = match serde_json::from_str::<serde_json::Value>(text) {
        Ok(mut v) => {
            redact_value(&mut v, redact);
            serde_json::to_string_pretty(&v).unwrap_or_else(|_| text.to_owned())
        }
        // Not JSON (it should always be): shown as it is, escaped like everything else.
        Err(_) => text.to_owned(),
    };
    html! { pre.json { (shown) } }
}

/// Replace the values at the `redact` pointers (RFC 6901) with [`REDACTED`].
pub(crate) fn redact_value(v: &mut serde_json::Value, redact: &[String]) {
    for pointer in redact {
        if let Some(slot) = v.pointer_mut(pointer) {
            *slot = serde_json::Value::String(REDACTED.to_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_at_the_pointers_are_redacted_and_the_rest_is_kept() {
        let mut v = serde_json::json!({"card": {"number": "4111", "exp": "12/30"}, "items": [{"secret": 1}]});
        redact_value(&mut v, &["/card/number".into(), "/items/0/secret".into(), "/missing".into()]);
        assert_eq!(
            v,
            serde_json::json!({"card": {"number": REDACTED, "exp": "12/30"}, "items": [{"secret": REDACTED}]})
        );
    }

    #[test]
    fn rendered_text_is_escaped() {
        let out = json(r#"{"tag":"<script>alert(1)</script>"}"#, &[]).into_string();
        assert!(out.contains("&lt;script&gt;"), "{out}");
        assert!(!out.contains("<script>"), "{out}");
        assert!(badge("<b>x</b>").into_string().contains("&lt;b&gt;"));
    }
}
