import LoftConfig
import LoftCore
import LoftIO

/// `loft exec [-c FILE] -- COMMAND…`: COMMAND inside the namespace the loft running FILE routes
/// (`ip netns exec`, which also puts /etc/netns/NAME/resolv.conf in place), as the invoking user
/// when run through sudo.
enum Exec {
    /// Whether a loft holds the namespace: its lock (/run/loft/netns-NAME.lock) is taken.
    static func running(netns: String) -> Bool { InstanceLock.isHeld(key: "netns-\(netns)") }

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
        if Syscall.userID == 0, let user = Syscall.environment("SUDO_USER"), user != "root",
           let pw = Syscall.user(named: user) {
            argv += ["setpriv", "--reuid=\(pw.uid)", "--regid=\(pw.gid)", "--init-groups", "--"]
            Syscall.setEnvironment("HOME", pw.home)
            Syscall.setEnvironment("USER", user)
            Syscall.setEnvironment("LOGNAME", user)
        }
        argv += command
        let e = Syscall.execute(argv)
        Terminal.fail("loft exec: cannot run ip (iproute2): \(e)", code: 1)
    }

    /// /etc/loft/app.yaml → app (the loft@ instance name).
    static func baseName(_ path: String) -> String {
        let last = path.split(separator: "/").last.map(String.init) ?? path
        return last.hasSuffix(".yaml") ? String(last.dropLast(5)) : last
    }
}
