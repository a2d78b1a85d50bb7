//! What the end-to-end tests share: the one launcher of `floodgate serve` (`serve`), the
//! clients and fake peers they talk to (statsd, OTLP, xDS, RLQS, a browser), upstream's
//! environment, TLS files.
pub mod browser;
pub mod cli;
pub mod otlp;
pub mod rlqs;
pub mod serve;
pub mod statsd;
pub mod tls;
pub mod upstream;
pub mod xds;
