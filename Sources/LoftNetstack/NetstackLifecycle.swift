import CLwIP
import LoftCore

/// Live lwIP objects, counted on lwIP's own lists (for tests and leak checks).
public struct LwIPResources: Equatable, Sendable, CustomStringConvertible {
    public var tcpActive: Int
    public var tcpTimeWait: Int
    public var tcpListeners: Int
    public var tcpBound: Int
    public var udpPCBs: Int
    public var netifs: Int

    /// Nothing of lwIP's is live.
    public var isEmpty: Bool {
        tcpActive == 0 && tcpTimeWait == 0 && tcpListeners == 0 && tcpBound == 0 && udpPCBs == 0 && netifs == 0
    }

    public var description: String {
        "tcp active \(tcpActive), time-wait \(tcpTimeWait), listeners \(tcpListeners), bound \(tcpBound), udp \(udpPCBs), netifs \(netifs)"
    }
}

extension Netstack {
    /// lwIP's live pcbs and netifs right now, of every stack in the process (lwIP's lists are
    /// process-wide).
    public static func lwipResources() -> LwIPResources {
        var r = clwip_resources()
        clwip_get_resources(&r)
        return LwIPResources(tcpActive: Int(r.tcp_active), tcpTimeWait: Int(r.tcp_time_wait),
                             tcpListeners: Int(r.tcp_listen), tcpBound: Int(r.tcp_bound),
                             udpPCBs: Int(r.udp), netifs: Int(r.netifs))
    }

    /// Ends the stack: every TCP flow is aborted (its outbound reset, the app sent an RST),
    /// every UDP association closed, and lwIP's connections, listeners, UDP pcbs and netifs
    /// freed (the shared listeners and UDP pcbs with the process's last stack). Call on the loop
    /// thread, outside lwIP callbacks; calling it again does nothing. The stack must not be fed
    /// packets afterwards.
    public func shutdown() {
        guard !isShutDown else { return }
        for flow in flows.tcp.all { flow.abort() }
        flows.tcp.removeAll()
        for association in flows.udp.all { flows.closeAssociation(association) }
        flows.udp.removeAll()
        // Connections opened over links fail (their pcbs are aborted before lwIP is emptied,
        // so no stream keeps a pointer to a freed pcb).
        for case let link as NetstackLink in inputs.map({ $0.writer }) { link.linkDown() }
        flows.conversations.removeAll()
        batch.removeAll()
        // Whatever lwIP still holds (connections already handed back to it, listeners, netifs);
        // its RSTs still reach the inputs' writers through this stack.
        clwip_stack_free(lwip)
        isShutDown = true
    }

    /// The same end, from deinit. The flows' and associations' back references to this stack
    /// can no longer be used, so only what needs no stack runs: each flow's splice and lwIP end
    /// are reset (the outbound is reset, the app gets its RST, queued pbufs are freed), each
    /// association's outbound side is closed, then lwIP is emptied as in `shutdown()`.
    func releaseInDeinit() {
        for flow in flows.tcp.all {
            flow.splice.reset()
            flow.reset()
        }
        for association in flows.udp.all {
            association.outboundSide?.close()
            association.outboundSide = nil
        }
        for case let link as NetstackLink in inputs.map({ $0.writer }) { link.linkDown() }
        clwip_stack_free(lwip)
        isShutDown = true
    }
}
