//! Each upstream's state and calls: `oncerpc_mcp_upstream_up{upstream}`,
//! `oncerpc_mcp_upstream_calls_total{upstream,outcome}` (`ok`, `tool_error`, `failed`,
//! `timeout`) and `oncerpc_mcp_upstream_connects_total{upstream,outcome}`. Labels are bounded:
//! upstreams are configured.

use prometheus::core::Collector;
use prometheus::{IntCounterVec, IntGaugeVec, Opts};

#[derive(Clone)]
pub struct UpstreamMetrics {
    up: IntGaugeVec,
    calls: IntCounterVec,
    connects: IntCounterVec,
}

impl Default for UpstreamMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl UpstreamMetrics {
    pub fn new() -> UpstreamMetrics {
        let up = IntGaugeVec::new(
            Opts::new("oncerpc_mcp_upstream_up", "1 while the MCP upstream is connected, else 0"),
            &["upstream"],
        )
        .expect("valid metric");
        let calls = IntCounterVec::new(
            Opts::new(
                "oncerpc_mcp_upstream_calls_total",
                "tools/call requests sent to an MCP upstream by outcome: ok, tool_error (an isError result), failed (transport, protocol), timeout",
            ),
            &["upstream", "outcome"],
        )
        .expect("valid metric");
        let connects = IntCounterVec::new(
            Opts::new(
                "oncerpc_mcp_upstream_connects_total",
                "Connections to an MCP upstream by outcome: ok, failed",
            ),
            &["upstream", "outcome"],
        )
        .expect("valid metric");
        UpstreamMetrics { up, calls, connects }
    }

    /// The collectors, for a Prometheus registry.
    pub fn collectors(&self) -> Vec<Box<dyn Collector>> {
        vec![Box::new(self.up.clone()), Box::new(self.calls.clone()), Box::new(self.connects.clone())]
    }

    pub(crate) fn set_up(&self, upstream: &str, up: bool) {
        self.up.with_label_values(&[upstream]).set(i64::from(up));
    }

    pub(crate) fn call(&self, upstream: &str, outcome: &str) {
        self.calls.with_label_values(&[upstream, outcome]).inc();
    }

    pub(crate) fn connect(&self, upstream: &str, ok: bool) {
        self.connects.with_label_values(&[upstream, if ok { "ok" } else { "failed" }]).inc();
    }
}
