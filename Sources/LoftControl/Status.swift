import LoftCore

/// A point-in-time view of everything loft is doing, built on the loop thread when asked for,
/// and rendered as text (loft status), JSON (--json) or Prometheus metrics.
public struct StatusReport: Sendable {
    public struct Input: Sendable {
        public var name: String          // "tun", "bridge", "socks5"
        public var state: String         // "up", "off", "down"
        public var detail: String        // e.g. "loft0 in netns app, mtu 1500"
        public var packetsIn: UInt64 = 0
        public var packetsOut: UInt64 = 0
        public var bytesIn: UInt64 = 0
        public var bytesOut: UInt64 = 0
        public var drops: [(String, UInt64)] = []   // reason → count
        public var extra: [(String, UInt64)] = []   // input-specific counters and gauges
        public init(name: String, state: String, detail: String) {
            self.name = name; self.state = state; self.detail = detail
        }
    }

    public struct Flow: Sendable {
        /// The flow's id (for `loft capture --flow`).
        public var id: UInt64 = 0
        public var network: String
        public var source: String
        public var destination: String
        public var outbound: String
        public var bytesUp: UInt64
        public var bytesDown: UInt64
        public var ageMs: UInt64
        /// The name the flow was routed by, and where it came from (socks, dns, sni, host,
        /// quic, fake-ip; `-`: none).
        public var name: String?
        public var nameSource = "-"
        public init(network: String, source: String, destination: String, outbound: String,
                    bytesUp: UInt64, bytesDown: UInt64, ageMs: UInt64) {
            self.network = network; self.source = source; self.destination = destination
            self.outbound = outbound; self.bytesUp = bytesUp; self.bytesDown = bytesDown; self.ageMs = ageMs
        }
    }

    public struct Rule: Sendable {
        public var index: Int
        public var summary: String
        public var matches: UInt64
        public var flows: UInt64 = 0
        public var bytesUp: UInt64 = 0
        public var bytesDown: UInt64 = 0
        public init(index: Int, summary: String, matches: UInt64) { self.index = index; self.summary = summary; self.matches = matches }
    }

    /// A live capture (`loft capture`, docs/capture.md): what it asked for, and the packets it
    /// has written toward its reader and lost (its reader too slow) so far.
    public struct Capture: Sendable {
        /// Its number since loft started (the hub's count of captures run).
        public var id: UInt64
        public var input: String         // "tun", "bridge", "all"
        public var outbound: String?
        public var flow: UInt64?
        public var drops: Bool
        public var filter: String?
        public var packets: UInt64 = 0
        public var lost: UInt64 = 0
        public var ageMs: UInt64 = 0
        public init(id: UInt64, input: String, outbound: String? = nil, flow: UInt64? = nil, drops: Bool = false, filter: String? = nil) {
            self.id = id; self.input = input; self.outbound = outbound; self.flow = flow; self.drops = drops; self.filter = filter
        }

        /// What it captures, in `loft capture`'s words: `input tun, drops, filter "tcp port 80"`.
        public var summary: String {
            var s = "input \(input)"
            if let outbound { s += ", outbound \(outbound)" }
            if let flow { s += ", flow \(flow)" }
            if drops { s += ", drops" }
            if let filter { s += ", filter \"\(filter)\"" }
            return s
        }
    }

    public var version = ""
    public var pid: Int32 = 0
    public var uptimeMs: UInt64 = 0
    public var residentBytes: UInt64 = 0
    public var peakResidentBytes: UInt64 = 0
    public var inputs: [Input] = []
    /// One row per outbound, as each reports itself.
    public var outbounds: [OutboundStatus] = []
    public var tcpFlowsByState: [(String, Int)] = []
    public var udpAssociations = 0
    public var maxFlows = 0
    /// Counters that only grow (flows opened, evictions, failures, …).
    public var totals: [(String, UInt64)] = []
    /// Drops over all inputs, by reason.
    public var drops: [(String, UInt64)] = []
    public var rules: [Rule] = []
    public var defaultMatches: UInt64 = 0
    /// The captures running now (none: neither the text nor the JSON mentions captures).
    public var captures: [Capture] = []

