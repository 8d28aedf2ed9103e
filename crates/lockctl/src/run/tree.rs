//! The command's process tree: its process group and every descendant of
//! the process that reaps them, found, signalled and reaped until none is left.
//!
//! The reaper is a child subreaper (Linux), so a descendant whose parent
//! dies is handed to it rather than to init: while the reaper lives, every
//! descendant is its child or below one of its children, and "no child
//! left" (`ECHILD`) means "no descendant left".

use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{kill, killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{getpid, Pid};

/// The pause before looking again at a group whose members are no children
/// of ours (without a subreaper, orphans go to init, which reaps them).
const GROUP_POLL: Duration = Duration::from_millis(10);
/// How long to wait for such members to be reaped by another before giving
/// up on them: SIGKILLed already, they can only be zombies by then.
const GROUP_GRACE: Duration = Duration::from_secs(2);

/// Sends `signal` to the process group `group` and to every descendant of
/// this process, in the group or not.
pub fn signal_all(group: Pid, signal: Signal) {
    let _ = killpg(group, signal);
    for pid in descendants(getpid()) {
        let _ = kill(pid, signal);
    }
}

/// Reaps every child that has exited, without waiting; the status of
/// `command` among them goes to `status`. Answers whether a child (or a
/// member of `group`) is still there.
pub fn reap_exited(command: Pid, group: Pid, status: &mut Option<WaitStatus>) -> bool {
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => return true,
            Ok(exited) => note(command, exited, status),
            Err(Errno::EINTR) => {}
            Err(_) => return group_exists(group),
        }
    }
}

/// SIGKILLs `group` and every descendant of this process and reaps them,
/// again and again (a process may fork while it is being killed) until none
/// is left; the status of `command` among them goes to `status`.
pub fn kill_all(command: Pid, group: Pid, status: &mut Option<WaitStatus>) {
    let mut no_child_since = None;
    loop {
        signal_all(group, Signal::SIGKILL);
        match waitpid(None, None) {
            Ok(exited) => note(command, exited, status),
            Err(Errno::EINTR) => {}
            Err(_) if group_exists(group) => {
                let since = *no_child_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= GROUP_GRACE {
                    return;
                }
                std::thread::sleep(GROUP_POLL);
            }
            Err(_) => return,
        }
    }
}

fn note(command: Pid, exited: WaitStatus, status: &mut Option<WaitStatus>) {
    if exited.pid() == Some(command) {
        *status = Some(exited);
    }
}

/// Whether any process is left in `group` (zombies included).
fn group_exists(group: Pid) -> bool {
    killpg(group, None) != Err(Errno::ESRCH)
}

/// Every descendant of `root`, from the parent links in /proc.
#[cfg(target_os = "linux")]
fn descendants(root: Pid) -> Vec<Pid> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let links: Vec<(Pid, Pid)> = entries
        .filter_map(|entry| {
            let pid: i32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            Some((Pid::from_raw(pid), parent_in_stat(&stat)?))
        })
        .collect();
    let mut found = vec![root];
    let mut next = 0;
    while let Some(&parent) = found.get(next) {
        found.extend(
            links
                .iter()
                .filter(|(_, of)| *of == parent)
                .map(|(pid, _)| *pid),
        );
        next += 1;
    }
    found.remove(0);
    found
}

/// Without /proc, only the process group can be found.
#[cfg(not(target_os = "linux"))]
fn descendants(_root: Pid) -> Vec<Pid> {
    Vec::new()
}

/// The parent pid in a /proc/PID/stat line: `pid (comm) state ppid ...`,
/// where comm may hold spaces and parentheses, so it is read after the last `)`.
#[cfg(target_os = "linux")]
fn parent_in_stat(stat: &str) -> Option<Pid> {
    let (_, after_comm) = stat.rsplit_once(')')?;
    let ppid = after_comm.split_whitespace().nth(1)?.parse().ok()?;
    Some(Pid::from_raw(ppid))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn the_parent_is_read_after_the_commands_name() {
        assert_eq!(
            parent_in_stat("42 (sh) S 7 42 42 0 -1"),
            Some(Pid::from_raw(7))
        );
        assert_eq!(
            parent_in_stat("43 (a) b) (c) R 9 43 1"),
            Some(Pid::from_raw(9))
        );
        assert_eq!(parent_in_stat("44 (cut"), None);
    }

    #[test]
    fn this_process_is_no_descendant_of_itself() {
        assert!(!descendants(getpid()).contains(&getpid()));
    }
}
