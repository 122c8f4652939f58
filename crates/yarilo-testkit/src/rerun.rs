//! A test that re-runs itself in a child process.
//!
//! Some tests need a second process: a server to SIGKILL mid-delivery, or a
//! private network namespace where `yarilo single` can bind its fixed
//! default ports (1143, 1110, …) without colliding with anything else on
//! the machine. A separate `#[test]` as the child's entry point would count
//! as a passing test in every normal run; instead the test re-executes the
//! test binary on its own name with a marker variable, and the same test
//! function takes the child's role when it sees the marker.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::process::{Command, Stdio};

/// The marker that tells a re-run test which role it plays.
const ROLE_ENV: &str = "YARILO_TEST_CHILD_ROLE";

/// The role this process was started in by [`child`], if it was.
pub fn role() -> Option<String> {
    std::env::var(ROLE_ENV).ok()
}

/// A command that runs test `test` (its full libtest name) of the current
/// test binary, alone and with output shown, in the child role `role`.
pub fn child(test: &str, role: &str) -> Command {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut cmd = Command::new(exe);
    libtest_args(&mut cmd, test);
    cmd.env(ROLE_ENV, role);
    cmd
}

fn libtest_args(cmd: &mut Command, test: &str) {
    cmd.args([test, "--exact", "--nocapture", "--test-threads=1"]);
}

const NETNS_ROLE: &str = "private-network";

/// Runs `body` inside a private network namespace with only a loopback
/// interface: ports bound there are invisible to (and cannot collide with)
/// every other process on the machine.
///
/// In the parent the test re-runs itself under `unshare --net` (with
/// `--map-root-user` when not root, which needs unprivileged user
/// namespaces) and fails unless the child ran exactly this test and
/// passed. `test` must be the test's libtest name (for a test at the top
/// of an integration-test file, the function name).
pub fn in_private_network(test: &str, body: impl FnOnce()) {
    if role().as_deref() == Some(NETNS_ROLE) {
        let up = Command::new("ip")
            .args(["link", "set", "lo", "up"])
            .status()
            .unwrap_or_else(|e| {
                panic!("cannot run `ip` ({e}); install iproute2 (scripts/setup-dev)")
            });
        assert!(
            up.success(),
            "ip link set lo up failed in the private namespace"
        );
        body();
        return;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut cmd = Command::new("unshare");
    cmd.arg("--net");
    if !is_root() {
        cmd.arg("--map-root-user");
    }
    cmd.arg("--").arg(exe);
    libtest_args(&mut cmd, test);
    let mut kid = cmd
        .env(ROLE_ENV, NETNS_ROLE)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run `unshare` ({e}); install util-linux"));
    let mut out = String::new();
    let stdout = kid.stdout.take().expect("piped stdout");
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        println!("{line}");
        out.push_str(&line);
        out.push('\n');
    }
    let status = kid.wait().expect("wait for the re-run test");
    assert!(
        status.success(),
        "the test failed in its private network namespace ({status}); if `unshare` itself \
         failed, run as root or enable unprivileged user namespaces \
         (sysctl kernel.unprivileged_userns_clone=1)"
    );
    // libtest exits 0 when the name matched nothing: make that an error.
    assert!(
        out.contains("1 passed"),
        "the re-run in a private network namespace did not run test {test:?}:\n{out}"
    );
}

/// Whether this process runs as root, read from the owner of
/// `/proc/self` (no `unsafe` call to geteuid).
fn is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}
