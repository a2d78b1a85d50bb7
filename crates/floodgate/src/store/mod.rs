//! Where per-key state lives.