    public init() {}

    public var tcpFlows: Int { tcpFlowsByState.reduce(0) { $0 + $1.1 } }

    /// Drops grouped as users think of them.
    public var dropGroups: [(String, UInt64)] {
        var groups: [(String, UInt64)] = [("malformed", 0), ("rule", 0), ("cap", 0), ("hold", 0), ("other", 0)]
        let malformed: Set = ["truncated", "bad-version", "bad-length", "bad-checksum", "too-large",
                              "tcp-bad-ack", "tcp-out-of-window"]
        let cap: Set = ["flow-cap", "tcp-reorder-cap"]
        for (reason, n) in drops {
            let g = malformed.contains(reason) ? 0 : reason == "rule" ? 1 : cap.contains(reason) ? 2 : reason == "hold" ? 3 : 4
            groups[g].1 += n
        }
        return groups
    }

    public func total(_ name: String) -> UInt64 { totals.first { $0.0 == name }?.1 ?? 0 }
}

// MARK: - JSON

extension StatusReport {
    public var json: JSON {
        func pairs(_ p: [(String, UInt64)]) -> JSON { .object(p.map { ($0.0, .uint($0.1)) }) }
        var members: [(String, JSON)] = [
            ("version", .string(version)),
            ("pid", .int(Int64(pid))),
            ("uptime_ms", .uint(uptimeMs)),
            ("memory", .object([("resident_bytes", .uint(residentBytes)), ("peak_resident_bytes", .uint(peakResidentBytes))])),
            ("inputs", .array(inputs.map { i in
                .object([("name", .string(i.name)), ("state", .string(i.state)), ("detail", .string(i.detail)),
                         ("packets_in", .uint(i.packetsIn)), ("packets_out", .uint(i.packetsOut)),
                         ("bytes_in", .uint(i.bytesIn)), ("bytes_out", .uint(i.bytesOut)),
                         ("drops", pairs(i.drops)), ("counters", pairs(i.extra))])
            })),
            ("outbounds", .array(outbounds.map { o in
                .object([("name", .string(o.name)), ("type", .string(o.type)), ("state", .string(o.state)),
                         ("detail", .string(o.detail)), ("flows_total", .uint(o.flows)), ("live_flows", .int(Int64(o.liveFlows))),
                         ("bytes_up", .uint(o.bytesUp)), ("bytes_down", .uint(o.bytesDown)), ("counters", pairs(o.extra))])
            })),
            ("tcp_flows", .object(tcpFlowsByState.map { ($0.0, .int(Int64($0.1))) } + [("total", .int(Int64(tcpFlows)))])),
            ("udp_associations", .int(Int64(udpAssociations))),
            ("max_flows", .int(Int64(maxFlows))),
            ("totals", pairs(totals)),
            ("drops", pairs(drops)),
            ("drop_groups", pairs(dropGroups)),
            ("rules", .array(rules.map { .object([("index", .int(Int64($0.index))), ("rule", .string($0.summary)), ("matches", .uint($0.matches)),
                                                  ("flows", .uint($0.flows)), ("bytes_up", .uint($0.bytesUp)), ("bytes_down", .uint($0.bytesDown))]) })),
            ("default_matches", .uint(defaultMatches)),
        ]
        if !captures.isEmpty {
            members.append(("captures", .object([
                ("running", .int(Int64(captures.count))),
                ("list", .array(captures.map { c in
                    .object([("id", .uint(c.id)), ("input", .string(c.input)),
                             ("outbound", c.outbound.map { .string($0) } ?? .null), ("flow", c.flow.map { .uint($0) } ?? .null),
                             ("drops", .bool(c.drops)), ("filter", c.filter.map { .string($0) } ?? .null),
                             ("summary", .string(c.summary)), ("packets", .uint(c.packets)), ("lost", .uint(c.lost)),
                             ("age_ms", .uint(c.ageMs))])
                })),
            ])))
        }
        return .object(members)
    }
}

