use super::*;
use crate::ManualClock;
use proptest::prelude::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn a_steady_busy_service_grows_its_limit_by_the_queue_size() {
    let g = Gradient2::default();
    let mut s = g.initial();
    for _ in 0..5 {
        s = g.sample(s, ms(20), 20);
    }
    // gradient 1 (no queueing): each sample moves 20% of the way to limit + 4.
    let mut expected = 20.0;
    for _ in 0..5 {
        expected = expected * 0.8 + (expected + 4.0) * 0.2;
    }
    assert!(
        (s.limit - expected).abs() < 1e-9,
        "{} vs {expected}",
        s.limit
    );
    assert_eq!(s.long_rtt, 20e6);
    assert_eq!(s.samples, 5);
}

#[test]
fn latency_above_the_tolerance_shrinks_the_limit_at_most_by_half_per_target() {
    let g = Gradient2 {
        initial_limit: 100.0,
        min_limit: 10.0,
        ..Gradient2::default()
    };
    let mut s = g.initial();
    for _ in 0..WARMUP_SAMPLES {
        s = g.sample(s, ms(10), 100);
    }
    assert_eq!(s.long_rtt, 10e6);
    let before = s.limit;
    // Four times slower: gradient = 1.5 × long / short ≈ 0.375, clamped to 0.5.
    let after = g.sample(s, ms(40), 100);
    let target = before * 0.5 + 4.0;
    assert!((after.limit - (before * 0.8 + target * 0.2)).abs() < 1e-6);
    assert!(after.limit < before);
}

#[test]
fn an_idle_service_teaches_nothing_about_its_limit() {
    let g = Gradient2::default();
    let s = g.sample(g.initial(), ms(500), 3);
    assert_eq!(s.limit, 20.0, "3 in flight is under half of 20");
    assert_eq!(s.samples, 1, "the RTT estimates still move");
}

#[test]
fn parameters_out_of_range_are_refused_by_name() {
    let bad = [
        Gradient2 {
            min_limit: 0.5,
            ..Gradient2::default()
        },
        Gradient2 {
            max_limit: 10.0,
            ..Gradient2::default()
        },
        Gradient2 {
            initial_limit: 500.0,
            ..Gradient2::default()
        },
        Gradient2 {
            smoothing: 0.0,
            ..Gradient2::default()
        },
        Gradient2 {
            rtt_tolerance: 0.9,
            ..Gradient2::default()
        },
        Gradient2 {
            long_window: 0,
            ..Gradient2::default()
        },
        Gradient2 {
            queue_size: -1.0,
            ..Gradient2::default()
        },
    ];
    let fields = [
        "min_limit",
        "max_limit",
        "initial_limit",
        "smoothing",
        "rtt_tolerance",
        "long_window",
        "queue_size",
    ];
    for (g, field) in bad.iter().zip(fields) {
        let err = g.validate().unwrap_err();
        assert!(err.to_string().contains(field), "{err}");
    }
}

