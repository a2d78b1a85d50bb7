//! Tower middleware that runs Floodgate's limiters in front of a service.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
