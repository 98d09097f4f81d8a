"""How a sandbox process confines itself: namespaces, a private read-only root, dropped
privileges, a seccomp filter, rlimits; and, for hosts without namespaces, an audit hook.

Runs inside the sandbox (sent as compiled code, before any untrusted code exists): standard
library and ctypes only. Python 3.11 has no `os.unshare`, `mount` or `prctl`: they are libc
calls through ctypes. Each step raises `ConfinementError` naming the call and errno; the test
runner reports it to the parent, which then says what the host refuses.

The kernel features used, and why each:
- user namespace (`unshare(CLONE_NEWUSER)`): lets an unprivileged process make the others; the
  sandbox is root inside it, and nothing outside. Mapped to the caller's own uid only; a caller
  that is root first becomes SANDBOX_UID ("nobody"): the kernel exempts root from RLIMIT_NPROC,
  and outside its namespace the sandbox should be nobody in particular.
- mount namespace + a fresh tmpfs root, entered with `pivot_root`, the old root detached: the
  sandbox sees only what is bound in, read-only (`/usr` and the Python installation: the
  standard library, nothing of the run, the venv, the data or /proc), every directory of
  installed packages inside those covered by an empty read-only tmpfs (a site-packages beside
  the interpreter holds packages, and a package may hold a benchmark's solutions), plus a
  scratch tmpfs at /tmp with a size and inode quota, and /dev/null, zero, random, urandom.
- network namespace: no interfaces but a down loopback; IPC and UTS namespaces: nothing shared.
- PID namespace: the answer's process is its init; when it dies the kernel kills every process
  left in it, and it sees no process outside. It dies with the test runner (a parent-death
  signal seccomp keeps it from clearing), which dies with the verifier's process.
- privileges: every capability dropped (effective, permitted, inheritable, ambient, bounding),
  securebits locked so exec cannot regain them, `no_new_privs`.
- seccomp (x86_64, aarch64): process creation (only threads may be cloned), ptrace and
  process_vm_*, namespace, mount and keyring calls, io_uring, bpf, perf, module and kexec calls
  fail with EPERM; so does clearing the parent-death signal, and signalling any process but
  the caller itself (and the targets it names: the runner its answer's process). No library: a
  few dozen BPF instructions built here (libseccomp is not on every host, and the rules are a
  fixed list).
- rlimits, RLIMIT_NPROC among them: on Linux 5.14 and later it counts the tasks (processes and
  threads) of one uid in one user namespace, so with a namespace per sandbox it bounds the
  sandbox's threads; before 5.14 it counts the uid's across the host, and is not set.
"""

from __future__ import annotations

import ctypes
import encodings.unicode_escape  # noqa: F401  used by _mounts_at_or_below, once root may be gone
import os
import resource
import signal
import sys

CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS = 0x00020000, 0x02000000, 0x04000000
CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID = 0x08000000, 0x10000000, 0x20000000
CLONE_NEWNET, CLONE_THREAD = 0x40000000, 0x00010000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
SANDBOX_UID = SANDBOX_GID = 65534  # "nobody": what a root caller becomes before its namespaces
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_SECCOMP, PR_CAPBSET_DROP = 1, 4, 22, 24
PR_SET_SECUREBITS, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 28, 38, 47, 4
# NOROOT, NO_SETUID_FIXUP, KEEP_CAPS_LOCKED, NO_CAP_AMBIENT_RAISE, each with its lock bit
SECUREBITS_LOCKED_DOWN = 0b11101111
# statvfs flags a bind remount must keep (the kernel refuses to clear them in a user namespace)
_KEPT_MOUNT_FLAGS = ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC),
                     (os.ST_NOATIME, 1024), (os.ST_NODIRATIME, 2048), (os.ST_RELATIME, 1 << 21))

