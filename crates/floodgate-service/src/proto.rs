//! Code generated from `proto/` by `tonic-prost-build` (see `build.rs`), in modules named after
//! the protobuf packages: Envoy's rate limit service and Rate Limit Quota Service, gRPC's
//! health checking protocol, the xDS
//! transport (its aggregated discovery service) and envoyproxy/ratelimit's configuration
//! resource.

/// Envoy's API packages.
pub mod envoy {
    /// `envoy.extensions`.
    pub mod extensions {
        /// `envoy.extensions.common`.
        pub mod common {
            /// `envoy.extensions.common.ratelimit`.
            pub mod ratelimit {
                /// `envoy.extensions.common.ratelimit.v3`: the request descriptor.
                pub mod v3 {
                    include!(concat!(
                        env!("OUT_DIR"),
                        "/envoy.extensions.common.ratelimit.v3.rs"
                    ));
                }
            }
        }
    }

    /// `envoy.config`.
    pub mod config {
        /// `envoy.config.core`.
        pub mod core {
            /// `envoy.config.core.v3`: the header a response asks Envoy to add, and the node an
            /// xDS client says it is.
            pub mod v3 {
                include!(concat!(env!("OUT_DIR"), "/envoy.config.core.v3.rs"));
            }
        }
    }

    /// `envoy.type`.
    pub mod r#type {
        /// `envoy.type.v3`: the unit of a descriptor's limit override, and the strategies
        /// (blanket rules, token buckets) an RLQS assignment carries.
        pub mod v3 {
            include!(concat!(env!("OUT_DIR"), "/envoy.r#type.v3.rs"));
        }
    }

    /// `envoy.service`.
    pub mod service {
        /// `envoy.service.discovery`.
        pub mod discovery {
            /// `envoy.service.discovery.v3`: the xDS requests and responses, and the aggregated
            /// discovery service's generated client and server.
            pub mod v3 {
                include!(concat!(env!("OUT_DIR"), "/envoy.service.discovery.v3.rs"));
            }
        }

        /// `envoy.service.rate_limit_quota`.
        pub mod rate_limit_quota {
            /// `envoy.service.rate_limit_quota.v3`: the Rate Limit Quota Service's usage
            /// reports and bucket actions, and its generated tonic client and server.
            pub mod v3 {
                include!(concat!(
                    env!("OUT_DIR"),
                    "/envoy.service.rate_limit_quota.v3.rs"
                ));
            }
        }

        /// `envoy.service.ratelimit`.
        pub mod ratelimit {
            /// `envoy.service.ratelimit.v3`: the service's request and response, and the
            /// generated tonic client.
            pub mod v3 {
                include!(concat!(env!("OUT_DIR"), "/envoy.service.ratelimit.v3.rs"));
            }
        }
    }
}

/// Google's API packages.
pub mod google {
    /// `google.rpc`: the status an xDS client refuses a response with.
    pub mod rpc {
        include!(concat!(env!("OUT_DIR"), "/google.rpc.rs"));
    }
}

/// envoyproxy/ratelimit's packages.
pub mod ratelimit {
    /// `ratelimit.config`.
    pub mod config {
        /// `ratelimit.config.ratelimit`.
        pub mod ratelimit {
            /// `ratelimit.config.ratelimit.v3`: the configuration resource a control plane
            /// pushes over xDS.
            pub mod v3 {
                include!(concat!(
                    env!("OUT_DIR"),
                    "/ratelimit.config.ratelimit.v3.rs"
                ));
            }
        }
    }
}

/// gRPC's own packages.
pub mod grpc {
    /// `grpc.health`.
    pub mod health {
        /// `grpc.health.v1`: the health checking protocol's messages and the generated
        /// tonic client.
        pub mod v1 {
            include!(concat!(env!("OUT_DIR"), "/grpc.health.v1.rs"));
        }
    }
}
