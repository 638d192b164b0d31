//! The report's Markdown cells and the server table they make: numbers with thousands
//! separators, milliseconds, ratios, and a row's checks.

use std::fmt::Write;

use crate::record::Row;

/// `12345.6` → `12,346`.
pub fn thousands(x: f64) -> String {
    if x.is_nan() {
        return "–".into();
    }
    let s = format!("{:.0}", x);
    let (sign, digits) = s.strip_prefix('-').map_or(("", s.as_str()), |d| ("-", d));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    format!("{sign}{out}")
}

pub fn ms(x: f64) -> String {
    if x.is_nan() { "–".into() } else { format!("{x:.3}") }
}

/// µs with one decimal, `–` when unknown.
pub fn us(x: f64) -> String {
    if x.is_finite() { format!("{x:.1}") } else { "–".into() }
}

pub fn ratio(x: Option<f64>) -> String {
    x.map_or("–".into(), |x| format!("{x:.2}"))
}

pub fn checks(r: &Row) -> String {
    let before = format!("{}/{}", r.check_requests - r.wrong_answers, r.check_requests);
    if r.verifiable_runs == 0 {
        format!("{before} answers")
    } else {
        format!("{before} answers, counters {}/{} runs", r.verified_runs, r.verifiable_runs)
    }
}

/// The table of `rows` (one per scenario and server, the scenario's title on its first row):
/// req/s, server CPU µs per `unit`, latency, errors, each repetition, CPU split, checks.
pub fn server_rows(w: &mut String, rows: &[&Row], unit: &str) {
    let _ = writeln!(
        w,
        "| scenario | server | req/s | server CPU µs per {unit} | p50 ms | p99 ms | errors | req/s per repetition | CPU cores server / wrk / other | checks |"
    );
    let _ = writeln!(w, "|---|---|--:|--:|--:|--:|--:|---|---|---|");
    let mut last = String::new();
    for r in rows {
        let title = if r.scenario == last { String::new() } else { r.title.clone() };
        last = r.scenario.clone();
        let _ = writeln!(
            w,
            "| {title} | {}{} | {} | {} | {} | {} | {} | {} | {:.2} / {:.2} / {:.2} | {} |",
            r.server,
            if r.compilers_seen { " †" } else { "" },
            thousands(r.req_per_s),
            us(r.server_cpu_us),
            ms(r.p50_ms),
            ms(r.p99_ms),
            r.errors(),
            r.req_per_s_each.iter().map(|x| thousands(*x)).collect::<Vec<_>>().join(" · "),
            r.server_cpu,
            r.wrk_cpu,
            r.other_cpu,
            checks(r)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_numbers() {
        assert_eq!(thousands(1234567.4), "1,234,567");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(f64::NAN), "–");
    }
}
