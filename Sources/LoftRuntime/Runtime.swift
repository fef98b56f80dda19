import LoftCapture
import LoftConfig
import LoftControl
import LoftCore
import LoftIO
import LoftInputs
import LoftNetstack
import LoftOutbounds
import LoftRouting

/// Holds the running parts, answers the control socket and builds status reports. `loft run`
/// (Sources/loft/Startup.swift) makes the parts and hands them in; a test can hand in its own.
public final class Runtime {
    public let config: Configuration
    public let configPath: String?
    public let loop: EventLoop
    /// loft's version, as status reports it.
    public let version: String
    /// When it started, on the loop's clock (status's uptime).
    public let started: UInt64
    public var outbounds: [String: Outbound] = [:]
    public var router: Router?
    public var netstack: Netstack?
    public var tun: TunInput?
    public var bridge: BridgeInput?
    public var socks5: Socks5Server?
    public var control: ControlServer?
    public var metrics: MetricsServer?
    public var holders: [HolderOutbound] = []
    public var sstps: [SSTPOutbound] = []
    public var pathMonitor: PathMonitor?
    public var capture: CaptureHub?

    public init(config: Configuration, configPath: String?, loop: EventLoop, version: String) {
        self.config = config
        self.configPath = configPath
        self.loop = loop
        self.version = version
        started = loop.currentTime
    }

    /// Writes the fake-IP mapping's file (RuntimeFakeIP.swift).
    var fakeIPSaver: FakeIPSaver?

    public func stopAll() {
        saveFakeIP()
        capture?.stop(); capture = nil
        pathMonitor?.stop(); pathMonitor = nil
        for h in holders { h.stop() }
        for s in sstps { s.stop() }
        tun?.stop(); tun = nil
        socks5?.stop(); socks5 = nil
        bridge?.stop(); bridge = nil
        metrics?.stop(); metrics = nil
        control?.stop(); control = nil
    }

    /// One line for systemd's STATUS= (`systemctl status`): each input up and each session's state.
    public func serviceStatus() -> String {
        var parts: [String] = []
        if let t = tun { parts.append("tun \(config.tun?.name ?? "")\(t.currentIPv4.map { " \($0)" } ?? "")") }
        if let s = config.socks5, socks5 != nil { parts.append("socks5 \(s.listen)") }
        if bridge != nil { parts.append("bridge") }
        for o in (holders as [Outbound]) + (sstps as [Outbound]) {
            let st = o.status
            parts.append("\(st.name) \(st.state)\(st.detail.isEmpty ? "" : " (\(st.detail))")")
        }
        if let ns = netstack { parts.append("\(ns.tcpStateCounts().reduce(0) { $0 + $1.1 }) tcp flows") }
        return parts.joined(separator: "; ")
    }

    public func logInputStats() {
        guard let netstack else { return }
        for (name, index) in [("tun", tun?.inputIndex), ("bridge", bridge?.inputIndex)] {
            guard let index else { continue }
            let ic = netstack.inputCounters[index]
            var fields: [(String, Any)] = [("input", name), ("packets_in", ic.packetsIn), ("packets_out", ic.packetsOut)]
            for r in PacketDropReason.allCases where ic.dropped(r) > 0 { fields.append(("drop_\(r)", ic.dropped(r))) }
            if let b = bridge, name == "bridge" {
                fields += [("oversize", b.counters.oversize), ("peer_missing", b.counters.peerMissing), ("send_drops", b.counters.sendDrops), ("acks_coalesced", b.counters.acksCoalesced)]
            }
            Log.emit(.info, "input.stats", fields)
        }
    }
}
