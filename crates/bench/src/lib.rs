//! The harnesses behind `gantry bench …`: each builds what it measures (a synthetic cluster,
//! an in-memory control plane with simulated nodes, a device plugin on simulated GPUs), runs
//! it and returns figures or a table. The CLI only parses flags and prints.
//!
//! - [`schedule`]: the scheduler core, on a synthetic cluster or a trace (`gantry bench schedule`)
//! - [`scheduler_api`]: `gantry scheduler` through the API (`gantry bench scheduler-api`)
//! - [`operator`]: `gantry operator` from bare GPU nodes to ready (`gantry bench operator`)
//! - [`device_plugin`]: Allocate / GetPreferredAllocation latency (`gantry bench device-plugin`)
//! - [`nodes`]: simulated nodes to every GPU allocatable (`gantry bench nodes`)
//! - [`apiserver`]: the embedded API server's creates, updates and watch events per second
//! - [`writes`]: the API server's write path in process, CPU per write (`gantry bench writes`)
//! - [`replay`]: the FGD paper's evaluation protocol on plain values, with Go's random streams
//! - [`workload`]: synthetic clusters and published trace files as scheduler input

pub mod apiserver;
pub mod device_plugin;
pub mod nodes;
pub mod operator;
pub mod replay;
pub mod schedule;
pub mod scheduler_api;
pub mod tally;
pub mod workload;
pub mod writes;

/// Resident set size and its peak (`VmRSS`, `VmHWM`) of process `pid`, in bytes, from
/// `/proc/<pid>/status`; `None` where not readable.
pub fn rss_of(pid: u32) -> (Option<u64>, Option<u64>) {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return (None, None);
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// User + system CPU seconds a process has used (`/proc/<pid>/stat`, at Linux's 100 ticks a
/// second); `None` where it cannot be read.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    stat_cpu_seconds(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// CPU seconds of process `pid` by thread name (`/proc/<pid>/task/*/comm`), live threads
/// only: (name, threads, seconds), most first. Tokio's workers share one name; the agents'
/// own threads (exporter sampler, plugin health, ...) have theirs.
pub fn cpu_by_thread(pid: u32) -> Vec<(String, usize, f64)> {
    let mut by: std::collections::BTreeMap<String, (usize, f64)> = Default::default();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    for t in tasks.flatten() {
        let path = t.path();
        let name = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        let Some(secs) = std::fs::read_to_string(path.join("stat"))
            .ok()
            .and_then(|s| stat_cpu_seconds(&s))
        else {
            continue;
        };
        let e = by.entry(name.trim().to_string()).or_default();
        e.0 += 1;
        e.1 += secs;
    }
    let mut out: Vec<_> = by.into_iter().map(|(n, (c, s))| (n, c, s)).collect();
    out.sort_by(|a, b| b.2.total_cmp(&a.2));
    out
}

/// utime + stime of one `/proc/.../stat` line, in seconds (100 ticks a second).
fn stat_cpu_seconds(stat: &str) -> Option<f64> {
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i)?.parse::<u64>().ok();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name and state.
    Some((ticks(11)? + ticks(12)?) as f64 / 100.0)
}

/// A scratch directory for one run, named after `what` and this process, under
/// [`scratch_root`].
fn scratch(what: &str) -> anyhow::Result<std::path::PathBuf> {
    use anyhow::Context;
    let d = scratch_root().join(format!("gantry-bench-{what}-{}", std::process::id()));
    std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
    Ok(d)
}

/// Where scratch directories go: `TMPDIR` when it is set; else `/dev/shm` when it is a tmpfs
/// with [`TMPFS_ROOM`] free; else the system's temp directory. The simulated nodes' agents
/// create, fsync and rename their host files there: on ext4 that was ~15 % of a kubelet
/// process at 5,000 nodes. What a run puts on tmpfs is memory, so the benches add it to their
/// peak ([`tmpfs_used`]).
fn scratch_root() -> std::path::PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    if std::env::var_os("TMPDIR").is_none() && tmpfs_free(shm).is_some_and(|f| f >= TMPFS_ROOM) {
        return shm.to_path_buf();
    }
    std::env::temp_dir()
}

/// Free space a tmpfs must have to hold the scratch directory (5,000 simulated nodes write
/// about 150 MB; a container's `/dev/shm` is 64 MB by default).
const TMPFS_ROOM: u64 = 2 << 30;

/// Linux's `TMPFS_MAGIC`.
const TMPFS_MAGIC: u64 = 0x0102_1994;

/// The statistics of the tmpfs holding `dir` (None: not a tmpfs).
fn tmpfs(dir: &std::path::Path) -> Option<rustix::fs::StatVfs> {
    let on_tmpfs = rustix::fs::statfs(dir).is_ok_and(|s| s.f_type as u64 == TMPFS_MAGIC);
    on_tmpfs.then(|| rustix::fs::statvfs(dir).ok()).flatten()
}

fn tmpfs_free(dir: &std::path::Path) -> Option<u64> {
    tmpfs(dir).map(|s| s.f_bavail.saturating_mul(s.f_frsize))
}

/// Bytes in use on the tmpfs holding `dir` (None: not a tmpfs). A run counts what this grows
/// by from its start.
pub(crate) fn tmpfs_used(dir: &std::path::Path) -> Option<u64> {
    tmpfs(dir).map(|s| {
        s.f_blocks
            .saturating_sub(s.f_bfree)
            .saturating_mul(s.f_frsize)
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_this_process_cpu_time() {
        // Spin until the kernel has charged at least one tick (10 ms) to this process; on a
        // loaded machine that can take far longer than 10 ms of wall time.
        let start = std::time::Instant::now();
        let mut s = 0.0;
        while s == 0.0 && start.elapsed() < std::time::Duration::from_secs(20) {
            let spin = std::time::Instant::now();
            while spin.elapsed() < std::time::Duration::from_millis(20) {}
            s = super::cpu_seconds(std::process::id()).expect("own /proc stat");
        }
        assert!(s > 0.0, "no CPU time charged after 20 s of spinning: {s}");
    }

    #[test]
    fn reads_this_process_memory() {
        let (rss, hwm) = super::rss_of(std::process::id());
        let (rss, hwm) = (rss.unwrap(), hwm.unwrap());
        assert!(rss > 0 && hwm >= rss, "{rss} {hwm}");
        assert_eq!(super::rss_of(u32::MAX), (None, None));
    }

    #[test]
    fn threads_are_grouped_by_name() {
        let t = super::cpu_by_thread(std::process::id());
        assert!(!t.is_empty());
        assert_eq!(
            t.iter().map(|x| x.1).sum::<usize>(),
            std::fs::read_dir("/proc/self/task").unwrap().count()
        );
        assert!(t.windows(2).all(|w| w[0].2 >= w[1].2));
    }
}