extension StatusReport.Flow {
    /// `name` and `name_source` only for a flow with a name.
    public var json: JSON {
        var members: [(String, JSON)] = [
            ("id", .uint(id)), ("network", .string(network)), ("source", .string(source)), ("destination", .string(destination)),
            ("outbound", .string(outbound)), ("bytes_up", .uint(bytesUp)), ("bytes_down", .uint(bytesDown)), ("age_ms", .uint(ageMs))]
        if let name { members += [("name", .string(name)), ("name_source", .string(nameSource))] }
        return .object(members)
    }
}

// MARK: - Text

public enum Format {
    public static func bytes(_ n: UInt64) -> String {
        if n < 1024 { return "\(n) B" }
        let units = ["KiB", "MiB", "GiB", "TiB"]
        var v = Double(n) / 1024
        var u = 0
        while v >= 1024 && u < units.count - 1 { v /= 1024; u += 1 }
        return fixed(v, v < 10 ? 2 : 1) + " " + units[u]
    }

    public static func fixed(_ v: Double, _ decimals: Int) -> String {
        var scale = 1.0
        for _ in 0..<decimals { scale *= 10 }
        let r = (v * scale).rounded() / scale
        var s = String(r)
        if let dot = s.firstIndex(of: ".") {
            let have = s.distance(from: dot, to: s.endIndex) - 1
            if have < decimals { s += String(repeating: "0", count: decimals - have) }
            if decimals == 0 { s = String(s[..<dot]) }
        } else if decimals > 0 {
            s += "." + String(repeating: "0", count: decimals)
        }
        return s
    }

    public static func duration(_ ms: UInt64) -> String {
        let s = ms / 1000
        let h = s / 3600, m = s / 60 % 60, sec = s % 60
        func two(_ x: UInt64) -> String { x < 10 ? "0\(x)" : "\(x)" }
        return s >= 86400 ? "\(s / 86400)d \(two(h % 24)):\(two(m)):\(two(sec))" : "\(two(h)):\(two(m)):\(two(sec))"
    }

    public static func pad(_ s: String, _ w: Int) -> String {
        s.count >= w ? String(s.prefix(w)) : s + String(repeating: " ", count: w - s.count)
    }

    public static func padLeft(_ s: String, _ w: Int) -> String {
        s.count >= w ? s : String(repeating: " ", count: w - s.count) + s
    }
}

