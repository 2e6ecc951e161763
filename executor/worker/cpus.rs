//! The CPUs this process may use, as the operating system limits them: the default worker count.
//!
//! With no explicit `worker_threads`, a runtime starts one worker per CPU it can run on, counted
//! as the smaller of two limits (the rule Go follows for its default `GOMAXPROCS`):
//!
//! 1. **Affinity**: the CPUs the process may be scheduled on (the `Cpus_allowed_list` line of
//!    `/proc/self/status`, a list such as `0-3,8,10-11`), else what the standard library reports.
//! 2. **The cgroup v2 quota**: the process's cgroup is the path on the `0::` line of
//!    `/proc/self/cgroup`; each `cpu.max` file from that cgroup up to the root of the cgroup
//!    filesystem holds `<quota> <period>` (microseconds of CPU time per period) or `max <period>`
//!    (no limit). The tightest quota on the path, divided by its period and rounded up, is the
//!    limit: `150000 100000` (1.5 CPUs) allows 2 workers.
//!
//! The same count, read at build when `worker_threads` is given, is the floor the worker-count
//! controller may shed to while more workers than CPUs let the shares drift (`controller`,
//! step 5).
//!
//! The count is at least 1. A missing or unreadable file, or content that does not parse, is no
//! limit: the default never fails and never panics for what the system reports.
//!
//! The parsing is pure functions over the files' text ([`affinity_count`], [`cgroup_path`],
//! [`quota_cpus`], [`tightest_quota`], [`default_workers`]), which the unit tests call with the
//! limits they choose. The environment variable `RONDO_CGROUP_ROOT` names another directory to
//! read as the root of the cgroup filesystem (default `/sys/fs/cgroup`), so a test or an unusual
//! mount can supply the `cpu.max` files.

use std::path::{Path, PathBuf};

/// The environment variable naming the directory read as the cgroup v2 root.
pub(crate) const CGROUP_ROOT_VAR: &str = "RONDO_CGROUP_ROOT";
/// Where cgroup v2 is mounted, unless [`CGROUP_ROOT_VAR`] says otherwise.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// The default worker count of this process (see the module docs), at most `max`.
pub(crate) fn default_worker_count(max: usize) -> usize {
    let affinity = read_system_file("/proc/self/status")
        .and_then(|s| affinity_count(&s))
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()));
    let root = std::env::var_os(CGROUP_ROOT_VAR)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(CGROUP_ROOT));
    let quota = read_system_file("/proc/self/cgroup")
        .and_then(|s| cgroup_path(&s).map(str::to_owned))
        .and_then(|path| tightest_quota(&path, |dir| read_cpu_max(&root, dir)));
    default_workers(affinity, quota).min(max)
}

/// The text of `cpu.max` in cgroup `dir` (a path from the cgroup root, `/` for the root).
fn read_cpu_max(root: &Path, dir: &str) -> Option<String> {
    let rel = dir.trim_start_matches('/');
    let file = if rel.is_empty() {
        root.join("cpu.max")
    } else {
        root.join(rel).join("cpu.max")
    };
    read_system_file(file)
}

/// A system file's text, or `None` if it cannot be read; always `None` under Miri, whose
/// isolation has no file system (an open there is an error that stops the program).
fn read_system_file(path: impl AsRef<Path>) -> Option<String> {
    if cfg!(miri) {
        return None;
    }
    std::fs::read_to_string(path).ok()
}

/// The default count from the affinity count and the quota in CPUs (each `None` when unknown or
/// unlimited): the smaller, at least 1.
pub(crate) fn default_workers(affinity: Option<usize>, quota: Option<usize>) -> usize {
    let n = match (affinity, quota) {
        (Some(a), Some(q)) => a.min(q),
        (Some(a), None) => a,
        (None, Some(q)) => q,
        (None, None) => 1,
    };
    n.max(1)
}

/// The number of CPUs on the `Cpus_allowed_list` line of `/proc/self/status`; `None` if the line
/// is missing or does not parse.
pub(crate) fn affinity_count(status: &str) -> Option<usize> {
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    let mut count = 0usize;
    for part in line.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let a: usize = a.trim().parse().ok()?;
                let b: usize = b.trim().parse().ok()?;
                if b < a {
                    return None;
                }
                count = count.checked_add(b - a + 1)?;
            }
            None => {
                part.trim().parse::<usize>().ok()?;
                count += 1;
            }
        }
    }
    (count > 0).then_some(count)
}

/// The process's cgroup v2 path: the `0::<path>` line of `/proc/self/cgroup`.
pub(crate) fn cgroup_path(cgroup: &str) -> Option<&str> {
    cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::trim)
        .filter(|p| p.starts_with('/'))
}

/// The limit one `cpu.max` file states, in whole CPUs rounded up: `None` for `max` (no limit) or
/// content that does not parse. A quota below one period still allows one CPU.
pub(crate) fn quota_cpus(cpu_max: &str) -> Option<usize> {
    let mut fields = cpu_max.split_whitespace();
    let quota = fields.next()?;
    let period: u64 = match fields.next() {
        Some(p) => p.parse().ok()?,
        // The kernel always writes both; a lone quota has the default period.
        None => 100_000,
    };
    if fields.next().is_some() || quota == "max" || period == 0 {
        return None;
    }
    let quota: u64 = quota.parse().ok()?;
    if quota == 0 {
        return None;
    }
    usize::try_from(quota.div_ceil(period).max(1)).ok()
}