proptest! {
    /// Whatever the latencies and loads, the limit stays within its bounds and finite, and the
    /// long-term RTT is positive after the first sample.
    #[test]
    fn the_limit_stays_within_its_bounds(
        samples in proptest::collection::vec((0u64..5_000_000_000, 0u64..400), 1..200),
        min in 1.0f64..50.0,
        span in 0.0f64..500.0,
        smoothing in 0.01f64..=1.0,
        queue in 0.0f64..20.0,
    ) {
        let g = Gradient2 {
            initial_limit: min,
            min_limit: min,
            max_limit: min + span,
            smoothing,
            queue_size: queue,
            ..Gradient2::default()
        };
        g.validate().unwrap();
        let mut s = g.initial();
        for (rtt, in_flight) in samples {
            s = g.sample(s, Duration::from_nanos(rtt), in_flight);
            prop_assert!(s.limit.is_finite() && s.limit >= g.min_limit && s.limit <= g.max_limit);
            prop_assert!(s.long_rtt > 0.0 && s.long_rtt.is_finite());
        }
    }

    /// Never more leases held than the limit's whole part, whatever the order of takes and
    /// returns.
    #[test]
    fn admissions_never_exceed_the_limit(ops in proptest::collection::vec((0u8..3, 1u64..100), 1..300)) {
        let clock = ManualClock::new(Nanos::from_secs(1));
        let limiter = AdaptiveConcurrencyLimiter::builder()
            .algorithm(Adaptive::Gradient2(Gradient2 { initial_limit: 5.0, min_limit: 5.0, max_limit: 30.0, ..Gradient2::default() }))
            .clock(Arc::new(clock.clone()))
            .build()
            .unwrap();
        let mut leases = Vec::new();
        for (op, n) in ops {
            match op {
                0 => {
                    let a = limiter.try_acquire();
                    let e = limiter.estimate();
                    prop_assert!(e.in_flight <= e.limit.floor() as u64 || a.lease.is_none());
                    match &a.lease {
                        Some(_) => prop_assert!(a.in_flight <= a.limit),
                        None => prop_assert!(a.in_flight >= a.limit),
                    }
                    leases.extend(a.lease);
                }
                1 if !leases.is_empty() => {
                    let lease: Lease = leases.swap_remove(n as usize % leases.len());
                    lease.complete(ms(n));
                }
                _ => clock.advance(ms(n)),
            }
            prop_assert!(limiter.estimate().in_flight <= 30);
            prop_assert_eq!(limiter.estimate().in_flight, leases.len() as u64);
        }
    }
}

#[test]
fn leases_complete_drop_and_expire() {
    let clock = ManualClock::new(Nanos::from_secs(1));
    let limiter = AdaptiveConcurrencyLimiter::builder()
        .algorithm(Adaptive::Gradient2(Gradient2 {
            initial_limit: 2.0,
            min_limit: 2.0,
            ..Gradient2::default()
        }))
        .lease_ttl(Duration::from_secs(10))
        .clock(Arc::new(clock.clone()))
        .build()
        .unwrap();
    let a = limiter.try_acquire().lease.unwrap();
    let b = limiter.try_acquire().lease.unwrap();
    let refused = limiter.try_acquire();
    assert!(refused.lease.is_none());
    assert_eq!((refused.limit, refused.in_flight), (2, 2));
    // Dropped: no sample.
    drop(a);
    assert_eq!(limiter.estimate().samples, 0);
    // Completed: one sample of its latency.
    b.complete(ms(30));
    let e = limiter.estimate();
    assert_eq!((e.samples, e.last_rtt, e.in_flight), (1, ms(30), 0));
    // Kept and released by handle without a latency: the time since it was taken.
    let kept = limiter.try_acquire().lease.unwrap().keep();
    clock.advance(ms(70));
    assert!(limiter.release(&kept, None));
    assert_eq!(limiter.estimate().last_rtt, ms(70));
    assert!(!limiter.release(&kept, None), "released once");
    // Never returned: expires after its TTL.
    let _lost = limiter.try_acquire().lease.unwrap().keep();
    let _lost2 = limiter.try_acquire().lease.unwrap().keep();
    assert!(limiter.try_acquire().lease.is_none());
    clock.advance(Duration::from_secs(10));
    assert!(
        limiter.try_acquire().lease.is_some(),
        "expired leases free their places"
    );
    // Another node's lease is not this one's.
    let other = LeaseHandle::new(limiter.name().clone(), "node-0000000000000000", kept.id());
    assert!(!limiter.release(&other, None));
}

/// Latency of a service that runs 40 requests at once in 10 ms: past 40 in flight, requests
/// queue and latency grows with them; `noise` (0 to 1) adds up to 20%, as real latencies vary.
fn knee_latency(in_flight: f64, noise: f64) -> Duration {
    Duration::from_secs_f64(0.010 * (in_flight / 40.0).max(1.0) * (1.0 + 0.2 * noise))
}

