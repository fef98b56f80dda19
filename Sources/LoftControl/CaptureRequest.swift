/// `capture …`: the control request that turns its connection into a pcapng stream
/// (docs/capture.md). One line, keys in any order, `filter=` last (the rest of the line is the
/// BPF expression, spaces and all):
///
///     capture input=tun|bridge|all [outbound=NAME] [flow=ID] [drops] [snaplen=N]
///             [count=N] [duration-ms=N] [filter=EXPRESSION]
public struct CaptureRequest: Equatable, Sendable {
    public enum Input: String, Equatable, Sendable, CaseIterable { case tun, bridge, all }

    public var input: Input = .all
    public var outbound: String?
    public var flow: UInt64?
    /// Dropped packets too, each with loft's reason as its comment.
    public var drops = false
    /// Bytes kept of each packet.
    public var snaplen = CaptureRequest.defaultSnaplen
    /// Packets after which the capture ends (nil: no limit).
    public var count: UInt64?
    /// Milliseconds after which the capture ends (nil: no limit).
    public var durationMs: UInt64?
    /// A tcpdump filter expression (compiled with libpcap in loft).
    public var filter: String?

    public static let defaultSnaplen = 262_144
    public static let snaplenRange = 64...262_144
    /// The longest request line loft reads (the control socket's limit).
    public static let maxFilterBytes = 900

    public init() {}

    static let usage = "usage: capture input=tun|bridge|all [outbound=NAME] [flow=ID] [drops] [snaplen=N] [count=N] [duration-ms=N] [filter=EXPRESSION]"

    /// The request, or why not. `line` begins with "capture".
    public static func parse(_ line: String) -> Result<CaptureRequest, ControlServer.ControlError> {
        var r = CaptureRequest()
        guard line.hasPrefix("capture") else { return .failure(.init(usage)) }
        var rest = Substring(line).dropFirst("capture".count)
        let bytes = Array(line.utf8), key = Array(" filter=".utf8)
        if let f = OneShotConnection.find(key, in: bytes) {
            let expr = Substring(String(decoding: bytes[(f + key.count)...], as: UTF8.self)).trimmingSpaces
            if expr.isEmpty { return .failure(.init("capture: filter= needs an expression")) }
            if expr.utf8.count > maxFilterBytes { return .failure(.init("capture: the filter is longer than \(maxFilterBytes) bytes")) }
            r.filter = String(expr)
            rest = Substring(String(decoding: bytes["capture".utf8.count..<f], as: UTF8.self))
        }
        var seen = Set<Substring>()
        for word in rest.split(separator: " ") {
            let kv = word.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let key = kv[0]
            let value = kv.count > 1 ? String(kv[1]) : nil
            guard seen.insert(key).inserted else { return .failure(.init("capture: \(key.prefix(32)) given twice")) }
            switch (key, value) {
            case ("input", let v?):
                if v == "socks" || v == "socks5" {
                    return .failure(.init("capture: SOCKS5 flows have no packets (loft relays their bytes); see them with `loft status --flows`, or capture the TUN or bridge that carries an app's packets"))
                }
                guard let i = Input(rawValue: v) else { return .failure(.init("capture: unknown input \"\(v.prefix(32))\" (tun, bridge, all)")) }
                r.input = i
            case ("outbound", let v?):
                guard !v.isEmpty, v.utf8.count <= 64 else { return .failure(.init("capture: outbound needs a name")) }
                r.outbound = v
            case ("flow", let v?):
                guard let id = UInt64(v), id > 0 else { return .failure(.init("capture: flow \"\(v.prefix(32))\" is not a flow id (see `loft status --flows`)")) }
                r.flow = id
            case ("drops", nil):
                r.drops = true
            case ("snaplen", let v?):
                guard let n = Int(v), snaplenRange.contains(n) else {
                    return .failure(.init("capture: snaplen \"\(v.prefix(32))\" is not a number from \(snaplenRange.lowerBound) to \(snaplenRange.upperBound)"))
                }
                r.snaplen = n
            case ("count", let v?):
                guard let n = UInt64(v), n > 0 else { return .failure(.init("capture: count \"\(v.prefix(32))\" is not a positive number")) }
                r.count = n
            case ("duration-ms", let v?):
                guard let n = UInt64(v), n > 0, n <= 31 * 86_400_000 else {
                    return .failure(.init("capture: duration-ms \"\(v.prefix(32))\" is not a positive number of milliseconds"))
                }
                r.durationMs = n
            default:
                return .failure(.init("capture: unknown option \"\(word.prefix(32))\"; \(usage)"))
            }
        }
        return .success(r)
    }

    /// The request line that asks for this capture (what `loft capture` sends).
    public var line: String {
        var words = ["capture", "input=\(input.rawValue)"]
        if let outbound { words.append("outbound=\(outbound)") }
        if let flow { words.append("flow=\(flow)") }
        if drops { words.append("drops") }
        if snaplen != Self.defaultSnaplen { words.append("snaplen=\(snaplen)") }
        if let count { words.append("count=\(count)") }
        if let durationMs { words.append("duration-ms=\(durationMs)") }
        if let filter { words.append("filter=\(filter)") }
        return words.joined(separator: " ")
    }
}

extension Substring {
    var trimmingSpaces: Substring {
        var s = self
        while s.first == " " { s = s.dropFirst() }
        while s.last == " " { s = s.dropLast() }
        return s
    }
}
