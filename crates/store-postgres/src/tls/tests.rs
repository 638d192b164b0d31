use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use tokio_postgres::config::{Host, SslMode as PgSslMode};

use super::*;

fn parse(url: &str) -> Target {
    Target::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"))
}

fn parse_err(url: &str) -> String {
    Target::parse(url).err().unwrap_or_else(|| panic!("{url} should be refused"))
}

#[test]
fn sslmode_values_map_onto_tokio_postgres() {
    for (value, mode, pg) in [
        ("disable", SslMode::Disable, PgSslMode::Disable),
        ("prefer", SslMode::Prefer, PgSslMode::Prefer),
        ("require", SslMode::Require, PgSslMode::Require),
        ("verify-ca", SslMode::VerifyCa, PgSslMode::Require),
        ("verify-full", SslMode::VerifyFull, PgSslMode::Require),
    ] {
        let t = parse(&format!("postgres://u@h/db?sslmode={value}"));
        assert_eq!((t.mode, t.config.get_ssl_mode()), (mode, pg), "{value}");
        assert_eq!(t.root_cert, None);
    }
}

#[test]
fn default_is_prefer() {
    let t = parse("postgres://u@h/db");
    assert_eq!((t.mode, t.config.get_ssl_mode()), (SslMode::Prefer, PgSslMode::Prefer));
    assert_eq!(parse("host=h user=u").mode, SslMode::Prefer);
}

#[test]
fn unknown_sslmode_is_an_error_naming_it() {
    let e = parse_err("postgres://u:secret@h/db?sslmode=verify-everything");
    assert!(e.contains("unknown sslmode `verify-everything`"), "{e}");
    assert!(!e.contains("secret"), "{e}");
    let e = parse_err("postgres://u@h/db?sslmode=allow");
    assert!(e.contains("`allow` is not supported"), "{e}");
    let e = parse_err("host=h sslmode=bogus password=secret");
    assert!(e.contains("unknown sslmode `bogus`") && !e.contains("secret"), "{e}");
}

#[test]
fn sslrootcert_is_stripped_and_other_params_kept() {
    let t = parse(
        "postgres://me:p%40ss@db.example:6543/app?application_name=gw&sslrootcert=/etc/ca%20x.pem\
             &connect_timeout=7&sslmode=verify-full&hostaddr=10.1.2.3&options=-c%20x%3Dy",
    );
    assert_eq!(t.mode, SslMode::VerifyFull);
    assert_eq!(t.root_cert, Some(RootCert::File(PathBuf::from("/etc/ca x.pem"))));
    let c = &t.config;
    assert_eq!(c.get_user(), Some("me"));
    assert_eq!(c.get_password(), Some(&b"p@ss"[..]));
    assert_eq!(c.get_hosts(), &[Host::Tcp("db.example".into())]);
    assert_eq!(c.get_ports(), &[6543]);
    assert_eq!(c.get_dbname(), Some("app"));
    assert_eq!(c.get_application_name(), Some("gw"));
    assert_eq!(c.get_connect_timeout(), Some(&Duration::from_secs(7)));
    assert_eq!(c.get_hostaddrs(), &[IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3))]);
    assert_eq!(c.get_options(), Some("-c x=y"));
}

#[test]
fn split_leaves_no_empty_query() {
    let s = split("postgresql://u@h/db?sslmode=disable&sslrootcert=/x").unwrap();
    assert_eq!(s.rest, "postgresql://u@h/db");
    assert_eq!((s.sslmode.as_deref(), s.sslrootcert.as_deref()), (Some("disable"), Some("/x")));
    let s = split("postgres://h/db?application_name=a&sslmode=require&").unwrap();
    assert_eq!(s.rest, "postgres://h/db?application_name=a");
    // The last one wins, as in libpq.
    let s = split("postgres://h/db?sslmode=require&sslmode=disable").unwrap();
    assert_eq!(s.sslmode.as_deref(), Some("disable"));
    // A `?` in the password is not the query.
    let s = split("postgres://u:a?b@h/db?sslmode=require").unwrap();
    assert_eq!(s.rest, "postgres://u:a?b@h/db");
}

#[test]
fn key_value_form_works_too() {
    let t = parse(
        "host=wrong.example hostaddr=127.0.0.1 user=postgres password='it\\'s' dbname = test \
             sslmode=verify-ca sslrootcert='/tmp/my ca.pem' application_name=a\\ b",
    );
    assert_eq!(t.mode, SslMode::VerifyCa);
    assert_eq!(t.root_cert, Some(RootCert::File(PathBuf::from("/tmp/my ca.pem"))));
    assert_eq!(t.config.get_hosts(), &[Host::Tcp("wrong.example".into())]);
    assert_eq!(t.config.get_dbname(), Some("test"));
    assert_eq!(t.config.get_application_name(), Some("a b"));
    let s = split("password='it\\'s' sslmode=disable").unwrap();
    assert_eq!(s.rest, "password='it\\'s'");
    assert_eq!(s.redacted, "password='***' sslmode='disable'");
    assert!(split("host='unterminated").is_err());
    assert!(split("host").is_err());
}