/// Saturated (as many in flight as the limit allows), Vegas settles near the knee (within its
/// queue band above it) rather than at its maximum of 1000, from below and from above.
#[test]
fn vegas_finds_the_knee_of_a_service() {
    let mut noise = 0x2545_f491_4f6c_dd1d_u64;
    let mut draw = move || {
        noise ^= noise << 13;
        noise ^= noise >> 7;
        noise ^= noise << 17;
        (noise >> 11) as f64 / (1u64 << 53) as f64
    };
    for initial in [10.0, 20.0, 100.0] {
        let v = Vegas {
            initial_limit: initial,
            ..Vegas::default()
        };
        let mut s = v.initial(7);
        let mut late = Vec::new();
        for i in 0..20_000 {
            let in_flight = s.limit.floor();
            s = v.sample(s, knee_latency(in_flight, draw()), in_flight as u64);
            if i >= 10_000 {
                late.push(s.limit);
            }
        }
        let mean = late.iter().sum::<f64>() / late.len() as f64;
        assert!(
            mean > 40.0 && mean < 80.0,
            "from {initial}: mean limit {mean}"
        );
    }
}

/// Gradient2 shrinks the limit when latency jumps (a slow dependency), and grows it back when
/// latency returns to its usual level.
#[test]
fn gradient2_backs_off_when_latency_jumps() {
    let g = Gradient2 {
        initial_limit: 100.0,
        min_limit: 10.0,
        max_limit: 400.0,
        ..Gradient2::default()
    };
    let mut s = g.initial();
    for _ in 0..200 {
        s = g.sample(s, ms(10), s.limit as u64);
    }
    let before = s.limit;
    for _ in 0..20 {
        s = g.sample(s, ms(50), s.limit as u64);
    }
    assert!(s.limit < before * 0.2, "{} after {before}", s.limit);
    let low = s.limit;
    for _ in 0..200 {
        s = g.sample(s, ms(10), s.limit as u64);
    }
    assert!(s.limit > low * 3.0, "recovers: {} from {low}", s.limit);
}

#[test]
fn vegas_parameters_out_of_range_are_refused_by_name() {
    let bad = [
        (
            Vegas {
                max_limit: 0.5,
                ..Vegas::default()
            },
            "max_limit",
        ),
        (
            Vegas {
                initial_limit: 2000.0,
                ..Vegas::default()
            },
            "initial_limit",
        ),
        (
            Vegas {
                smoothing: 1.5,
                ..Vegas::default()
            },
            "smoothing",
        ),
        (
            Vegas {
                alpha: -1.0,
                ..Vegas::default()
            },
            "alpha",
        ),
        (
            Vegas {
                beta: 1.0,
                ..Vegas::default()
            },
            "beta",
        ),
        (
            Vegas {
                probe_multiplier: 0.0,
                ..Vegas::default()
            },
            "probe_multiplier",
        ),
    ];
    for (v, field) in bad {
        let err = Adaptive::Vegas(v).validate().unwrap_err();
        assert!(err.to_string().contains(field), "{err}");
    }
}

proptest! {
    /// Vegas's limit stays within `[1, max_limit]` whatever the samples.
    #[test]
    fn the_vegas_limit_stays_within_its_bounds(
        samples in proptest::collection::vec((0u64..5_000_000_000, 0u64..2000), 1..300),
        max in 1.0f64..2000.0,
        smoothing in 0.01f64..=1.0,
        seed: u64,
    ) {
        let v = Vegas { initial_limit: max.min(20.0), max_limit: max, smoothing, ..Vegas::default() };
        v.validate().unwrap();
        let mut s = v.initial(seed);
        for (rtt, in_flight) in samples {
            s = v.sample(s, Duration::from_nanos(rtt), in_flight);
            prop_assert!(s.limit.is_finite() && s.limit >= 1.0 && s.limit <= max);
            prop_assert!((0.5..1.0).contains(&s.jitter));
        }
    }
}
