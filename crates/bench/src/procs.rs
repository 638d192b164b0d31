//! Child processes (the servers under test), their `/proc` numbers, and the machine and code
//! measured.

use std::fs::File;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oncerpc_bench::procfs;

use crate::BoxError;

/// A server running as a child process, its stdout and stderr in a log file.
pub struct Proc {
    /// Short name, e.g. `oncerpc-sqlite`.
    pub name: String,
    /// What it serves, for the report.
    pub serves: String,
    pub addr: SocketAddr,
    pub command: String,
    pub log: PathBuf,
    child: Child,
}

impl Proc {
    /// Start `program args…` with its output in `log`, pinned to CPU `cpu` when given.
    #[allow(clippy::too_many_arguments)]
    pub fn spawn(
        name: &str,
        serves: &str,
        addr: SocketAddr,
        program: &Path,
        args: &[String],
        log: PathBuf,
        cwd: &Path,
        cpu: Option<usize>,
    ) -> Result<Proc, BoxError> {
        let out = File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone()?;
        let mut cmd = Command::new(program);
        if let Some(cpu) = cpu {
            pin(&mut cmd, cpu);
        }
        let child = cmd
            .args(args)
            .current_dir(cwd)
            // `RUST_LOG` would override `--log-level`.
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
        let command = std::iter::once(program.display().to_string())
            .chain(args.iter().cloned())
            .collect::<Vec<_>>()
            .join(" ");
        Ok(Proc { name: name.into(), serves: serves.into(), addr, command, log, child })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Wait until the port accepts connections (and `ready` says yes), or fail with the log's
    /// tail when the process exits or `timeout` passes.
    pub fn wait_ready(
        &mut self,
        timeout: Duration,
        ready: impl Fn(SocketAddr) -> bool,
    ) -> Result<(), String> {
        let until = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "{} exited ({status}) before it was ready: {}",
                    self.name,
                    self.log_tail()
                ));
            }
            if TcpStream::connect_timeout(&self.addr, Duration::from_millis(200)).is_ok() && ready(self.addr)
            {
                return Ok(());
            }
            if Instant::now() > until {
                return Err(format!("{} not ready after {timeout:?}: {}", self.name, self.log_tail()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The last lines of the log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" | ")
    }

    /// Whether it is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Peak resident set (`VmHWM`), KiB.
    pub fn peak_rss_kib(&self) -> Option<u64> {
        procfs::vm_hwm_kib(&std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?)
    }

    /// Resident set now (`VmRSS`), KiB.
    pub fn rss_kib(&self) -> Option<u64> {
        procfs::vm_rss_kib(&std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?)
    }

    /// CPU time used so far (user + system), clock ticks.
    pub fn cpu_ticks(&self) -> Option<u64> {
        procfs::cpu_ticks(&std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).ok()?)
    }

    /// SIGTERM, then SIGKILL after 10 s.
    pub fn stop(&mut self) {
        if !self.alive() {
            return;
        }
        if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
            // SAFETY: kill(2) on our own child's pid; no memory is involved.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if !self.alive() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.alive() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Run `cmd` on CPU `cpu` only (its affinity set in the child before `exec`, so every thread it
/// starts inherits it; tokio's default runtime then starts one worker, as it counts the CPUs it
/// may use).
pub fn pin(cmd: &mut Command, cpu: usize) {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec the closure only calls async-signal-safe functions
    // (`sched_setaffinity`) on a set built on its own stack; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The CPUs this process may run on.
pub fn cpus_allowed() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The CPU seconds (user + system, every thread) the Redis server at `url` has used:
/// `used_cpu_user` + `used_cpu_sys` of `redis-cli INFO cpu`; `None` without redis-cli.
pub fn redis_cpu_secs(url: &str) -> Option<f64> {
    let hp = url_host_port(url, 6379)?;
    let (host, port) = hp.rsplit_once(':')?;
    let out = Command::new("redis-cli").args(["-h", host, "-p", port, "INFO", "cpu"]).output().ok()?;
    oncerpc_bench::procfs::redis_cpu(&String::from_utf8_lossy(&out.stdout))
}

/// A free loopback port (bound and released: another process could take it in between, which
/// the readiness check would then report).
pub fn free_addr() -> Result<SocketAddr, BoxError> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?)
}

/// `host:port` of a `scheme://[user@]host:port/…` URL.
pub fn url_host_port(url: &str, default_port: u16) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?']).next()?;
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host_port.is_empty() {
        return None;
    }
    Some(if host_port.contains(':') { host_port.to_owned() } else { format!("{host_port}:{default_port}") })
}

/// Whether something accepts TCP connections at `host:port`.
pub fn reachable(host_port: &str) -> bool {
    use std::net::ToSocketAddrs;
    let Ok(addrs) = host_port.to_socket_addrs() else { return false };
    addrs.into_iter().any(|a| TcpStream::connect_timeout(&a, Duration::from_secs(1)).is_ok())
}

/// CPU time of the children waited for so far (wrk), clock ticks-equivalent in seconds.
pub fn children_cpu_secs() -> f64 {
    // SAFETY: getrusage fills the struct we pass; zeroed is a valid `rusage`.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a live struct.
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) } != 0 {
        return 0.0;
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(ru.ru_utime) + secs(ru.ru_stime)
}

/// Clock ticks per second (`/proc` CPU times).
pub fn clock_ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no memory effects.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

