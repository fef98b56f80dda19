import Glibc
import LoftConfig
import LoftCore

/// `loft exec [-c FILE] -- COMMAND…`: COMMAND inside the namespace the loft running FILE routes
/// (`ip netns exec`, which also puts /etc/netns/NAME/resolv.conf in place), as the invoking user
/// when run through sudo.
enum Exec {
    /// Whether a loft holds the namespace: its lock (/run/loft/netns-NAME.lock) is taken.
    static func running(netns: String) -> Bool {
        let fd = open("/run/loft/netns-\(netns).lock", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        if flock(fd, LOCK_SH | LOCK_NB) == 0 {
            flock(fd, LOCK_UN)
            return false
        }
        return errno == EWOULDBLOCK
    }

    static func run(config: Configuration, path: String?, command: [String]) -> Never {
        let file = path ?? "the built-in default"
        guard !command.isEmpty else { Terminal.fail("loft exec: no command: loft exec [-c FILE] -- COMMAND [ARG…]", code: 2) }
        guard let ns = config.tun?.netns else {
            Terminal.fail("loft exec: \(file) has no tun.netns: loft exec runs a command in the namespace a loft routes", code: 2)
        }
        guard running(netns: ns) else {
            Terminal.fail("loft exec: no loft runs for \(file) (nothing holds tun.netns \"\(ns)\"): start it with `loft run -c \(path ?? "FILE")`\(path.map { " or `systemctl start loft@\(baseName($0))`" } ?? "")", code: 1)
        }
        var argv = ["ip", "netns", "exec", ns]
        // Through sudo: back to the user who asked, with their groups and home.
        if getuid() == 0, let user = getenv("SUDO_USER").map({ String(cString: $0) }), user != "root",
           let pw = getpwnam(user) {
            argv += ["setpriv", "--reuid=\(pw.pointee.pw_uid)", "--regid=\(pw.pointee.pw_gid)", "--init-groups", "--"]
            setenv("HOME", pw.pointee.pw_dir, 1)
            setenv("USER", user, 1)
            setenv("LOGNAME", user, 1)
        }
        argv += command
        var cargs: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) }
        cargs.append(nil)
        execvp("ip", cargs)
        Terminal.fail("loft exec: cannot run ip (iproute2): \(String(cString: strerror(errno)))", code: 1)
    }

    /// /etc/loft/app.yaml → app (the loft@ instance name).
    static func baseName(_ path: String) -> String {
        let last = path.split(separator: "/").last.map(String.init) ?? path
        return last.hasSuffix(".yaml") ? String(last.dropLast(5)) : last
    }
}