extension StatusReport {
    /// The one-screen summary, at most `width` columns per line. Placeholders ("-") stand
    /// where no data exists yet, never nothing.
    public func text(width: Int = 80) -> String {
        var lines: [String] = []
        func add(_ s: String) { lines.append(s.count > width ? String(s.prefix(width)) : s) }
        // Label, then items wrapped at the width, continuation lines indented under the first.
        func wrapped(_ label: String, _ items: [String]) {
            var line = Format.pad(label, 8)
            for item in items {
                if line.count > 8 && line.count + 2 + item.count > width {
                    add(line)
                    line = String(repeating: " ", count: 8)
                }
                line += (line.count > 8 ? "  " : "") + item
            }
            add(line)
        }
        func num(_ n: UInt64) -> String { n == 0 ? "-" : String(n) }
        add("loft \(version)   pid \(pid)   up \(Format.duration(uptimeMs))   rss \(Format.bytes(residentBytes)) (peak \(Format.bytes(peakResidentBytes)))")
        add("")
        add(Format.pad("INPUT", 9) + Format.pad("STATE", 6) + Format.padLeft("PKTS IN", 11) + Format.padLeft("PKTS OUT", 11)
            + Format.padLeft("BYTES IN", 12) + Format.padLeft("BYTES OUT", 12) + Format.padLeft("DROPS", 9))
        for i in inputs {
            let drops = i.drops.reduce(0) { $0 + $1.1 }
            let active = i.state == "up"
            add(Format.pad(i.name, 9) + Format.pad(i.state, 6)
                + Format.padLeft(active ? num(i.packetsIn) : "-", 11) + Format.padLeft(active ? num(i.packetsOut) : "-", 11)
                + Format.padLeft(active && i.bytesIn > 0 ? Format.bytes(i.bytesIn) : "-", 12)
                + Format.padLeft(active && i.bytesOut > 0 ? Format.bytes(i.bytesOut) : "-", 12)
                + Format.padLeft(active ? num(drops) : "-", 9))
            var detail = "  " + i.detail
            if !i.extra.isEmpty { detail += (i.detail.isEmpty ? "" : "; ") + i.extra.map { "\($0.0) \($0.1)" }.joined(separator: ", ") }
            if detail.trimmingSpaces != "" { add(detail) }
        }
        add("")
        add(Format.pad("OUTBOUND", 12) + Format.pad("TYPE", 8) + Format.pad("STATE", 8) + Format.padLeft("FLOWS", 8)
            + Format.padLeft("LIVE", 7) + Format.padLeft("UP", 12) + Format.padLeft("DOWN", 12))
        for o in outbounds {
            add(Format.pad(o.name, 12) + Format.pad(o.type, 8) + Format.pad(o.state, 8) + Format.padLeft(num(o.flows), 8)
                + Format.padLeft(o.liveFlows == 0 ? "-" : String(o.liveFlows), 7)
                + Format.padLeft(o.bytesUp == 0 ? "-" : Format.bytes(o.bytesUp), 12)
                + Format.padLeft(o.bytesDown == 0 ? "-" : Format.bytes(o.bytesDown), 12))
            let items = (o.detail.isEmpty ? [] : [o.detail]) + o.extra.map { "\($0.0) \($0.1)" }
            if !items.isEmpty { wrapped("", items) }
        }
        add("")
        wrapped("FLOWS", ["tcp \(tcpFlows)"] + tcpFlowsByState.map { "\($0.0) \($0.1)" } + ["udp \(udpAssociations)", "cap \(maxFlows)"])
        wrapped("TOTALS", totals.map { "\($0.0) \(num($0.1))" })
        wrapped("DROPS", dropGroups.map { "\($0.0) \(num($0.1))" })
        if !rules.isEmpty {
            wrapped("RULES", rules.map { "#\($0.index) \(num($0.matches))" } + ["default \(num(defaultMatches))"])
        }
        if !captures.isEmpty {
            // The counts first: a long filter is what the width cuts.
            add(Format.pad("CAPTURES", 9) + "\(captures.count) running")
            for c in captures {
                add("  #\(c.id)  \(c.packets) packets, \(c.lost) lost, \(Format.duration(c.ageMs))  \(c.summary)")
            }
        }
        return lines.joined(separator: "\n") + "\n"
    }
}

extension String {
    var trimmingSpaces: String { String(drop { $0 == " " }.reversed().drop { $0 == " " }.reversed()) }
}

// MARK: - Prometheus

