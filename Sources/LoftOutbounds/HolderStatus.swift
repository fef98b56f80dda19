import LoftCarriers
import LoftCore
import LoftIO
import LoftProtocol
import LoftSessionStream


/// What `loft status` shows of a holder.
public struct HolderStats: Sendable {
    public var state = "idle"
    public var carrier = ""
    public var overlay = ""
    public var instance = ""
    public var rttMs: UInt64?
    public var dials: UInt64 = 0
    public var sessions: UInt64 = 0           // STATUS received after HELLO
    public var resumes: UInt64 = 0            // STATUS received after RESUME
    public var carrierLosses: UInt64 = 0
    public var pathChanges: UInt64 = 0
    public var migrations: UInt64 = 0         // path changes the carrier survived (quic: validated migration)
    public var multipathKept: UInt64 = 0      // mptcp: path changes the MPTCP carrier rode through (no RESUME)
    public var quicPacket: UInt64 = 0         // quic, h3: the largest UDP payload on the path now (0: other carriers, not up)
    public var flowStreams: UInt64 = 0        // quic: TCP flows carried on QUIC streams of their own
    public var datagramFramesOut: UInt64 = 0  // quic: DGRAMs sent as QUIC DATAGRAM frames
    public var datagramFramesIn: UInt64 = 0   // quic: DGRAMs received as QUIC DATAGRAM frames
    public var holdDrops: UInt64 = 0          // flows and datagrams refused while down with hold
    public var fallbackFlows: UInt64 = 0      // flows sent direct while down without hold
    public var streamsReset: UInt64 = 0       // streams lost with a carrier
    public var streamLimitRefusals: UInt64 = 0 // flows refused at the front's max_streams
    // Replay (docs/protocol.md §8.1).
    public var sessionsParked: UInt64 = 0     // carriers lost with the streams parked
    public var resumesWithStreams: UInt64 = 0 // RESUMEs that continued them
    public var streamsLost: UInt64 = 0        // parked flows reset: the front no longer had them, or grace over
    public var replayedBytes: UInt64 = 0      // session bytes sent again after a RESUME
    public var replayHeldBytes: UInt64 = 0    // bytes kept for replay now (sent, not acknowledged, and queued)
    public var parkedStreams: UInt64 = 0      // flows parked now
    // Carried through the session, whatever input the flow came from (TUN, bridge, SOCKS5).
    public var flowsOpened: UInt64 = 0        // streams and associations opened on a session
    public var bytesUp: UInt64 = 0            // app → front: stream bytes and datagram payloads
    public var bytesDown: UInt64 = 0          // front → app
    public var lastError = ""
}

/// What the holder shows: `stats` and its `loft status` row.
extension HolderOutbound {
    public var stats: HolderStats {
        var s = counts
        s.bytesUp &+= streamMeter.bytesUp
        s.bytesDown &+= streamMeter.bytesDown
        s.bytesUp &+= flowStreamMeter.bytesWritten
        s.bytesDown &+= flowStreamMeter.bytesRead
        s.state = switch link {
        case .idle: "idle"
        case .dialing, .handshaking: "dialing"
        case .up: "up"
        case .waiting: options.hold ? "held" : "down"
        case .stopped: "stopped"
        }
        s.rttMs = link == .up ? session.rttMs : nil
        s.quicPacket = link == .up ? UInt64(carrier?.maxPacket ?? 0) : 0
        s.replayedBytes = session.counters.replayedBytes
        s.replayHeldBytes = UInt64(session.replayHeldBytes)
        s.parkedStreams = session.isParked ? UInt64(streams.count) : 0
        return s
    }

    public var isUp: Bool { link == .up }

    /// Streams and associations on the live attachment.
    public var liveFlowCount: Int { streams.count + associations.count }

    /// Its `loft status` row from `stats`: the holder's own counts, which include SOCKS5 flows
    /// (the netstack never sees those). The detail names the carrier (quic and h3: with the
    /// largest packet on the path now), the overlay address, the round trip, and the last error
    /// while not up.
    public var status: OutboundStatus {
        let st = stats
        var s = OutboundStatus(name: name, type: "loft", state: st.state)
        s.flows = st.flowsOpened; s.liveFlows = liveFlowCount; s.bytesUp = st.bytesUp; s.bytesDown = st.bytesDown
        var d: [String] = []
        if !st.carrier.isEmpty { d.append(st.carrier) }
        if st.quicPacket > 0 { d.append("packets \(st.quicPacket) B") }
        if !st.overlay.isEmpty { d.append("overlay \(st.overlay)") }
        if let rtt = st.rttMs { d.append("rtt \(rtt) ms") }
        if !st.lastError.isEmpty && st.state != "up" { d.append("last error: \(st.lastError)") }
        if st.parkedStreams > 0 { d.append("\(st.parkedStreams) flows parked") }
        // A gauge, so in the detail (the extra counters are exported as counters).
        if st.replayHeldBytes > 0 { d.append("\(st.replayHeldBytes) B held for replay") }
        let paths = options.carrier.multipath && link == .up ? carrier?.multipath ?? [] : []
        if !paths.isEmpty { d.append(paths.map(\.description).joined(separator: "; ")) }
        s.detail = d.joined(separator: ", ")
        s.extra = [("dials", st.dials), ("sessions", st.sessions), ("resumes", st.resumes),
                   ("carrier-losses", st.carrierLosses), ("path-changes", st.pathChanges), ("migrations", st.migrations),
                   ("flow-streams", st.flowStreams),
                   ("datagram-frames-out", st.datagramFramesOut), ("datagram-frames-in", st.datagramFramesIn),
                   (OutboundStatus.holdDrops, st.holdDrops), ("fallback-flows", st.fallbackFlows),
                   ("streams-reset", st.streamsReset), ("stream-limit-refusals", st.streamLimitRefusals),
                   ("sessions-parked", st.sessionsParked), ("resumes-with-streams", st.resumesWithStreams),
                   ("replayed-bytes", st.replayedBytes), ("streams-lost", st.streamsLost)]
        // The subflows are a gauge: in the detail only (`extra` are counters, exported as such).
        if options.carrier.multipath { s.extra.append(("mptcp-path-changes-kept", st.multipathKept)) }
        return s
    }
}
