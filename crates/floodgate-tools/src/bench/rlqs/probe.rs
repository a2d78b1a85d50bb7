//! What `floodgate bench --rlqs` reads around its run, apart from its own streams: the serve
//! nodes' CPU time and resident memory (`/proc/PID/stat`, `/proc/PID/status`), the bench's own
//! CPU time, its open-file limit (`/proc/self/limits`), and the commands Redis ran (`INFO
//! commandstats`). Every reading is Linux's or Redis's text, parsed by a function of its own
//! here so that the parsing is tested without a process or a server.

use std::collections::BTreeMap;

/// Clock ticks per second of `/proc/PID/stat`'s times: Linux's `USER_HZ`, 100 on every
/// architecture Floodgate builds for (the kernel scales its own tick rate to it).
pub const TICKS_PER_SECOND: f64 = 100.0;

/// One process's reading: CPU time used (user and system, in clock ticks) and resident memory
/// (`VmRSS`, KiB), each `None` when it could not be read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcReading {
    /// `utime + stime`, in ticks of [`TICKS_PER_SECOND`].
    pub cpu_ticks: Option<u64>,
    /// `VmRSS`, in KiB.
    pub rss_kib: Option<u64>,
}

impl ProcReading {
    /// Reads process `pid` (`"self"` for the bench itself) from `/proc`.
    pub fn read(pid: &str) -> ProcReading {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok();
        ProcReading {
            cpu_ticks: stat.as_deref().and_then(cpu_ticks),
            rss_kib: status.as_deref().and_then(vm_rss_kib),
        }
    }

    /// Cores used between `earlier` and this reading, `seconds` apart.
    pub fn cores_since(&self, earlier: &ProcReading, seconds: f64) -> Option<f64> {
        let used = self.cpu_ticks?.checked_sub(earlier.cpu_ticks?)?;
        (seconds > 0.0).then(|| used as f64 / TICKS_PER_SECOND / seconds)
    }
}

/// `utime + stime` (fields 14 and 15) of a `/proc/PID/stat` line. The command name (field 2)
/// is in parentheses and may hold spaces and parentheses itself, so the fields are counted
/// from the last `)`.
pub fn cpu_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    // After the name: field 3 (the state) is the first, so fields 14 and 15 are the 12th
    // and 13th.
    let mut fields = after_name.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// `VmRSS` of a `/proc/PID/status` text, in KiB (`None` for a kernel thread, which has none).
pub fn vm_rss_kib(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The soft limit on open files of a `/proc/self/limits` text (`None` when unlimited).
pub fn open_files_limit(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Calls per command of an `INFO commandstats` text (`cmdstat_NAME:calls=N,usec=…` lines),
/// added to `calls`: a cluster's masters are read one by one into the same map.
pub fn add_commandstats(text: &str, calls: &mut BTreeMap<String, u64>) {
    for line in text.lines() {
        let Some((name, fields)) = line
            .strip_prefix("cmdstat_")
            .and_then(|rest| rest.split_once(':'))
        else {
            continue;
        };
        let n = fields
            .split(',')
            .find_map(|f| f.strip_prefix("calls="))
            .and_then(|n| n.trim().parse::<u64>().ok());
        if let Some(n) = n {
            *calls.entry(name.to_string()).or_default() += n;
        }
    }
}

/// The calls per command between two readings; the bench's own `INFO` (and any command whose
/// count did not grow) left out.
pub fn commands_since(
    after: &BTreeMap<String, u64>,
    before: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .filter(|(name, _)| name.as_str() != "info")
        .filter_map(|(name, n)| {
            let grown = n.saturating_sub(before.get(name).copied().unwrap_or(0));
            (grown > 0).then(|| (name.clone(), grown))
        })
        .collect()
}

/// Reads `INFO commandstats` from every Redis in `urls` (each master of a cluster, one by
/// one), summed per command; the first failure is the error, naming its URL.
pub async fn read_commandstats(urls: &[String]) -> Result<BTreeMap<String, u64>, String> {
    let mut calls = BTreeMap::new();
    for url in urls {
        let text = info_commandstats(url)
            .await
            .map_err(|e| format!("--redis {url}: {e}"))?;
        add_commandstats(&text, &mut calls);
    }
    Ok(calls)
}

async fn info_commandstats(url: &str) -> Result<String, redis::RedisError> {
    let client = redis::Client::open(url)?;
    let mut connection = client.get_multiplexed_async_connection().await?;
    redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut connection)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_times_are_counted_after_the_name() {
        // A name with spaces and a parenthesis in it; utime 250, stime 50.
        let stat = "4242 (floodgate (x) y) S 1 4242 4242 0 -1 4194560 1200 0 3 0 250 50 0 0 \
                    20 0 3 0 1000 123456789 5000 18446744073709551615";
        assert_eq!(cpu_ticks(stat), Some(300));
        assert_eq!(cpu_ticks("4242 (short) S 1 2"), None);
        assert_eq!(cpu_ticks("no name here"), None);
        let before = ProcReading {
            cpu_ticks: Some(100),
            rss_kib: None,
        };
        let after = ProcReading {
            cpu_ticks: Some(300),
            rss_kib: Some(1),
        };
        // 2 s of CPU over 4 s of run: half a core.
        assert_eq!(after.cores_since(&before, 4.0), Some(0.5));
        assert_eq!(before.cores_since(&after, 4.0), None);
        assert_eq!(ProcReading::default().cores_since(&before, 4.0), None);
    }

    #[test]
    fn resident_memory_and_the_open_files_limit_are_read() {
        let status = "Name:\tfloodgate\nVmPeak:\t  900000 kB\nVmRSS:\t   12345 kB\nThreads:\t3\n";
        assert_eq!(vm_rss_kib(status), Some(12345));
        assert_eq!(vm_rss_kib("Name:\tkthreadd\n"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max cpu time              unlimited            unlimited            seconds\n\
                      Max open files            20000                1048576              files\n";
        assert_eq!(open_files_limit(limits), Some(20000));
        let unlimited =
            "Max open files            unlimited            unlimited            files\n";
        assert_eq!(open_files_limit(unlimited), None);
        // This process's own, on Linux.
        if std::path::Path::new("/proc/self/stat").exists() {
            let me = ProcReading::read("self");
            assert!(
                me.cpu_ticks.is_some() && me.rss_kib.unwrap_or(0) > 0,
                "{me:?}"
            );
        }
    }

    #[test]
    fn commandstats_are_summed_over_masters_and_differenced() {
        let node = |evalsha: u64| {
            format!(
                "# Commandstats\r\n\
                 cmdstat_info:calls=7,usec=70,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n\
                 cmdstat_evalsha:calls={evalsha},usec=900,usec_per_call=3.00,rejected_calls=0,failed_calls=0\r\n\
                 cmdstat_get:calls=2,usec=2,usec_per_call=1.00\r\n"
            )
        };
        let mut before = BTreeMap::new();
        add_commandstats(&node(100), &mut before);
        add_commandstats(&node(50), &mut before);
        assert_eq!(before["evalsha"], 150);
        assert_eq!(before["info"], 14);
        let mut after = BTreeMap::new();
        add_commandstats(&node(130), &mut after);
        add_commandstats(&(node(60) + "cmdstat_set:calls=4,usec=4\r\n"), &mut after);
        let grown = commands_since(&after, &before);
        assert_eq!(
            grown.into_iter().collect::<Vec<_>>(),
            [("evalsha".to_string(), 40), ("set".to_string(), 4)]
        );
    }
}
