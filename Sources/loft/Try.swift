import LoftCore
import LoftIO
import LoftInputs

/// `loft try`: a first run with nothing to prepare. It makes a throwaway destination (the
/// namespace loft-try-dst behind a veth, 198.18.254.2, with a small web server and a DNS server
/// for *.loft.test, both python3 scripts of loft's own), routes the namespace loft-try through
/// a loft (this binary, `run` on a generated file), prints three commands to paste, and on
/// Ctrl-C (or SIGTERM) removes all of it. Exit 0 after a clean teardown, 1 if it could not start.
enum Try {
    static let appNetns = "loft-try"
    static let dstNetns = "loft-try-dst"
    static let hostVeth = "loft-try0"
    static let dstVeth = "loft-try1"
    static let host4 = "198.18.254.1"
    static let dst4 = "198.18.254.2"
    static let control = "/run/loft/try.sock"

    static let dnsScript = """
    # loft try's DNS server: every A question for loft.test or a name under it is answered with
    # the address this listens on; other names get NXDOMAIN.
    import socket, sys
    addr = sys.argv[1]
    ip = bytes(int(x) for x in addr.split("."))
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((addr, 53))
    while True:
        q, peer = s.recvfrom(512)
        if len(q) < 17:
            continue
        i, labels = 12, []
        while i < len(q) and q[i] != 0 and len(labels) < 64:
            labels.append(q[i + 1:i + 1 + q[i]].decode("ascii", "replace"))
            i += q[i] + 1
        i += 1
        if i + 4 > len(q):
            continue
        name = ".".join(labels).lower()
        ours = name == "loft.test" or name.endswith(".loft.test")
        answer = ours and q[i:i + 4] == b"\\x00\\x01\\x00\\x01"
        flags = bytes([0x84 | (q[2] & 1), 0x00 if ours else 0x03])
        head = q[:2] + flags + b"\\x00\\x01" + (b"\\x00\\x01" if answer else b"\\x00\\x00") + b"\\x00\\x00\\x00\\x00"
        body = q[12:i + 4] + (b"\\xc0\\x0c\\x00\\x01\\x00\\x01\\x00\\x00\\x00\\x3c\\x00\\x04" + ip if answer else b"")
        s.sendto(head + body, peer)
    """

