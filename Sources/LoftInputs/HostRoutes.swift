import Glibc
import LoftCore

/// Host mode (the TUN in loft's own namespace): policy routing that sends the right traffic
/// into the TUN and keeps loft's own traffic out of it.
///
/// loft marks every socket it dials with `mark` (SO_MARK). Then, with a table of its own:
///   prio P     fwmark MARK        lookup main   loft's own sockets (fronts, direct dials) never hairpin
///   prio P+1   to DIRECT-PREFIX   lookup main   one per `direct` rule prefix: off the TUN
///   prio P+2                      lookup TABLE  TABLE: `via`/`drop` prefixes (and default with route-all) dev TUN
/// A mark instead of a /32 per front address: it needs no resolution of front names, follows
/// them when they change, and covers every outbound socket (direct dials too) at once.
///
/// Every command that changes the host is written to a state file first, so a killed run's
/// leftovers are removed at the next start (and on every clean exit).
public final class HostRoutes {
    public struct Plan: Sendable {
        public var tun: String
        public var routeAll: Bool
        public var intoTun: [IPPrefix]
        public var offTun: [IPPrefix]
        public init(tun: String, routeAll: Bool, intoTun: [IPPrefix], offTun: [IPPrefix]) {
            self.tun = tun; self.routeAll = routeAll; self.intoTun = intoTun; self.offTun = offTun
        }
    }

    public static let mark: UInt32 = 0x4C46  // "LF"
    let plan: Plan
    let table: Int
    let priority: Int
    let statePath: String
    public private(set) var installed = 0

    public init(plan: Plan) {
        self.plan = plan
        // A table and priority range per TUN name, so two lofts with different TUNs coexist.
        var h: UInt32 = 2166136261
        for b in plan.tun.utf8 { h = (h ^ UInt32(b)) &* 16777619 }
        let slot = Int(h % 500)
        table = 27000 + slot
        priority = 20000 + slot * 4
        statePath = "/run/loft/routes-\(plan.tun).undo"
    }

    /// Removes what an earlier run left (its undo file), then installs the plan.
    public func install() throws {
        HostRoutes.undo(statePath)
        mkdir("/run/loft", 0o755)
        var undo: [[String]] = []
        func apply(_ cmd: [String], undoing: [String]) throws {
            undo.append(undoing)
            try write(undo)
            try Command.run(cmd)
            installed += 1
        }
        let fams: [(String, Bool)] = [("-4", true), ("-6", false)]
        for (f, v4) in fams {
            try apply(["ip", f, "rule", "add", "priority", "\(priority)", "fwmark", "\(HostRoutes.mark)", "lookup", "main"],
                      undoing: ["ip", f, "rule", "del", "priority", "\(priority)"])
            for p in plan.offTun where p.address.isIPv4 == v4 {
                try apply(["ip", f, "rule", "add", "priority", "\(priority + 1)", "to", p.network, "lookup", "main"],
                          undoing: ["ip", f, "rule", "del", "priority", "\(priority + 1)", "to", p.network])
            }
            try apply(["ip", f, "rule", "add", "priority", "\(priority + 2)", "lookup", "\(table)"],
                      undoing: ["ip", f, "rule", "del", "priority", "\(priority + 2)"])
            var into = plan.intoTun.filter { $0.address.isIPv4 == v4 }
            if plan.routeAll { into.append(IPPrefix(v4 ? .v4(0) : .v6(0, 0), 0)!) }
            for p in into {
                try apply(["ip", f, "route", "replace", p.network, "dev", plan.tun, "table", "\(table)"],
                          undoing: ["ip", f, "route", "flush", "table", "\(table)"])
            }
        }
        Log.info("tun.host-routes", ["table": table, "priority": priority, "into-tun": plan.intoTun.count,
                                     "off-tun": plan.offTun.count, "route-all": plan.routeAll, "mark": HostRoutes.mark])
    }

    public func remove() {
        HostRoutes.undo(statePath)
        installed = 0
    }

    private func write(_ undo: [[String]]) throws {
        let text = undo.map { $0.joined(separator: " ") }.joined(separator: "\n") + "\n"
        let f = open(statePath + ".tmp", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard f >= 0 else { throw TunInput.StartError(description: "cannot write \(statePath): \(String(cString: strerror(errno)))") }
        var bytes = Array(text.utf8)
        _ = Glibc.write(f, &bytes, bytes.count)
        close(f)
        rename(statePath + ".tmp", statePath)
    }

    /// Runs an undo file's commands in reverse order (each at most once) and deletes it.
    static func undo(_ path: String) {
        guard let f = fopen(path, "r") else { return }
        var lines: [String] = []
        var buf = [CChar](repeating: 0, count: 1024)
        while fgets(&buf, Int32(buf.count), f) != nil {
            let line = String(decoding: buf.prefix { $0 != 0 && $0 != 10 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            if !line.isEmpty { lines.append(line) }
        }
        fclose(f)
        var done = Set<String>()
        for line in lines.reversed() where done.insert(line).inserted {
            _ = try? Command.run(line.split(separator: " ").map(String.init), allowFailure: true)
        }
        unlink(path)
    }
}

extension IPPrefix {
    /// The prefix with host bits cleared, as `ip` wants it.
    var network: String {
        switch address {
        case .v4(let a):
            let mask: UInt32 = length == 0 ? 0 : ~UInt32(0) << UInt32(32 - length)
            return "\(IPAddress.v4(a & mask))/\(length)"
        case .v6(let hi, let lo):
            let mh: UInt64 = length == 0 ? 0 : length >= 64 ? ~0 : ~UInt64(0) << UInt64(64 - length)
            let ml: UInt64 = length <= 64 ? 0 : length == 128 ? ~0 : ~UInt64(0) << UInt64(128 - length)
            return "\(IPAddress.v6(hi & mh, lo & ml))/\(length)"
        }
    }
}