/// The tightest quota, in CPUs, on the path from cgroup `path` up to the root, reading each
/// cgroup's `cpu.max` with `read` (given the cgroup's path: `/a/b`, `/a`, `/`).
pub(crate) fn tightest_quota(
    path: &str,
    mut read: impl FnMut(&str) -> Option<String>,
) -> Option<usize> {
    let mut best: Option<usize> = None;
    let mut dir = path.trim_end_matches('/');
    loop {
        let here = if dir.is_empty() { "/" } else { dir };
        if let Some(q) = read(here).as_deref().and_then(quota_cpus) {
            best = Some(best.map_or(q, |b| b.min(q)));
        }
        if dir.is_empty() {
            return best;
        }
        dir = match dir.rfind('/') {
            Some(i) => &dir[..i],
            None => "",
        };
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn tree(files: &[(&str, &str)]) -> impl FnMut(&str) -> Option<String> {
        let map: HashMap<String, String> = files
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |dir| map.get(dir).cloned()
    }

    #[test]
    fn max_is_no_limit() {
        assert_eq!(quota_cpus("max 100000\n"), None);
        assert_eq!(tightest_quota("/a", tree(&[("/a", "max 100000")])), None);
        assert_eq!(default_workers(Some(8), None), 8);
    }

    #[test]
    fn quota_over_period_in_whole_cpus() {
        assert_eq!(quota_cpus("200000 100000\n"), Some(2));
        assert_eq!(quota_cpus("400000 100000"), Some(4));
        assert_eq!(default_workers(Some(8), quota_cpus("200000 100000")), 2);
    }

    #[test]
    fn a_fraction_rounds_up() {
        assert_eq!(quota_cpus("150000 100000"), Some(2));
        assert_eq!(quota_cpus("100001 100000"), Some(2));
        // Less than one CPU still runs one worker.
        assert_eq!(quota_cpus("10000 100000"), Some(1));
        assert_eq!(quota_cpus("50000 50000"), Some(1));
    }

    #[test]
    fn the_tightest_limit_up_the_tree_wins() {
        let files = [
            ("/kubepods/pod/ctr", "400000 100000"),
            ("/kubepods/pod", "150000 100000"),
            ("/kubepods", "max 100000"),
        ];
        assert_eq!(tightest_quota("/kubepods/pod/ctr", tree(&files)), Some(2));
        // A tighter child wins over a looser parent too.
        let files = [("/a/b", "100000 100000"), ("/a", "800000 100000")];
        assert_eq!(tightest_quota("/a/b/", tree(&files)), Some(1));
        // The root counts as well.
        assert_eq!(
            tightest_quota("/", tree(&[("/", "300000 100000")])),
            Some(3)
        );
        assert_eq!(
            tightest_quota("/x/y", tree(&[("/", "300000 100000")])),
            Some(3)
        );
    }

    #[test]
    fn missing_files_are_no_limit() {
        assert_eq!(tightest_quota("/a/b", tree(&[])), None);
        assert_eq!(cgroup_path(""), None);
        // cgroup v1 only: no `0::` line.
        assert_eq!(cgroup_path("4:memory:/x\n1:cpu:/\n"), None);
        assert_eq!(affinity_count("Name:\tx\n"), None);
        assert_eq!(default_workers(None, None), 1);
        assert_eq!(default_workers(None, Some(3)), 3);
    }

    #[test]
    fn garbage_is_no_limit_and_never_a_panic() {
        for text in [
            "",
            "\n",
            "abc",
            "abc 100000",
            "100000 abc",
            "100000 0",
            "0 100000",
            "-5 100000",
            "1 2 3",
            "99999999999999999999999 1",
            "\u{fffd}\u{0}",
        ] {
            assert_eq!(quota_cpus(text), None, "{text:?}");
        }
        assert_eq!(tightest_quota("no slash", tree(&[("/", "x")])), None);
        for text in [
            "Cpus_allowed_list:\t",
            "Cpus_allowed_list:\t3-1",
            "Cpus_allowed_list:\tx",
            "Cpus_allowed_list:\t0-",
        ] {
            assert_eq!(affinity_count(text), None, "{text:?}");
        }
    }

    #[test]
    fn parses_the_proc_files() {
        let cg = "9:name=systemd:/\n1:cpu:/\n0::/system.slice/app.service\n";
        assert_eq!(cgroup_path(cg), Some("/system.slice/app.service"));
        let status = "Name:\tt\nCpus_allowed:\tff\nCpus_allowed_list:\t0-3,8,10-11\nx: y\n";
        assert_eq!(affinity_count(status), Some(7));
        assert_eq!(affinity_count("Cpus_allowed_list:\t0\n"), Some(1));
    }

    #[test]
    fn cpu_max_is_read_under_the_given_root() {
        let dir = std::env::temp_dir().join(format!("rondo-cpus-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("a")).unwrap();
        std::fs::write(dir.join("a").join("cpu.max"), "150000 100000\n").unwrap();
        assert_eq!(
            read_cpu_max(&dir, "/a").as_deref().and_then(quota_cpus),
            Some(2)
        );
        assert_eq!(read_cpu_max(&dir, "/"), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
