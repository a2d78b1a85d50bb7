//! Call sequences run on the real Guava and their exact waits, in microseconds.
//!
//! Produced by Guava 31.1-jre (Debian's `/usr/share/java/guava.jar`) through a small Java
//! program of our own placed in Guava's package (so that it may use the package-private test
//! hooks), run once in a "cases" mode, which drives `RateLimiter.create(rate, stopwatch)`, `new SmoothBursty(stopwatch,
//! maxBurstSeconds)` + `setRate`, and `RateLimiter.create(rate, warmup, MICROSECONDS,
//! coldFactor, stopwatch)` with a fake `SleepingStopwatch` starting at 0 µs. When a case says
//! "callers sleep", sleeping a wait advances the fake stopwatch (as in Guava's own tests), so a
//! step's instant is the previous instant plus the previous wait.
//!
//! Step `(t_us, op, cost, arg, want)`: `b'r'` = `acquire(cost)`, want = wait µs; `b't'` =
//! `tryAcquire(cost, arg µs)`, want = wait µs or -1 when it returned false; `b'c'` =
//! `tryAcquire(cost, 0)` (our `Op::Check`); `b's'` = `setRate(arg / 1000.0)`. Rates and cold
//! factors are in thousandths (`milli / 1000.0` in both languages gives the same double).
//! Do not edit by hand: regenerate with the program above, then run `rustfmt` on this file.

use super::tests::{Alg, Case};

/// rate 5/s, callers sleep their waits: acquire() x4 (Guava's testSimple).
pub(super) const BURSTY_SIMPLE: Case = Case {
    alg: Alg::Bursty {
        rate_milli: 5000,
        burst_milli: 1000,
    },
    steps: &[
        (0, b'r', 1, 0, 0),
        (0, b'r', 1, 0, 200000),
        (200000, b'r', 1, 0, 200000),
        (400000, b'r', 1, 0, 200000),
    ],
};

/// rate 5/s, callers sleep: acquire(1), acquire(10), then acquire(1) x3: the request after the big
/// one pays for it.
pub(super) const BURSTY_BIG_THEN_SMALL: Case = Case {
    alg: Alg::Bursty {
        rate_milli: 5000,
        burst_milli: 1000,
    },
    steps: &[
        (0, b'r', 1, 0, 0),
        (0, b'r', 10, 0, 200000),
        (200000, b'r', 1, 0, 2000000),
        (2200000, b'r', 1, 0, 200000),
        (2400000, b'r', 1, 0, 200000),
    ],
};

/// rate 5/s, callers sleep: idle 2 s (5 permits stored), acquire() x8; sleep 0.3 s more (0.5 permit
/// stored: the last debt is paid first), acquire() x3, acquire(4), acquire().
pub(super) const BURSTY_IDLE_THEN_BURST: Case = Case {
    alg: Alg::Bursty {
        rate_milli: 5000,
        burst_milli: 1000,
    },
    steps: &[
        (2000000, b'r', 1, 0, 0),
        (2000000, b'r', 1, 0, 0),
        (2000000, b'r', 1, 0, 0),
        (2000000, b'r', 1, 0, 0),
        (2000000, b'r', 1, 0, 0),
        (2000000, b'r', 1, 0, 0),
        (2000000, b'r', 1, 0, 200000),
        (2200000, b'r', 1, 0, 200000),
        (2700000, b'r', 1, 0, 0),
        (2700000, b'r', 1, 0, 100000),
        (2800000, b'r', 1, 0, 200000),
        (3000000, b'r', 4, 0, 200000),
        (3200000, b'r', 1, 0, 800000),
    ],
};

/// rate 2/s, callers sleep: acquire() x3, setRate(10), acquire() x3, idle 0.55 s, setRate(1)
/// (rescales the stored permits), acquire() x3, idle 5 s, setRate(4), acquire(3) x3.
pub(super) const BURSTY_SET_RATE: Case = Case {
    alg: Alg::Bursty {
        rate_milli: 2000,
        burst_milli: 1000,
    },
    steps: &[
        (0, b'r', 1, 0, 0),
        (0, b'r', 1, 0, 500000),
        (500000, b'r', 1, 0, 500000),
        (1000000, b's', 0, 10000, 0),
        (1000000, b'r', 1, 0, 500000),
        (1500000, b'r', 1, 0, 100000),
        (1600000, b'r', 1, 0, 100000),
        (2250000, b's', 0, 1000, 0),
        (2250000, b'r', 1, 0, 0),
        (2250000, b'r', 1, 0, 550000),
        (2800000, b'r', 1, 0, 1000000),
        (8800000, b's', 0, 4000, 0),
        (8800000, b'r', 3, 0, 0),
        (8800000, b'r', 3, 0, 0),
        (8800000, b'r', 3, 0, 500000),
    ],
};

