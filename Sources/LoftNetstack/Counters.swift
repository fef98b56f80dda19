import LoftCore

/// The netstack's counters. Plain integers on the loop thread; read by status and metrics.
public struct NetstackCounters: Sendable {
    public var packetsIn: UInt64 = 0
    public var bytesIn: UInt64 = 0
    public var packetsOut: UInt64 = 0
    public var bytesOut: UInt64 = 0
    public var drops = [UInt64](repeating: 0, count: PacketDropReason.allCases.count)
    public var tcpFlowsOpened: UInt64 = 0
    public var tcpFlowsFailed: UInt64 = 0
    /// TCP connections loft opened itself over a packet outbound's link (NetstackLink).
    public var linkConnectionsOpened: UInt64 = 0
    public var udpAssociationsOpened: UInt64 = 0
    public var flowsEvicted: UInt64 = 0
    /// Flows the app reset before its handshake with lwIP completed (their outbound
    /// connections closed at once).
    public var handshakesReset: UInt64 = 0
    /// ICMP port unreachable sent to apps for datagrams a destination refused, and those the
    /// rate limit held back.
    public var portUnreachableSent: UInt64 = 0
    public var icmpRateLimited: UInt64 = 0
    /// Times freed memory was given back to the system after the flow table shrank.
    public var memoryTrims: UInt64 = 0
    public var idleClosed: UInt64 = 0
    /// Closed connections freed from lwIP's TIME_WAIT at once (see clwip_reap_timewait).
    public var timeWaitReaped: UInt64 = 0
    /// TCP flows whose first bytes named a host (SNI, Host); whose wait for first bytes ran
    /// out; whose first bytes named none (another protocol, no name, past the byte budget).
    public var sniffed: UInt64 = 0
    public var sniffTimedOut: UInt64 = 0
    public var notSniffable: UInt64 = 0
    public var tcpBytesUp: UInt64 = 0      // app → remote
    public var tcpBytesDown: UInt64 = 0    // remote → app
    public var udpDatagramsUp: UInt64 = 0
    public var udpDatagramsDown: UInt64 = 0

    public func dropped(_ r: PacketDropReason) -> UInt64 { drops[r.rawValue] }
    public var totalDrops: UInt64 { drops.reduce(0, +) }
}

/// One input's share: what it delivered and what was dropped from it, by reason.
public struct InputCounters: Sendable {
    public var packetsIn: UInt64 = 0
    public var bytesIn: UInt64 = 0
    public var packetsOut: UInt64 = 0
    public var bytesOut: UInt64 = 0
    public var drops = [UInt64](repeating: 0, count: PacketDropReason.allCases.count)
    public func dropped(_ r: PacketDropReason) -> UInt64 { drops[r.rawValue] }
}

/// Flow identity: the app's endpoint and the destination, plus the input it came in on.
struct FlowKey: Hashable {
    var netif: Int
    var source: Endpoint
    var destination: Endpoint

    /// Swift's per-process seeded hash of the same fields as the synthesized one (so an app
    /// still cannot choose ports that collide), fed in whole words: an IPv4 flow's two
    /// addresses in one, the ports and the input in another. The synthesized one fed each enum
    /// case, address and port on its own: some 400 instructions a lookup, four or more
    /// lookups per flow.
    func hash(into h: inout Hasher) {
        if case .v4(let a) = source.address, case .v4(let b) = destination.address {
            h.combine(UInt64(a) << 32 | UInt64(b))
        } else {
            h.combine(source.address)
            h.combine(destination.address)
        }
        h.combine(UInt64(source.port) << 48 | UInt64(destination.port) << 32 | UInt64(UInt32(truncatingIfNeeded: netif)))
    }
}