/// (busy, total) ticks of the whole machine.
pub fn machine_ticks() -> (u64, u64) {
    std::fs::read_to_string("/proc/stat").ok().and_then(|s| procfs::machine_ticks(&s)).unwrap_or((0, 0))
}

/// Process names that mean someone is compiling.
const COMPILERS: [&str; 8] = ["rustc", "cargo", "cc1", "cc1plus", "ld", "ld.lld", "clang", "mold"];

/// A background thread that looks for compilers (other people's builds) every 500 ms.
pub struct CompilerWatch {
    pub sightings: Arc<AtomicU64>,
    pub names: Arc<Mutex<std::collections::BTreeSet<String>>>,
    stop: Arc<AtomicBool>,
}

impl CompilerWatch {
    pub fn start() -> CompilerWatch {
        let sightings = Arc::new(AtomicU64::new(0));
        let names = Arc::new(Mutex::new(std::collections::BTreeSet::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, n, st) = (sightings.clone(), names.clone(), stop.clone());
        std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                let found = running_compilers();
                if !found.is_empty() {
                    s.fetch_add(1, Ordering::Relaxed);
                    n.lock().expect("names lock").extend(found);
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        });
        CompilerWatch { sightings, names, stop }
    }

    pub fn count(&self) -> u64 {
        self.sightings.load(Ordering::Relaxed)
    }
}

impl Drop for CompilerWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Names of the compiler processes running now.
pub fn running_compilers() -> Vec<String> {
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return found };
    for entry in dir.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(comm) = std::fs::read_to_string(entry.path().join("comm")) {
            let comm = comm.trim();
            if COMPILERS.contains(&comm) {
                found.push(comm.to_owned());
            }
        }
    }
    found
}

/// The machine, for the report.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    pub memory_gib: f64,
    pub kernel: String,
}

pub fn machine() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or_else(|| "unknown".to_owned(), |(_, m)| m.trim().to_owned());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kib: f64 = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0.0);
    Machine {
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model,
        memory_gib: mem_kib / 1024.0 / 1024.0,
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_owned(),
    }
}

/// The first line a command prints (stdout, else stderr), or `None` when it cannot run.
pub fn first_line(program: &str, args: &[&str], dir: &Path) -> Option<String> {
    let out = Command::new(program).args(args).current_dir(dir).output().ok()?;
    let text = if out.stdout.is_empty() { out.stderr } else { out.stdout };
    String::from_utf8_lossy(&text).lines().next().map(|l| l.trim().to_owned())
}

/// Whether `program` is on the PATH.
pub fn have(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|p| p.join(program).is_file()))
}

/// `apt-get install -y PACKAGE` (after one `apt-get update`), when we are root and have apt.
pub fn apt_install(package: &str) -> Result<(), String> {
    // SAFETY: geteuid has no memory effects.
    if unsafe { libc::geteuid() } != 0 {
        return Err(format!("not root: install {package} with `sudo apt-get install -y {package}`"));
    }
    if !have("apt-get") {
        return Err(format!("no apt-get: install {package} by hand"));
    }
    eprintln!("== installing {package} (apt-get)");
    let _ = Command::new("apt-get").args(["update", "-qq"]).status();
    let status = Command::new("apt-get")
        .args(["install", "-y", "-qq", package])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("apt-get: {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("apt-get install {package}: {status}")) }
}

/// The time now, for the report.
pub fn now_utc() -> String {
    first_line("date", &["-u", "+%Y-%m-%d %H:%M UTC"], Path::new("/")).unwrap_or_default()
}

/// `git describe`-like: the commit and whether the work tree has changes (and where).
pub fn git_describe(root: &Path) -> String {
    let rev = first_line("git", &["rev-parse", "--short", "HEAD"], root).unwrap_or_else(|| "?".into());
    let out = Command::new("git").args(["status", "--porcelain"]).current_dir(root).output();
    let changed: std::collections::BTreeSet<String> = out
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter_map(|l| l.get(3..))
                .map(|p| {
                    let mut parts = p.split('/');
                    match (parts.next(), parts.next()) {
                        (Some("crates"), Some(c)) => format!("crates/{c}"),
                        (Some(first), _) => first.to_owned(),
                        _ => String::new(),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    if changed.is_empty() {
        rev
    } else {
        format!("{rev} + uncommitted changes in {}", changed.into_iter().collect::<Vec<_>>().join(", "))
    }
}

/// The version of `package` in Cargo.lock.
pub fn lock_version(root: &Path, package: &str) -> Option<String> {
    let lock = std::fs::read_to_string(root.join("Cargo.lock")).ok()?;
    let mut lines = lock.lines();
    while let Some(l) = lines.next() {
        if l == format!("name = \"{package}\"") {
            return lines.next()?.strip_prefix("version = ")?.trim_matches('"').to_owned().into();
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_of_store_urls() {
        assert_eq!(url_host_port("redis://127.0.0.1:6379", 6379).as_deref(), Some("127.0.0.1:6379"));
        assert_eq!(url_host_port("redis://localhost", 6379).as_deref(), Some("localhost:6379"));
        assert_eq!(
            url_host_port("postgres://postgres@127.0.0.1:5432/test", 5432).as_deref(),
            Some("127.0.0.1:5432")
        );
        assert_eq!(url_host_port("postgres://u:p@db/x?sslmode=disable", 5432).as_deref(), Some("db:5432"));
        assert_eq!(url_host_port("memory://", 1), None);
    }
}
