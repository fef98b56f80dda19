import LoftCore
import LoftIO

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
/// Every change is made over rtnetlink (no `ip` process), and the `ip` commands that undo them are
/// written to a state file first, so a killed run's leftovers are removed at the next start (and
/// on every clean exit).
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

    /// One change to undo, written to the state file as the `ip` command that undoes it (the
    /// file reads the same as when loft ran `ip`; loft applies it over rtnetlink itself).
    enum Undo: Equatable {
        /// `ip -4|-6 rule del priority P [to PREFIX]`
        case rule(ipv6: Bool, priority: UInt32, to: IPPrefix?)
        /// `ip -4|-6 route flush table T`
        case flush(ipv6: Bool, table: UInt32)

        var line: String {
            switch self {
            case .rule(let v6, let priority, let to):
                return "ip \(v6 ? "-6" : "-4") rule del priority \(priority)" + (to.map { " to \($0.network)" } ?? "")
            case .flush(let v6, let table):
                return "ip \(v6 ? "-6" : "-4") route flush table \(table)"
            }
        }

        /// A state file's line; nil for anything that is not one of the two forms above.
        init?(line: String) {
            let w = line.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
            guard w.count >= 5, w[0] == "ip", w[1] == "-4" || w[1] == "-6" else { return nil }
            let v6 = w[1] == "-6"
            if w.count == 6, w[2] == "route", w[3] == "flush", w[4] == "table", let t = UInt32(w[5]) {
                self = .flush(ipv6: v6, table: t)
            } else if w[2] == "rule", w[3] == "del", w[4] == "priority", w.count == 6 || w.count == 8,
                      let p = UInt32(w[5]) {
                var to: IPPrefix?
                if w.count == 8 {
                    guard w[6] == "to", let prefix = IPPrefix(w[7]), prefix.address.isIPv4 != v6 else { return nil }
                    // As the kernel keeps it (and as loft writes it): the host bits cleared.
                    to = prefix.masked
                }
                self = .rule(ipv6: v6, priority: p, to: to)
            } else {
                return nil
            }
        }

        func apply(_ nl: RouteNetlink) throws {
            switch self {
            case .rule(let v6, let priority, let to): try nl.deleteRule(priority: priority, ipv6: v6, to: to)
            case .flush(let v6, let table): try nl.flushTable(table, ipv6: v6)
            }
        }
    }

    /// Removes what an earlier run left (its undo file), then installs the plan.
    public func install() throws {
        HostRoutes.undo(statePath)
        Syscall.makeDirectory("/run/loft", mode: 0o755)
        let nl = try RouteNetlink(netns: nil)
        defer { nl.close() }
        let tun = plan.tun
        let tunIndex = try nl.index(of: tun)
        // Every change with what undoes it. The undo file is written whole before the first
        // change is made: a run killed half-way leaves a file that undoes at least what it did
        // (undoing a change not made yet finds nothing, which is no error).
        var changes: [(make: () throws -> Void, undo: Undo)] = []
        let main = UInt32(254)  // RT_TABLE_MAIN
        let prio = UInt32(priority), table = UInt32(self.table)
        for v6 in [false, true] {
            changes.append(({ try nl.addRule(priority: prio, ipv6: v6, fwmark: HostRoutes.mark, table: main) },
                            .rule(ipv6: v6, priority: prio, to: nil)))
            for p in plan.offTun where p.address.isIPv4 == !v6 {
                changes.append(({ try nl.addRule(priority: prio + 1, ipv6: v6, to: p, table: main) },
                                .rule(ipv6: v6, priority: prio + 1, to: p.masked)))
            }
            changes.append(({ try nl.addRule(priority: prio + 2, ipv6: v6, table: table) },
                            .rule(ipv6: v6, priority: prio + 2, to: nil)))
            var into = plan.intoTun.filter { $0.address.isIPv4 == !v6 }
            if plan.routeAll { into.append(IPPrefix(v6 ? .v6(0, 0) : .v4(0), 0)!) }
            for p in into {
                changes.append(({ try nl.replaceRoute(p, table: table, index: tunIndex, name: tun) },
                                .flush(ipv6: v6, table: table)))
            }
        }
        var seen = Set<String>()
        let lines = changes.map(\.undo.line).filter { seen.insert($0).inserted }
        if let failure = StateFile.write(lines.joined(separator: "\n") + "\n", to: statePath) {
            throw TunInput.StartError(description: "cannot write \(statePath): \(failure)")
        }
        for change in changes {
            do {
                try change.make()
            } catch {
                Log.error("command.failed", ["command": "\(error)"])
                throw error
            }
            installed += 1
        }
        Log.info("tun.host-routes", ["table": self.table, "priority": priority, "into-tun": plan.intoTun.count,
                                     "off-tun": plan.offTun.count, "route-all": plan.routeAll, "mark": HostRoutes.mark])
    }

    public func remove() {
        HostRoutes.undo(statePath)
        installed = 0
    }

    /// Undoes an undo file's changes in reverse order (each at most once; one already gone is
    /// no error) and deletes it. A line that is not one loft writes is logged and skipped.
    static func undo(_ path: String) {
        guard case .success(let bytes) = Syscall.readFile(path, upTo: Int.max) else { return }
        let lines = undoLines(bytes)
        let nl = try? RouteNetlink(netns: nil)
        defer { nl?.close() }
        var done = Set<String>()
        for line in lines.reversed() where done.insert(line).inserted {
            guard let change = Undo(line: line) else {
                Log.warn("tun.host-routes.undo-skipped", ["file": path, "line": line])
                continue
            }
            if let nl { try? change.apply(nl) }
        }
        Syscall.unlink(path)
    }

    /// An undo file's lines, each to its first NUL, the empty ones left out.
    static func undoLines(_ bytes: [UInt8]) -> [String] {
        bytes.split(separator: 10).map { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }.filter { !$0.isEmpty }
    }
}