# seccomp: (AUDIT_ARCH, pivot_root, clone, clone3, [denied syscall numbers])
_SYSCALLS = {
    "x86_64": (0xC000003E, 155, 56, 435, [
        200, 424, 434,  # tkill, pidfd_send_signal, pidfd_open: signals are kill/tgkill's alone
        57, 58, 101, 310, 311, 272, 308, 165, 166, 155, 161, 321, 298, 250, 248, 249, 323, 425,
        426, 427, 428, 429, 430, 431, 432, 433, 442, 246, 320, 175, 313, 176, 304, 303, 438, 163,
        167, 168, 169, 170, 171, 172, 173, 179, 103, 164, 227, 159, 135]),
    "aarch64": (0xC00000B7, 41, 220, 435, [
        130, 424, 434,
        117, 270, 271, 97, 268, 40, 39, 41, 51, 280, 241, 219, 217, 218, 282, 425, 426, 427, 428,
        429, 430, 431, 432, 433, 442, 104, 294, 105, 273, 106, 265, 264, 438, 89, 224, 225, 142,
        161, 162, 60, 116, 170, 112, 171, 92]),
}
# seccomp, calls whose first argument is checked: (prctl, [kill, tgkill, rt_sigqueueinfo,
# rt_tgsigqueueinfo]): prctl may not set the parent-death signal (once set, it stays), a signal
# goes only to the caller or the targets it names.
_ARGUMENT_CHECKED = {"x86_64": (157, [62, 234, 129, 297]),
                     "aarch64": (167, [129, 131, 138, 240])}
_SECCOMP_ALLOW, _SECCOMP_ERRNO, _SECCOMP_KILL = 0x7FFF0000, 0x00050000, 0x80000000
_EPERM, _ENOSYS = 1, 38


class ConfinementError(Exception):
    """A confinement step the kernel refused."""


class _Sandbox:
    """libc, loaded once per process."""

    libc = None


def _libc():
    if _Sandbox.libc is None:
        _Sandbox.libc = ctypes.CDLL(None, use_errno=True)
    return _Sandbox.libc


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise ConfinementError(f"{what}: {os.strerror(errno)} (errno {errno})")


def _prctl(option: int, arg: int, what: str) -> None:
    _check(_libc().prctl(option, ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0),
                         ctypes.c_ulong(0)), what)


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when its parent dies (and now, if it already has)."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent_pid:
        os._exit(70)


def set_undumpable() -> None:
    """No ptrace, /proc/<pid>/mem or core dump of this process without CAP_SYS_PTRACE."""
    _prctl(PR_SET_DUMPABLE, 0, "prctl(PR_SET_DUMPABLE)")


def enter_namespaces(read_only: list, devices: list) -> dict[str, int]:
    """New user, mount, network, IPC, UTS and cgroup namespaces for this process, and a new PID
    namespace for its next child (which becomes its init). Returns the sources of
    `build_root`'s binds, opened (O_PATH) in the new mount namespace while this process is
    still its own uid (a root-only /root may hold the Python installation) and before /tmp is
    covered (a source under /tmp stays reachable through /proc/self/fd).

    Root is mapped to SANDBOX_UID ("nobody", see the module docstring): a helper forked first
    stays root outside to write the maps (which takes CAP_SETUID there), then this process
    becomes the namespace's root, that is nobody outside. A change of uid clears the
    parent-death signal: `die_with_parent` comes after this."""
    helper = _map_helper() if _root_of_the_host() else None
    uid, gid = os.getuid(), os.getgid()
    flags = (CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
             | CLONE_NEWCGROUP | CLONE_NEWPID)
    _check(_libc().unshare(flags), "unshare(user, mount, net, ipc, uts, cgroup, pid)")
    if helper is not None:
        pid, go = helper
        os.write(go, b"m")
        os.close(go)
        if os.waitpid(pid, 0)[1] != 0:
            raise ConfinementError(f"mapping the user namespace's root to uid {SANDBOX_UID} "
                                   f"failed")
    else:
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"),
                           ("gid_map", f"0 {gid} 1")):
            try:
                with open(f"/proc/self/{name}", "w") as f:
                    f.write(text)
            except OSError as e:
                raise ConfinementError(f"writing /proc/self/{name}: {e}") from None
    sources = {path: os.open(path, os.O_PATH)
               for path in [*(source for source, _ in read_only), *devices]}
    if helper is not None:
        os.setresgid(0, 0, 0)  # the namespace's root: SANDBOX_UID outside
        os.setresuid(0, 0, 0)
    return sources