    static func run(loftBinary: String) -> Never {
        let needs: [(Capability, String)] = [(.netAdmin, "the TUN, the veth and their addresses and routes"),
                                             (.sysAdmin, "the namespaces loft-try and loft-try-dst")]
        if let problem = Privileges.missing(needs, program: "loft try") { Terminal.fail(problem, code: 1) }
        for ns in [appNetns, dstNetns] where Syscall.exists("/var/run/netns/\(ns)") {
            Terminal.fail("loft try: the namespace \(ns) exists already (another loft try, or one killed): `ip netns del \(ns)` if no loft try runs", code: 1)
        }
        for tool in ["python3", "ip"] where !onPath(tool) {
            Terminal.fail("loft try: \(tool) is not installed (scripts/deps.sh --run installs it)", code: 1)
        }
        let dir: String
        switch Syscall.makeTemporaryDirectory("/tmp/loft-try.XXXXXX") {
        case .success(let d): dir = d
        case .failure(let e): Terminal.fail("loft try: mkdtemp: \(e)", code: 1)
        }
        Syscall.setMode(path: dir, 0o755)
        var pids: [Int32] = []
        var loftPid: Int32 = 0
        var madeDst = false

        func teardown() {
            if loftPid > 0 { Syscall.stopChild(loftPid) }
            for p in pids { Syscall.stopChild(p) }
            if madeDst { _ = try? Command.run(["ip", "netns", "del", dstNetns], allowFailure: true) }
            _ = try? Command.run(["rm", "-rf", dir], allowFailure: true)
        }
        func abandon(_ why: String) -> Never {
            teardown()
            Terminal.fail("loft try: \(why); everything it made is removed", code: 1)
        }

        // Signals wait for sigtimedwait below, from the start: Ctrl-C during set-up tears down too.
        var signals = BlockedTerminationSignals()

        write(dir + "/www/index.html", "<!doctype html><title>loft try</title><p>Hello through loft: this page is served in the namespace \(dstNetns) at \(dst4).</p>\n", makeDir: true)
        write(dir + "/dns.py", dnsScript)
        let config = dir + "/try.yaml"
        write(config, """
        # loft try: the namespace \(appNetns) routed through loft, everything direct.
        log: info
        tun:
          name: loft-try
          netns: \(appNetns)
          ipv4: 198.18.0.1/30
          ipv6: off
          route-all: true
          dns: [\(dst4)]
        socks5: off
        bridge: off
        default: direct
        control: \(control)

        """)
        do {
            madeDst = true
            try Command.run(["ip", "netns", "add", dstNetns])
            try Command.run(["ip", "link", "add", hostVeth, "type", "veth", "peer", "name", dstVeth, "netns", dstNetns])
            try Command.run(["ip", "addr", "add", "\(host4)/24", "dev", hostVeth])
            try Command.run(["ip", "link", "set", hostVeth, "up"])
            try Command.run(["ip", "-n", dstNetns, "link", "set", "lo", "up"])
            try Command.run(["ip", "-n", dstNetns, "addr", "add", "\(dst4)/24", "dev", dstVeth])
            try Command.run(["ip", "-n", dstNetns, "link", "set", dstVeth, "up"])
        } catch {
            abandon("cannot make the destination namespace: \(error)")
        }
        let inDst = ["ip", "netns", "exec", dstNetns]
        guard let web = Syscall.spawn(inDst + ["python3", "-m", "http.server", "80", "--bind", dst4, "--directory", dir + "/www"], log: dir + "/web.log"),
              let dns = Syscall.spawn(inDst + ["python3", dir + "/dns.py", dst4], log: dir + "/dns.log") else {
            abandon("cannot start the web and DNS servers")
        }
        pids = [web, dns]
        guard let l = Syscall.spawn([loftBinary, "run", "-c", config], log: dir + "/loft.log") else { abandon("cannot start loft") }
        loftPid = l
        // Ready: the TUN in the namespace and the servers listening (10 s at most).
        var ready = false
        for _ in 0..<100 {
            if !Syscall.isRunning(loftPid) { abandon("loft exited: \(tail(dir + "/loft.log"))") }
            if (try? Command.run(["ip", "-n", appNetns, "link", "show", "loft-try"], allowFailure: true)) == 0,
               (try? Command.run(inDst + ["sh", "-c", "ss -Htln 'sport = :80' | grep -q . && ss -Huln 'sport = :53' | grep -q ."], allowFailure: true)) == 0 {
                ready = true
                break
            }
            Syscall.sleep(milliseconds: 100)
        }
        guard ready else { abandon("not ready after 10 s: \(tail(dir + "/loft.log"))") }
        let me = CommandLine.arguments[0].contains("/") ? CommandLine.arguments[0] : "loft"
        Terminal.say("""
        loft try: the namespace \(appNetns) is routed through loft (pid \(loftPid), log \(dir)/loft.log).
        A web server and a DNS server for *.loft.test answer at \(dst4), in the namespace \(dstNetns).
        Paste these in another shell:

            sudo \(me) exec -c \(config) -- curl http://try.loft.test/
            sudo \(me) exec -c \(config) -- dig +short try.loft.test
            sudo \(me) status --control \(control)

        Ctrl-C removes all of it (both namespaces, the veth, the servers, \(dir)).
        """)
        var exitCode: Int32 = 0
        while true {
            if signals.wait(milliseconds: 1000) { break }
            if !Syscall.isRunning(loftPid) {
                Terminal.say("loft try: loft exited: \(tail(dir + "/loft.log"))")
                loftPid = 0
                exitCode = 1
                break
            }
        }
        teardown()
        Terminal.say("loft try: removed")
        Syscall.exit(exitCode)
    }

    static func onPath(_ tool: String) -> Bool {
        let path = Syscall.environment("PATH") ?? "/usr/sbin:/usr/bin:/sbin:/bin"
        return path.split(separator: ":").contains { Syscall.isExecutable("\($0)/\(tool)") }
    }

    static func write(_ path: String, _ text: String, makeDir: Bool = false) {
        if makeDir {
            let folder = String(path[..<path.lastIndex(of: "/")!])
            Syscall.makeDirectory(folder, mode: 0o755)
        }
        _ = Syscall.writeFile(path, Array(text.utf8), mode: 0o644)
    }

    /// The log's last line (where `loft run` says why it stopped).
    static func tail(_ path: String) -> String {
        guard case .success(let bytes) = Syscall.readFile(path, upTo: Int.max) else { return "" }
        var text = Substring(String(decoding: bytes, as: UTF8.self))
        if text.last == "\n" { text.removeLast() }
        let last = text.split(separator: "\n", omittingEmptySubsequences: false).last.map(String.init) ?? ""
        return last.trimmingCharacters(in: "\n")
    }
}

private extension String {
    func trimmingCharacters(in c: Character) -> String {
        var s = Substring(self)
        while s.last == c { s.removeLast() }
        return String(s)
    }
}
