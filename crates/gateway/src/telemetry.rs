//! `[telemetry]`: OpenTelemetry export of the gateway's spans over OTLP/HTTP (protobuf) — each
//! request, its idempotency claim, each upstream step and an async event's run — in the
//! caller's W3C trace, so a trace backend shows one trace from the client through oncerpc to
//! the services behind it (SPEC §7).
//!
//! ```toml
//! [telemetry]
//! otlp_endpoint = "http://127.0.0.1:4318"   # the collector's or backend's OTLP/HTTP port
//! service_name = "oncerpc"
//! sampling_ratio = 1.0                       # of traces that start here; a caller's choice is kept
//! headers = { Authorization = "${OTLP_AUTH}" }
//! ```
//!
//! Off by default: without `otlp_endpoint` nothing here runs, the core makes no exported span
//! and the request path is as it was. The SDK's batch processor exports from a thread of its
//! own; a backend that is down or slow costs dropped spans (counted by the SDK, logged), never
//! a request's time.

use std::collections::BTreeMap;
use std::time::Duration;

use opentelemetry::trace::{SpanContext, TraceContextExt, TraceFlags, TraceId, TraceState, TracerProvider};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use serde::{Deserialize, Serialize};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// `[telemetry]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySection {
    /// OTLP/HTTP endpoint: `http(s)://host:port` (`/v1/traces` is added) or the full traces URL.
    /// Absent: no export.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub otlp_endpoint: Option<String>,
    /// `service.name` of the exported spans.
    #[serde(default = "default_service_name")]
    pub service_name: String,
    /// The share of traces that start here which are exported (0.0–1.0); a caller's
    /// `traceparent` decides for its own (its sampled flag).
    #[serde(default = "default_ratio")]
    pub sampling_ratio: f64,
    /// Headers of every export request (values may be `"${NAME}"`): a backend's credentials.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

impl Default for TelemetrySection {
    fn default() -> Self {
        TelemetrySection {
            otlp_endpoint: None,
            service_name: default_service_name(),
            sampling_ratio: default_ratio(),
            headers: BTreeMap::new(),
        }
    }
}

fn default_service_name() -> String {
    "oncerpc".into()
}

fn default_ratio() -> f64 {
    1.0
}

/// How long one export may take before the batch is dropped.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

impl TelemetrySection {
    /// The section's own rules; the error names the key.
    pub fn check(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.sampling_ratio) {
            return Err("telemetry.sampling_ratio must be between 0.0 and 1.0".into());
        }
        if self.service_name.trim().is_empty() {
            return Err("telemetry.service_name must not be empty".into());
        }
        let Some(url) = &self.otlp_endpoint else { return Ok(()) };
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err("telemetry.otlp_endpoint must be an http:// or https:// URL".into());
        };
        if !(scheme == "http" || scheme == "https") || rest.is_empty() {
            return Err("telemetry.otlp_endpoint must be an http:// or https:// URL".into());
        }
        // A URL reaches log lines; a credential goes in `headers`.
        if oncerpc_core::has_userinfo(url) {
            return Err(
                "telemetry.otlp_endpoint must not carry a user or password: put the credential in headers"
                    .into(),
            );
        }
        Ok(())
    }

    /// The traces URL: the endpoint as given when it has a path, else with `/v1/traces`.
    pub fn traces_url(&self) -> Option<String> {
        let url = self.otlp_endpoint.as_deref()?.trim_end_matches('/');
        let rest = url.split_once("://").map_or(url, |(_, r)| r);
        Some(if rest.contains('/') { url.to_owned() } else { format!("{url}/v1/traces") })
    }
}

/// The running export: shut down (flushing what is queued) when the process ends.
pub struct Telemetry {
    provider: SdkTracerProvider,
}

impl Telemetry {
    /// Export what is still queued, then stop.
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %e, "telemetry: the last spans were not exported");
        }
    }
}

/// The tracing layer that exports the core's spans ([`oncerpc_core::trace::SPAN_TARGET`])
/// with `section`'s pipeline, and the hooks the core uses to join a caller's trace and to name
/// a step's span upstream. `None` when `otlp_endpoint` is not set.
pub fn pipeline(section: &TelemetrySection) -> Result<Option<(OtelLayer, Telemetry)>, String> {
    let Some(url) = section.traces_url() else { return Ok(None) };
    // The exporter's reqwest client (https:// endpoints) takes the process's rustls provider.
    crate::upstream::install_crypto_provider();
    let headers = section.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(url)
        .with_headers(headers)
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| format!("telemetry: cannot make the OTLP exporter: {e}"))?;
    let sampler = Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(section.sampling_ratio)));
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(section.service_name.clone())
        .with_attribute(opentelemetry::KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(sampler)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("oncerpc");
    let layer = tracing_opentelemetry::layer().with_tracer(tracer);
    oncerpc_core::trace::install_export(Box::new(Hooks));
    Ok(Some((layer, Telemetry { provider })))
}

/// The layer [`pipeline`] makes (it is given its filter where the subscriber is built).
pub type OtelLayer =
    tracing_opentelemetry::OpenTelemetryLayer<tracing_subscriber::Registry, opentelemetry_sdk::trace::Tracer>;

/// The core's hooks into the tracing bridge.
struct Hooks;

impl oncerpc_core::trace::SpanExport for Hooks {
    fn adopt(&self, span: &tracing::Span, caller: &oncerpc_core::TraceContext) {
        let (Ok(trace_id), Ok(span_id)) =
            (TraceId::from_hex(&caller.trace_id), opentelemetry::trace::SpanId::from_hex(&caller.parent_id))
        else {
            return;
        };
        let state = caller.state.as_deref().and_then(|s| s.parse::<TraceState>().ok()).unwrap_or_default();
        let remote = SpanContext::new(trace_id, span_id, TraceFlags::new(caller.flags), true, state);
        let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(remote));
    }

    fn traceparent(&self, span: &tracing::Span) -> Option<String> {
        let context = span.context();
        let sc = context.span().span_context().clone();
        sc.is_valid()
            .then(|| format!("00-{}-{}-{:02x}", sc.trace_id(), sc.span_id(), sc.trace_flags().to_u8()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(toml: &str) -> TelemetrySection {
        toml::from_str(toml).expect("a [telemetry] section")
    }

    #[test]
    fn the_endpoint_ratio_and_name_are_checked_and_the_traces_path_added() {
        assert!(section("").check().is_ok());
        assert_eq!(section("").traces_url(), None, "off by default");
        let s = section("otlp_endpoint = \"http://127.0.0.1:4318\"");
        assert_eq!(s.traces_url().as_deref(), Some("http://127.0.0.1:4318/v1/traces"));
        assert_eq!((s.service_name.as_str(), s.sampling_ratio), ("oncerpc", 1.0));
        let full = section("otlp_endpoint = \"https://otel.example/custom/traces\"");
        assert_eq!(full.traces_url().as_deref(), Some("https://otel.example/custom/traces"));
        for (bad, why) in [
            ("otlp_endpoint = \"127.0.0.1:4318\"", "http:// or https://"),
            ("otlp_endpoint = \"ftp://x\"", "http:// or https://"),
            ("otlp_endpoint = \"https://u:p@otel.example\"", "user or password"),
            ("sampling_ratio = 1.5", "sampling_ratio"),
            ("service_name = \" \"", "service_name"),
        ] {
            let e = section(bad).check().unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
            assert!(!e.contains("u:p"), "no credential repeated: {e}");
        }
    }
}