/// rate 5/s, explicit times (callers do not sleep): tryAcquire with timeouts 0, 100 ms, 200 ms, 250
/// ms, tryAcquire(5, ...), checks, and a denial just 1 µs short.
pub(super) const BURSTY_TRY_ACQUIRE: Case = Case {
    alg: Alg::Bursty {
        rate_milli: 5000,
        burst_milli: 1000,
    },
    steps: &[
        (0, b'c', 1, 0, 0),
        (0, b'c', 1, 0, -1),
        (0, b't', 1, 100000, -1),
        (0, b't', 1, 200000, 200000),
        (150000, b't', 5, 250000, 250000),
        (150000, b'c', 1, 0, -1),
        (1399999, b'c', 1, 0, -1),
        (1400000, b'c', 1, 0, 0),
        (1500000, b't', 2, 99999, -1),
        (1500000, b't', 2, 100000, 100000),
        (4500000, b'c', 3, 0, 0),
        (4500000, b'c', 3, 0, 0),
        (4500000, b'c', 3, 0, -1),
    ],
};

/// max_burst_seconds 3, rate 2.5/s (7.5 permits max), explicit times: idle 10 s, acquire(3) x3,
/// acquire() x2, setRate(5) (stored rescaled), idle 1.1 s, acquire(7) x3.
pub(super) const BURSTY_CUSTOM_BURST: Case = Case {
    alg: Alg::Bursty {
        rate_milli: 2500,
        burst_milli: 3000,
    },
    steps: &[
        (10000000, b'r', 3, 0, 0),
        (10000000, b'r', 3, 0, 0),
        (10000000, b'r', 3, 0, 0),
        (10000000, b'r', 1, 0, 600000),
        (10000000, b'r', 1, 0, 1000000),
        (10100000, b's', 0, 5000, 0),
        (11200000, b'r', 7, 0, 200000),
        (11200000, b'r', 7, 0, 1600000),
        (11200000, b'r', 7, 0, 3000000),
    ],
};

/// rate 3.3/s (interval 303030.30... µs, truncation matters), explicit irregular times and costs.
pub(super) const BURSTY_ODD_RATE: Case = Case {
    alg: Alg::Bursty {
        rate_milli: 3300,
        burst_milli: 1000,
    },
    steps: &[
        (0, b'r', 1, 0, 0),
        (123457, b'r', 2, 0, 179573),
        (123458, b't', 1, 250000, -1),
        (423457, b'r', 7, 0, 485633),
        (8201234, b'r', 3, 0, 0),
        (8201244, b't', 1, 250000, 0),
        (8201254, b'r', 1, 0, 212101),
        (8534587, b'r', 2, 0, 181798),
        (8626506, b't', 5, 250000, -1),
        (9626507, b'r', 1, 0, 0),
        (9626512, b'r', 1, 0, 0),
        (10050754, b't', 4, 250000, 0),
    ],
};

/// max_burst_seconds 0, rate 4/s: nothing is ever stored, idle or not; explicit times.
pub(super) const BURSTY_NO_BURST: Case = Case {
    alg: Alg::Bursty {
        rate_milli: 4000,
        burst_milli: 0,
    },
    steps: &[
        (5000000, b'r', 1, 0, 0),
        (5000000, b'r', 1, 0, 250000),
        (5000000, b'r', 1, 0, 500000),
        (5600000, b'r', 2, 0, 150000),
        (5600000, b'c', 1, 0, -1),
        (6000000, b'c', 1, 0, -1),
    ],
};