extension StatusReport {
    /// Prometheus text exposition format (version 0.0.4).
    public func prometheus() -> String {
        var out = ""
        func family(_ name: String, _ type: String, _ help: String) {
            out += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n"
        }
        func sample(_ name: String, _ labels: [(String, String)], _ value: UInt64) {
            out += name
            if !labels.isEmpty {
                out += "{" + labels.map { "\($0.0)=\"\(escapeLabel($0.1))\"" }.joined(separator: ",") + "}"
            }
            out += " \(value)\n"
        }
        family("loft_resident_memory_bytes", "gauge", "Resident set size of the loft process.")
        sample("loft_resident_memory_bytes", [], residentBytes)
        family("loft_uptime_seconds", "gauge", "Seconds since loft started.")
        sample("loft_uptime_seconds", [], uptimeMs / 1000)
        family("loft_input_up", "gauge", "1 when the input is running.")
        for i in inputs { sample("loft_input_up", [("input", i.name)], i.state == "up" ? 1 : 0) }
        family("loft_input_packets_total", "counter", "Packets through each input, by direction.")
        for i in inputs {
            sample("loft_input_packets_total", [("input", i.name), ("direction", "in")], i.packetsIn)
            sample("loft_input_packets_total", [("input", i.name), ("direction", "out")], i.packetsOut)
        }
        family("loft_input_bytes_total", "counter", "Bytes through each input, by direction.")
        for i in inputs {
            sample("loft_input_bytes_total", [("input", i.name), ("direction", "in")], i.bytesIn)
            sample("loft_input_bytes_total", [("input", i.name), ("direction", "out")], i.bytesOut)
        }
        family("loft_input_drops_total", "counter", "Packets dropped by each input, by reason.")
        for i in inputs { for (r, n) in i.drops { sample("loft_input_drops_total", [("input", i.name), ("reason", r)], n) } }
        family("loft_input_counter", "gauge", "Input-specific counters and gauges.")
        for i in inputs { for (k, n) in i.extra { sample("loft_input_counter", [("input", i.name), ("name", k)], n) } }
        family("loft_tcp_flows", "gauge", "Live TCP flows by state.")
        for (s, n) in tcpFlowsByState { sample("loft_tcp_flows", [("state", s)], UInt64(n)) }
        family("loft_udp_associations", "gauge", "Live UDP associations.")
        sample("loft_udp_associations", [], UInt64(udpAssociations))
        family("loft_flows_limit", "gauge", "The cap on concurrent flows.")
        sample("loft_flows_limit", [], UInt64(maxFlows))
        for (k, n) in totals {
            let name = "loft_\(k.replacingDashes)_total"
            family(name, "counter", "Total \(k.replacingDashes.split(separator: "_").joined(separator: " ")).")
            sample(name, [], n)
        }
        family("loft_drops_total", "counter", "Packets dropped over all inputs, by reason.")
        for (r, n) in drops { sample("loft_drops_total", [("reason", r)], n) }
        family("loft_outbound_flows_total", "counter", "Flows carried by each outbound.")
        for o in outbounds { sample("loft_outbound_flows_total", [("outbound", o.name), ("type", o.type)], o.flows) }
        family("loft_outbound_bytes_total", "counter", "Bytes carried by each outbound, by direction.")
        for o in outbounds {
            sample("loft_outbound_bytes_total", [("outbound", o.name), ("direction", "up")], o.bytesUp)
            sample("loft_outbound_bytes_total", [("outbound", o.name), ("direction", "down")], o.bytesDown)
        }
        family("loft_outbound_events_total", "counter", "Outbound-specific counters (a holder's dials, resumes, drops while down).")
        for o in outbounds { for (k, n) in o.extra { sample("loft_outbound_events_total", [("outbound", o.name), ("name", k)], n) } }
        family("loft_rule_matches_total", "counter", "Route decisions made by each rule (default: none matched).")
        for r in rules { sample("loft_rule_matches_total", [("rule", String(r.index))], r.matches) }
        sample("loft_rule_matches_total", [("rule", "default")], defaultMatches)
        family("loft_rule_flows_total", "counter", "Flows started under each rule.")
        for r in rules { sample("loft_rule_flows_total", [("rule", String(r.index))], r.flows) }
        family("loft_rule_bytes_total", "counter", "Bytes of the flows each rule decided, by direction.")
        for r in rules {
            sample("loft_rule_bytes_total", [("rule", String(r.index)), ("direction", "up")], r.bytesUp)
            sample("loft_rule_bytes_total", [("rule", String(r.index)), ("direction", "down")], r.bytesDown)
        }
        return out
    }

    private func escapeLabel(_ s: String) -> String {
        var o = ""
        for c in s {
            switch c {
            case "\\": o += "\\\\"
            case "\"": o += "\\\""
            case "\n": o += "\\n"
            default: o.append(c)
            }
        }
        return o
    }
}

extension String {
    var replacingDashes: String { String(map { $0 == "-" ? "_" : $0 }) }
}
