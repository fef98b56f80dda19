import Glibc
import LoftCarriers
import LoftCore
import LoftIO
import LoftProtocol
import LoftSessionStream

/// The session's events: STATUS (the overlay, checked before it goes on the TUN), GOAWAY, the
/// answers to OPEN, stream data and resets, datagrams.
extension HolderOutbound: ClientSessionDelegate {
    public func sessionEstablished(_ s: ClientSession, status: Status, resumed: Bool) {
        if let problem = Self.unusable(status.overlay, taken: reservedAddresses) {
            // The front is trusted with the overlay, not with the host: an address that would
            // take over loopback, multicast or everything is not put on the TUN. The dial
            // counts as failed, so the backoff grows.
            Log.error("holder.status-refused", ["outbound": name, "overlay": describe(status.overlay), "reason": problem])
            session.goAway(.protocolError, text: "unusable overlay: \(problem)")
            flushOutput()
            carrier?.close()
            carrierLost("STATUS refused: \(problem)")
            return
        }
        link = .up
        failures = 0
        armTick()
        saveInstance(status.instanceID)
        counts.instance = status.instanceID.description
        counts.overlay = describe(status.overlay)
        if resumed { counts.resumes += 1 } else { counts.sessions += 1 }
        parkEnded()
        Log.info(resumed ? "holder.resumed" : "holder.up",
                 ["outbound": name, "instance": status.instanceID.description, "overlay": counts.overlay,
                  "carrier": counts.carrier, "mtu": status.overlay.mtu])
        onStatus?(status)
        let pending = pendingStreams
        pendingStreams.removeAll()
        for p in pending where !p.isDone { openOnSession(p) }
        flushOutput()
    }

    public func sessionStatusChanged(_ s: ClientSession, status: Status) {
        if let problem = Self.unusable(status.overlay, taken: reservedAddresses) {
            Log.error("holder.status-refused", ["outbound": name, "overlay": describe(status.overlay), "reason": problem])
            return
        }
        counts.overlay = describe(status.overlay)
        Log.info("holder.status", ["outbound": name, "overlay": counts.overlay])
        onStatus?(status)
    }

    public func sessionGoAway(_ s: ClientSession, reason: GoAwayReason, text: String) {
        // A front going away in order is news, not an error; a refusal is.
        let level: Log.Level = reason == .shutdown || reason == .superseded ? .warn : .error
        Log.emit(level, "holder.goaway", ["outbound": name, "reason": reason.description, "text": text])
        counts.lastError = "GOAWAY \(reason)\(text.isEmpty ? "" : ": \(text)")"
        if reason == .unknownInstance {
            session.forgetInstance()
            if link != .up { helloAtOnce = true }
        }
        // The front closes the carrier after GOAWAY; the close event redials with backoff.
    }

    public func streamOpened(_ s: ClientSession, stream: UInt32) {
        streams[stream]?.connected()
    }

    public func streamOpenFailed(_ s: ClientSession, stream: UInt32, reason: OpenFailReason) {
        guard let hs = streams.removeValue(forKey: stream) else { return }
        hs.id = nil
        hs.fail(reason.flowFailure)
    }

    public func streamReadable(_ s: ClientSession, stream: UInt32) {
        streams[stream]?.readable()
    }

    public func streamWritable(_ s: ClientSession, stream: UInt32) {
        streams[stream]?.writable()
    }

    public func streamReset(_ s: ClientSession, stream: UInt32, reason: RstReason) {
        guard let hs = streams.removeValue(forKey: stream) else {
            if let a = associations.removeValue(forKey: stream) { a.id = nil }
            return
        }
        hs.id = nil
        hs.lost(.other(ECONNRESET))
    }

    public func datagramReceived(_ s: ClientSession, association: UInt32, from: Destination,
                                 payload: UnsafeRawBufferPointer) {
        guard let a = associations[association], case .ip(let endpoint) = from else { return }
        counts.bytesDown &+= UInt64(payload.count)
        a.events?.datagramReceived(payload, from: endpoint)
    }

    public func sessionOutputReady(_ s: ClientSession) {
        scheduleFlush()
    }

    /// Why an overlay cannot go on the TUN, or nil when it can: its addresses pass the same
    /// check as an SSTP server's IPCP address (`HostAddress.problem`: not loopback,
    /// unspecified, multicast, broadcast or reserved, not the gateway itself, not an address
    /// the TUN already has), its gateways are not loopback, unspecified or multicast.
    /// `taken`: the TUN's configured addresses; an overlay prefix equal to one of them is no
    /// change and passes.
    static func unusable(_ o: Overlay, taken: [IPPrefix] = []) -> String? {
        func bad(_ a: IPAddress) -> Bool { a.isLoopback || a.isUnspecified || a.isMulticast }
        func others(_ p: IPPrefix) -> [IPAddress] { taken.filter { $0 != p }.map(\.address) }
        if let why = HostAddress.problem(o.ipv4.address, peer: o.gateway4, taken: others(o.ipv4)) {
            return "IPv4 address \(o.ipv4.address): \(why)"
        }
        if bad(o.gateway4) { return "IPv4 address or gateway is loopback, unspecified or multicast" }
        if o.ipv4.length < 8 { return "IPv4 prefix /\(o.ipv4.length) is wider than /8" }
        if let v6 = o.ipv6 {
            if let why = HostAddress.problem(v6.address, peer: o.gateway6, taken: others(v6)) {
                return "IPv6 address \(v6.address): \(why)"
            }
            if o.gateway6.map(bad) == true { return "IPv6 address or gateway is loopback, unspecified or multicast" }
            if v6.length < 16 { return "IPv6 prefix /\(v6.length) is wider than /16" }
        }
        if o.dns.contains(where: { $0.isUnspecified || $0.isMulticast }) { return "a DNS server is unspecified or multicast" }
        return nil
    }

    private func describe(_ o: Overlay) -> String {
        var t = o.ipv4.description
        if let v6 = o.ipv6 { t += " " + v6.description }
        return t
    }
}