/// rate 2/s, warmup 4 s, cold factor 3, callers sleep (Guava's testWarmUp): acquire() x8, sleep 0.5
/// s, sleep 4 s, acquire() x8, sleep 0.5 s, sleep 2 s, acquire() x8.
pub(super) const WARMING_GUAVA_EXAMPLE: Case = Case {
    alg: Alg::WarmingUp {
        rate_milli: 2000,
        warmup_us: 4000000,
        cold_milli: 3000,
    },
    steps: &[
        (0, b'r', 1, 0, 0),
        (0, b'r', 1, 0, 1375000),
        (1375000, b'r', 1, 0, 1125000),
        (2500000, b'r', 1, 0, 875000),
        (3375000, b'r', 1, 0, 625000),
        (4000000, b'r', 1, 0, 500000),
        (4500000, b'r', 1, 0, 500000),
        (5000000, b'r', 1, 0, 500000),
        (10000000, b'r', 1, 0, 0),
        (10000000, b'r', 1, 0, 1375000),
        (11375000, b'r', 1, 0, 1125000),
        (12500000, b'r', 1, 0, 875000),
        (13375000, b'r', 1, 0, 625000),
        (14000000, b'r', 1, 0, 500000),
        (14500000, b'r', 1, 0, 500000),
        (15000000, b'r', 1, 0, 500000),
        (18000000, b'r', 1, 0, 0),
        (18000000, b'r', 1, 0, 500000),
        (18500000, b'r', 1, 0, 500000),
        (19000000, b'r', 1, 0, 500000),
        (19500000, b'r', 1, 0, 500000),
        (20000000, b'r', 1, 0, 500000),
        (20500000, b'r', 1, 0, 500000),
        (21000000, b'r', 1, 0, 500000),
    ],
};

/// rate 5/s, warmup 4 s, cold factor 10, callers sleep (Guava's testWarmUpWithColdFactor):
/// acquire() x8, sleep 0.2 s, sleep 4 s, acquire() x8, sleep 0.2 s, sleep 1 s, acquire() x8.
pub(super) const WARMING_COLD_FACTOR_10: Case = Case {
    alg: Alg::WarmingUp {
        rate_milli: 5000,
        warmup_us: 4000000,
        cold_milli: 10000,
    },
    steps: &[
        (0, b'r', 1, 0, 0),
        (0, b'r', 1, 0, 1752500),
        (1752500, b'r', 1, 0, 1257500),
        (3010000, b'r', 1, 0, 762500),
        (3772500, b'r', 1, 0, 300227),
        (4072727, b'r', 1, 0, 200000),
        (4272727, b'r', 1, 0, 200000),
        (4472727, b'r', 1, 0, 200000),
        (8872727, b'r', 1, 0, 0),
        (8872727, b'r', 1, 0, 1752500),
        (10625227, b'r', 1, 0, 1257500),
        (11882727, b'r', 1, 0, 762500),
        (12645227, b'r', 1, 0, 300227),
        (12945454, b'r', 1, 0, 200000),
        (13145454, b'r', 1, 0, 200000),
        (13345454, b'r', 1, 0, 200000),
        (14745454, b'r', 1, 0, 0),
        (14745454, b'r', 1, 0, 200000),
        (14945454, b'r', 1, 0, 200000),
        (15145454, b'r', 1, 0, 200000),
        (15345454, b'r', 1, 0, 200000),
        (15545454, b'r', 1, 0, 200000),
        (15745454, b'r', 1, 0, 200000),
        (15945454, b'r', 1, 0, 200000),
    ],
};