#[test]
fn hostaddr_alone_names_the_tls_server_unless_verify_full() {
    let t = parse("hostaddr=127.0.0.1 user=u sslmode=require");
    assert_eq!(t.config.get_hosts(), &[Host::Tcp("127.0.0.1".into())]);
    assert_eq!(parse("postgres://u@/db?hostaddr=127.0.0.1").config.get_hosts().len(), 1);
    assert!(parse("hostaddr=127.0.0.1 sslmode=verify-full").config.get_hosts().is_empty());
    let t = parse("host=h hostaddr=127.0.0.1");
    assert_eq!(t.config.get_hosts(), &[Host::Tcp("h".into())]);
}

#[test]
fn a_root_certificate_makes_require_verify_ca() {
    let t = parse("postgres://u@h/db?sslmode=require&sslrootcert=/ca.pem");
    assert_eq!((t.mode, t.config.get_ssl_mode()), (SslMode::VerifyCa, PgSslMode::Require));
    // `prefer` never verifies.
    assert_eq!(parse("postgres://u@h/db?sslrootcert=/ca.pem").mode, SslMode::Prefer);
}

#[test]
fn sslrootcert_system_means_verify_full() {
    let t = parse("postgres://u@h/db?sslrootcert=system");
    assert_eq!((t.mode, t.root_cert), (SslMode::VerifyFull, Some(RootCert::System)));
    assert_eq!(parse("postgres://u@h/db?sslrootcert=system&sslmode=verify-full").mode, SslMode::VerifyFull);
    let e = parse_err("postgres://u@h/db?sslrootcert=system&sslmode=require");
    assert!(e.contains("weak sslmode `require`"), "{e}");
}

#[test]
fn other_parse_errors_keep_their_reason_but_not_the_password() {
    let e = parse_err("postgres://u:hunter2@h/db?sslmode=require&frobnicate=1");
    assert!(e.contains("unknown option `frobnicate`"), "{e}");
    assert!(e.contains("u:***@h") && !e.contains("hunter2"), "{e}");
    let e = parse_err("host=h password=hunter2 frobnicate=1");
    assert!(e.contains("frobnicate") && !e.contains("hunter2"), "{e}");
}

#[test]
fn verifying_without_roots_says_to_set_sslrootcert() {
    let home = std::env::temp_dir().join("oncerpc-store-postgres-no-such-home");
    let e = load_roots(SslMode::VerifyFull, None, Some(&home)).expect_err("no roots");
    assert!(e.contains("set sslrootcert=PATH") && e.contains(".postgresql/root.crt"), "{e}");
    assert!(e.contains("does not exist"), "{e}");
    let e = load_roots(SslMode::VerifyCa, None, None).expect_err("no roots");
    assert!(e.contains("sslmode=verify-ca") && e.contains("sslrootcert"), "{e}");
}

#[test]
fn bad_root_files_are_named() {
    let e = load_roots(SslMode::VerifyFull, Some(&RootCert::File("/nonexistent/ca.pem".into())), None)
        .expect_err("missing file");
    assert!(e.contains("sslrootcert /nonexistent/ca.pem: cannot read it"), "{e}");
    let dir = std::env::temp_dir().join(format!("oncerpc-pg-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let empty = dir.join("empty.pem");
    std::fs::write(&empty, "not a certificate\n").unwrap();
    let e = load_roots(SslMode::VerifyFull, Some(&RootCert::File(empty.clone())), None).expect_err("empty");
    assert!(e.contains("no PEM certificate"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn explain_names_the_roots_and_hides_the_password() {
    let t = parse("postgres://u:hunter2@h/db?sslmode=verify-full&sslrootcert=/ca.pem");
    let msg = t.explain("postgres: error performing TLS handshake: invalid peer certificate: UnknownIssuer");
    assert!(
        msg.ends_with("UnknownIssuer (sslmode=verify-full, verified against sslrootcert /ca.pem)"),
        "{msg}"
    );
    assert_eq!(t.explain("auth hunter2 failed"), "auth *** failed");
}

#[test]
fn percent_decoding() {
    assert_eq!(percent_decode("a%20b%2Fc%zz%4").as_deref(), Some("a b/c%zz%4"));
    assert_eq!(percent_decode("%ff"), None);
}

#[test]
fn connectors_build_for_every_mode() {
    for mode in ["disable", "prefer", "require"] {
        parse(&format!("postgres://u@h/db?sslmode={mode}")).connector().expect(mode);
    }
}
