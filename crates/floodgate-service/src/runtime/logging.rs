//! The process's one `tracing` subscriber: log lines on stderr as [`Logging`] says, and, when
//! traces are on, the layer that exports this service's spans ([`crate::traces`]).

use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

use super::Logging;
use crate::traces::Exporting;

impl Logging {
    /// Installs the subscriber: log lines filtered by this filter (an unusable one logs at
    /// `info`), as JSON or text (colored on a terminal); and `traces`' layer, which takes the
    /// trace spans whatever the log filter says. Call once, before anything logs.
    pub fn install(&self, traces: Option<&Exporting>) {
        let filter = || EnvFilter::try_new(&self.filter).unwrap_or_else(|_| EnvFilter::new("info"));
        let lines = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
        let lines = if self.json {
            lines.json().with_filter(filter()).boxed()
        } else {
            lines
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .with_filter(filter())
                .boxed()
        };
        tracing_subscriber::registry()
            .with(traces.map(|t| t.layer()))
            .with(lines)
            .init();
    }
}