def _root_of_the_host() -> bool:
    """Whether this process is root of the initial user namespace (the one RLIMIT_NPROC
    exempts; root of a namespace mapped to another uid is counted, and cannot map nobody)."""
    try:
        with open("/proc/self/uid_map") as f:
            return os.geteuid() == 0 and f.read().split() == ["0", "0", "4294967295"]
    except OSError:
        return False


def _map_helper() -> tuple[int, int]:
    """A child that, told to, maps this process's next user namespace's root to SANDBOX_UID
    and exits 0; (its pid, the descriptor that tells it)."""
    os.setgroups([])
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(go_w)
            if os.read(go_r, 1) == b"m":
                for name, text in (("uid_map", f"0 {SANDBOX_UID} 1"),
                                   ("gid_map", f"0 {SANDBOX_GID} 1")):
                    with open(f"/proc/{os.getppid()}/{name}", "w") as f:
                        f.write(text)
                os._exit(0)
        except BaseException:  # noqa: BLE001  the parent reports it
            pass
        os._exit(1)
    os.close(go_r)
    return pid, go_w


def _mount(source, target: str, fstype, flags: int, data=None) -> None:
    encode = lambda s: None if s is None else s.encode()  # noqa: E731
    _check(_libc().mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags),
                         encode(data)), f"mount {source or ''} on {target}")


