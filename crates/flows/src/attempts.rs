//! `oncerpc_step_attempts_total{method,step,outcome}`: every attempt of every flow step.

use prometheus::{IntCounterVec, Opts};

/// `oncerpc_step_attempts_total{method,step,outcome}`, shared by every flow of an app.
#[derive(Clone)]
pub struct StepAttempts(pub(crate) IntCounterVec);

impl StepAttempts {
    pub fn new() -> StepAttempts {
        let opts = Opts::new(
            "oncerpc_step_attempts_total",
            "Attempts of flow steps, by method, step and outcome (succeeded; transient: refused or reset connection, attempt timeout, 429, 502, 503, 504; failed: any other failure)",
        );
        StepAttempts(IntCounterVec::new(opts, &["method", "step", "outcome"]).expect("valid metric"))
    }

    /// The family, for a metrics registry.
    pub fn collector(&self) -> Box<dyn prometheus::core::Collector> {
        Box::new(self.0.clone())
    }

    pub fn get(&self, method: &str, step: &str, outcome: &str) -> u64 {
        self.0.with_label_values(&[method, step, outcome]).get()
    }
}

impl Default for StepAttempts {
    fn default() -> Self {
        StepAttempts::new()
    }
}
