/// The Linux capabilities loft and loft-front use, what each is for (measured: docs/service.md,
/// "Least privilege"), and the check both run before they create anything, so that a missing
/// one is named and nothing is left half-started.
public enum Capability: Int, CaseIterable, Sendable {
    case netBindService = 10
    case netAdmin = 12
    case sysAdmin = 21

    public var name: String {
        switch self {
        case .netBindService: "CAP_NET_BIND_SERVICE"
        case .netAdmin: "CAP_NET_ADMIN"
        case .sysAdmin: "CAP_SYS_ADMIN"
        }
    }
}

public enum Privileges {
    /// The effective capability set (CapEff in /proc/self/status); nil if unreadable.
    public static func effective(statusText: String? = nil) -> UInt64? {
        guard let text = statusText ?? readFile("/proc/self/status") else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix("CapEff:") {
            return UInt64(line.dropFirst(7).trimmingCharacters(), radix: 16)
        }
        return nil
    }

    public static func has(_ c: Capability, in set: UInt64? = effective()) -> Bool {
        guard let set else { return Syscall.effectiveUserID == 0 }
        return set & (1 << UInt64(c.rawValue)) != 0
    }

    /// The lowest port an unprivileged process may bind (net.ipv4.ip_unprivileged_port_start).
    public static var unprivilegedPortStart: Int {
        readFile("/proc/sys/net/ipv4/ip_unprivileged_port_start").flatMap { Int($0.trimmingCharacters()) } ?? 1024
    }

    /// Of `needs` (capability, what for), the first the effective set lacks, as one sentence
    /// for `program`'s exit message; nil when all are there.
    public static func missing(_ needs: [(Capability, String)], program: String, effective set: UInt64? = effective()) -> String? {
        let lacking = needs.filter { !has($0.0, in: set) }
        guard !lacking.isEmpty else { return nil }
        let list = lacking.map { "\($0.0.name) (\($0.1))" }.joined(separator: ", ")
        return "\(program): missing capability \(list): run as root, or grant it (the systemd units do: docs/service.md); nothing was started"
    }

    /// Whether this process may create files in `directory` (made if missing, as loft does),
    /// else the reason, as a sentence.
    public static func writable(_ directory: String) -> String? {
        if !Syscall.exists(directory) {
            let parent = directory.split(separator: "/").dropLast().joined(separator: "/")
            let p = parent.isEmpty ? "/" : "/" + parent
            if case .failure(let e) = Syscall.checkWritable(p) { return "cannot create \(directory): \(e)" }
            return nil
        }
        if case .failure(let e) = Syscall.checkWritable(directory) { return "cannot write in \(directory): \(e)" }
        return nil
    }

    static func readFile(_ path: String) -> String? {
        guard case .success(let fd) = Syscall.openForReading(path) else { return nil }
        defer { _ = Syscall.close(fd) }
        var out = [UInt8]()
        var buf = [UInt8](repeating: 0, count: 4096)
        // To the end, or to the first error: what was read until then.
        while case .success(let n) = buf.withUnsafeMutableBytes({ Syscall.read(fd, $0.baseAddress!, $0.count) }), n > 0 {
            out += buf[0..<n]
        }
        return String(decoding: out, as: UTF8.self)
    }
}

extension Substring {
    func trimmingCharacters() -> String {
        String(drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" || $0 == "\n" }.reversed())
    }
}

extension String {
    func trimmingCharacters() -> String { Substring(self).trimmingCharacters() }
}