def build_root(sources: dict[str, int], read_only: list, links: dict, devices: list,
               masked: list, scratch_bytes: int, scratch_inodes: int) -> None:
    """Make a tmpfs the root of this mount namespace: `read_only` [source, target] directories
    bound read-only (from `sources`, `enter_namespaces`'s), `masked` directories in them covered by
    an empty read-only tmpfs, `links` (path -> target) as symlinks, `devices` bound, and a
    scratch tmpfs at /tmp (the working directory afterwards). The old root is detached: nothing
    else of the host's filesystem is reachable from here on."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    root = "/tmp"
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=4096,mode=0755")
    for source, path in read_only:
        target = root + path
        os.makedirs(target, mode=0o755, exist_ok=True)
        # Recursive: in a user namespace the mounts below a source (a GPU host mounts its
        # driver under /usr) are locked to it, and a plain bind of their parent is EINVAL.
        _mount(f"/proc/self/fd/{sources[source]}", target, None, MS_BIND | MS_REC)
        for mount_point in _mounts_at_or_below(target):
            _remount_read_only(mount_point)
    for path in masked:
        _mount("tmpfs", root + path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
               "size=4k,nr_inodes=1,mode=0555")
    for path, target in links.items():
        os.makedirs(os.path.dirname(root + path), mode=0o755, exist_ok=True)
        os.symlink(target, root + path)
    for path in devices:
        os.makedirs(os.path.dirname(root + path), mode=0o755, exist_ok=True)
        os.close(os.open(root + path, os.O_CREAT | os.O_WRONLY, 0o666))
        _mount(f"/proc/self/fd/{sources[path]}", root + path, None, MS_BIND)
    for fd in sources.values():
        os.close(fd)
    os.makedirs(root + "/tmp", exist_ok=True)
    _mount("tmpfs", root + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV,
           f"size={scratch_bytes},nr_inodes={scratch_inodes},mode=1777")
    _mount(None, root, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir(root)
    pivot_root = _SYSCALLS.get(os.uname().machine, (0, None))[1]
    if pivot_root is None:
        raise ConfinementError(f"pivot_root: no syscall number for {os.uname().machine}")
    _check(_libc().syscall(pivot_root, b".", b"."), "pivot_root")
    _check(_libc().umount2(b".", MNT_DETACH), "umount2(old root)")
    os.chdir("/tmp")


def _mounts_at_or_below(path: str) -> list[str]:
    """Mount points of this namespace at `path` or below it, parents first."""
    with open("/proc/self/mountinfo") as f:
        # Field 5 is the mount point, with space, tab, newline and backslash octal-escaped.
        points = [line.split()[4].encode().decode("unicode_escape") for line in f]
    inside = [p for p in points if p == path or p.startswith(path.rstrip("/") + "/")]
    return sorted(set(inside), key=len)


def _remount_read_only(mount_point: str) -> None:
    """Remount a bind read-only and nosuid, keeping the flags it has (a user namespace may not
    clear nodev/noexec a locked mount carries)."""
    kept = os.statvfs(mount_point).f_flag
    flags = sum(ms for st, ms in _KEPT_MOUNT_FLAGS if kept & st)
    _mount(None, mount_point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | flags)


def drop_privileges(required: bool) -> None:
    """Give up every capability for good and forbid gaining any (setuid files, file caps).
    `required`: raise if a step fails (with namespaces we hold the capabilities to drop;
    without, an unprivileged process has little to drop and some steps may be refused)."""

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    data = (Data * 2)()  # version 3 takes two: capabilities 0-31 and 32-63, all zero
    steps = [lambda: _prctl(PR_SET_SECUREBITS, SECUREBITS_LOCKED_DOWN, "securebits"),
             lambda: _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, "clear ambient caps"),
             _drop_bounding_set,
             lambda: _check(_libc().capset(ctypes.byref(Header(0x20080522, 0)), data),
                            "capset")]
    for step in steps:
        try:
            step()
        except ConfinementError:
            if required:
                raise
    _prctl(PR_SET_NO_NEW_PRIVS, 1, "prctl(PR_SET_NO_NEW_PRIVS)")


def _drop_bounding_set() -> None:
    for cap in range(64):  # up to the first number this kernel does not know (EINVAL)
        if _libc().prctl(PR_CAPBSET_DROP, ctypes.c_ulong(cap), ctypes.c_ulong(0),
                         ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
            if ctypes.get_errno() == 22:
                return
            _check(-1, f"drop capability {cap} from the bounding set")


def install_seccomp(signal_targets: tuple[int, ...] = ()) -> bool:
    """The syscall filter of the module docstring; False (nothing installed) on an architecture
    without a table here. Signals go only to this process (its pid, its group: 0 or -pid) and
    `signal_targets`. Needs no_new_privs (set by `drop_privileges`)."""
    table = _SYSCALLS.get(os.uname().machine)
    if table is None:
        return False
    arch, _, clone, clone3, denied = table
    prctl, signalling = _ARGUMENT_CHECKED[os.uname().machine]

    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                    ("k", ctypes.c_uint32)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

    load, jeq, jge, jset, ret, jump = 0x20, 0x15, 0x35, 0x45, 0x06, 0x05
    deny, allow = _SECCOMP_ERRNO | _EPERM, _SECCOMP_ALLOW
    first_argument = 16  # the low word of args[0] (a pid or an option: an int to the kernel)
    code = [(load, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, _SECCOMP_KILL),  # another ABI: kill
            (load, 0, 0, 0),  # the syscall number
            (jge, 0, 1, 0x40000000), (ret, 0, 0, deny)]  # x32 calls on x86_64
    for number in denied:
        code += [(jeq, 0, 1, number), (ret, 0, 0, deny)]
    code += [(jeq, 0, 4, prctl), (load, 0, 0, first_argument),
             (jeq, 0, 1, PR_SET_PDEATHSIG), (ret, 0, 0, deny), (ret, 0, 0, allow)]
    own = os.getpid()
    targets = sorted({own, 0, *signal_targets} | ({-own & 0xFFFFFFFF} if own > 1 else set()))
    n, m = len(signalling), len(targets)
    code += [(jeq, n - i, 0, number) for i, number in enumerate(signalling)]
    code += [(jump, 0, 0, m + 3), (load, 0, 0, first_argument)]
    code += [(jeq, m - j, 0, target & 0xFFFFFFFF) for j, target in enumerate(targets)]
    code += [(ret, 0, 0, deny), (ret, 0, 0, allow)]
    # clone3 hides its flags in memory a filter cannot read: ENOSYS makes libc fall back to clone
    code += [(jeq, 0, 1, clone3), (ret, 0, 0, _SECCOMP_ERRNO | _ENOSYS),
             (jeq, 0, 3, clone), (load, 0, 0, 16),  # clone's flags (low word of args[0])
             (jset, 1, 0, CLONE_THREAD), (ret, 0, 0, deny),
             (ret, 0, 0, allow)]
    instructions = (Filter * len(code))(*[Filter(*c) for c in code])
    program = Program(len(code), instructions)
    _check(_libc().prctl(PR_SET_SECCOMP, ctypes.c_ulong(2), ctypes.byref(program),
                         ctypes.c_ulong(0), ctypes.c_ulong(0)), "prctl(PR_SET_SECCOMP)")
    return True


def set_limits(memory_bytes: int, file_bytes: int, cpu_s: int, tasks: int | None) -> None:
    """rlimits: address space (a memory bomb raises MemoryError), file size, open files, CPU
    seconds (a backstop to the parent's wall clock), no core files; and, with `tasks`, the
    processes and threads of this user namespace (see the module docstring)."""

    def limit(which, value):
        hard = resource.getrlimit(which)[1]
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (value, value))

    limit(resource.RLIMIT_AS, memory_bytes)
    limit(resource.RLIMIT_FSIZE, file_bytes)
    limit(resource.RLIMIT_CORE, 0)
    limit(resource.RLIMIT_NOFILE, 256)
    limit(resource.RLIMIT_CPU, cpu_s)
    if tasks is not None:
        limit(resource.RLIMIT_NPROC, tasks)


def tasks_counted_per_namespace() -> bool:
    """Whether RLIMIT_NPROC counts per user namespace here (Linux 5.14 and later)."""
    release = os.uname().release.split(".")
    try:
        return (int(release[0]), int(release[1].partition("-")[0])) >= (5, 14)
    except (IndexError, ValueError):
        return False


def install_guard_hook(scratch: str | None, hidden: tuple[str, ...] = ()) -> None:
    """An audit hook. Always: process creation raises a PermissionError that says so (the
    kernel refuses it anyway; a model reading a tool's output learns more from the name).
    With `scratch` (the weak mode, `rewards.allow_weak_sandbox`): the in-process guard rails
    that stand in for the namespaces; network calls, writes, renames and deletions outside
    `scratch`, reading another process's /proc entries or anything in `hidden` (the installed
    packages the namespaces would cover) are refused. Guard rails against
    accidents, not a boundary: code that reaches the hook's closure, or uses dir_fd, gets past."""
    realpath, fsdecode, isinstance_ = os.path.realpath, os.fsdecode, isinstance
    permission_error = PermissionError
    processes = frozenset({"os.fork", "os.forkpty", "os.posix_spawn", "os.exec", "os.system",
                           "subprocess.Popen"})
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    own_proc = (f"/proc/{os.getpid()}", "/proc/self", "/proc/thread-self")
    network = frozenset({"socket.connect", "socket.sendto", "socket.sendmsg", "socket.bind",
                         "socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr",
                         "socket.getnameinfo"})
    path_events = {"os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,), "os.rename": (0, 1),
                   "os.link": (0, 1), "os.symlink": (1,), "os.truncate": (0,), "os.chmod": (0,),
                   "os.chown": (0,), "os.utime": (0,), "os.setxattr": (0,),
                   "os.removexattr": (0,), "shutil.rmtree": (0,)}

    def inside(path, root):
        return path == root or path.startswith(root + "/")

    def in_scratch(path):
        return not isinstance_(path, int) and inside(realpath(fsdecode(path)), scratch)

    def process_hook(event, _args):
        if event in processes:
            raise permission_error(f"sandbox: {event} is not allowed (no new processes)")

    def hook(event, args):
        process_hook(event, args)
        if event in network or event.startswith("ctypes.") or event == "sys._current_frames":
            raise permission_error(f"sandbox: {event} is not allowed")
        if event == "open" and not isinstance_(args[0], int):
            path = realpath(fsdecode(args[0]))
            if inside(path, "/proc") and not any(inside(path, own) for own in own_proc):
                raise permission_error(f"sandbox: {path} is another process's")
            if any(inside(path, h) for h in hidden):
                raise permission_error(f"sandbox: {path} is an installed package's")
            if args[2] & write_flags and not in_scratch(args[0]):
                raise permission_error(f"sandbox: writes only in the working directory ({path})")
        if event in ("os.listdir", "os.scandir") and not isinstance_(args[0], int) and \
                any(inside(realpath(fsdecode(args[0] or ".")), h) for h in hidden):
            raise permission_error(f"sandbox: {args[0]} is an installed package's")
        for i in path_events.get(event, ()):
            if not in_scratch(args[i]):
                raise permission_error(f"sandbox: changes only in the working directory "
                                       f"({event} {args[i]})")

    sys.addaudithook(process_hook if scratch is None else hook)