/// rate 10/s, warmup 2 s, cold factor 3, explicit times: checks every 50 ms while cold, warming and
/// warm; idle 1 s (half cold); tryAcquire with timeouts; idle 10 s (cold again); a big acquire(15)
/// from cold.
pub(super) const WARMING_CYCLES: Case = Case {
    alg: Alg::WarmingUp {
        rate_milli: 10000,
        warmup_us: 2000000,
        cold_milli: 3000,
    },
    steps: &[
        (0, b'c', 1, 0, 0),
        (50000, b'c', 1, 0, -1),
        (100000, b'c', 1, 0, -1),
        (150000, b'c', 1, 0, -1),
        (200000, b'c', 1, 0, -1),
        (250000, b'c', 1, 0, -1),
        (300000, b'c', 1, 0, 0),
        (350000, b'c', 1, 0, -1),
        (400000, b'c', 1, 0, -1),
        (450000, b'c', 1, 0, -1),
        (500000, b'c', 1, 0, -1),
        (550000, b'c', 1, 0, -1),
        (600000, b'c', 1, 0, 0),
        (650000, b'c', 1, 0, -1),
        (700000, b'c', 1, 0, -1),
        (750000, b'c', 1, 0, -1),
        (800000, b'c', 1, 0, -1),
        (850000, b'c', 1, 0, -1),
        (900000, b'c', 1, 0, 0),
        (950000, b'c', 1, 0, -1),
        (1000000, b'c', 1, 0, -1),
        (1050000, b'c', 1, 0, -1),
        (1100000, b'c', 1, 0, -1),
        (1150000, b'c', 1, 0, 0),
        (1200000, b'c', 1, 0, -1),
        (1250000, b'c', 1, 0, -1),
        (1300000, b'c', 1, 0, -1),
        (1350000, b'c', 1, 0, -1),
        (1400000, b'c', 1, 0, 0),
        (1450000, b'c', 1, 0, -1),
        (1500000, b'c', 1, 0, -1),
        (1550000, b'c', 1, 0, -1),
        (1600000, b'c', 1, 0, -1),
        (1650000, b'c', 1, 0, 0),
        (1700000, b'c', 1, 0, -1),
        (1750000, b'c', 1, 0, -1),
        (1800000, b'c', 1, 0, -1),
        (1850000, b'c', 1, 0, 0),
        (1900000, b'c', 1, 0, -1),
        (1950000, b'c', 1, 0, -1),
        (3000000, b't', 1, 0, 0),
        (3000000, b't', 2, 100000, -1),
        (3000000, b't', 1, 300000, 290000),
        (3000000, b't', 1, 500000, -1),
        (13000000, b'r', 15, 0, 0),
        (13000000, b'r', 1, 0, 2500000),
        (14000000, b'c', 1, 0, -1),
        (16000000, b'c', 1, 0, 0),
        (16000000, b'r', 1, 0, 100000),
    ],
};

/// rate 2/s, warmup 4 s, cold factor 3, callers sleep: acquire() x6, setRate(4) (stored rescaled),
/// acquire() x6, sleep 3 s, setRate(1), acquire(2) x3.
pub(super) const WARMING_SET_RATE: Case = Case {
    alg: Alg::WarmingUp {
        rate_milli: 2000,
        warmup_us: 4000000,
        cold_milli: 3000,
    },
    steps: &[
        (0, b'r', 1, 0, 0),
        (0, b'r', 1, 0, 1375000),
        (1375000, b'r', 1, 0, 1125000),
        (2500000, b'r', 1, 0, 875000),
        (3375000, b'r', 1, 0, 625000),
        (4000000, b'r', 1, 0, 500000),
        (4500000, b's', 0, 4000, 0),
        (4500000, b'r', 1, 0, 500000),
        (5000000, b'r', 1, 0, 250000),
        (5250000, b'r', 1, 0, 250000),
        (5500000, b'r', 1, 0, 250000),
        (5750000, b'r', 1, 0, 250000),
        (6000000, b'r', 1, 0, 250000),
        (9250000, b's', 0, 1000, 0),
        (9250000, b'r', 2, 0, 0),
        (9250000, b'r', 2, 0, 2281250),
        (11531250, b'r', 2, 0, 2000000),
    ],
};

/// rate 7.3/s, warmup 1.234567 s, cold factor 2.5, explicit irregular times and costs.
pub(super) const WARMING_ODD: Case = Case {
    alg: Alg::WarmingUp {
        rate_milli: 7300,
        warmup_us: 1234567,
        cold_milli: 2500,
    },
    steps: &[
        (0, b'r', 3, 0, 0),
        (1, b'r', 1, 0, 847847),
        (77778, b'r', 2, 0, 972887),
        (377779, b't', 1, 400000, -1),
        (377784, b'r', 4, 0, 973232),
        (2377784, b'r', 1, 0, 0),
        (2377797, b'r', 1, 0, 136973),
        (2509110, b't', 2, 400000, 142646),
        (3109110, b'r', 6, 0, 0),
        (3109119, b'r', 1, 0, 821908),
        (3154573, b'r', 1, 0, 913440),
        (6154573, b't', 9, 400000, 0),
    ],
};
