import CLwIP
import LoftCore

// MARK: - C callbacks

// A stack's own callbacks (output, accepted, udp) get its context: the Netstack, unretained
// (it frees its lwIP part, and with it these callbacks, before it goes). A connection's get the
// token of its Swift end.
@inline(__always)
private func netstack(_ ctx: UnsafeMutableRawPointer?) -> Netstack {
    Unmanaged<Netstack>.fromOpaque(ctx!).takeUnretainedValue()
}

extension Netstack {
    /// The functions lwIP calls (through clwip's callbacks).
    static var lwipCallbacks: clwip_callbacks {
        clwip_callbacks(output: lwipOutput, accepted: lwipAccepted, received: lwipReceived,
                        sent: lwipSent, failed: lwipError, connected: lwipConnected, udp: lwipUDP, link_udp: lwipLinkUDP)
    }
}

extension clwip_endpoint {
    init(_ e: Endpoint) {
        self.init()
        port = e.port
        is_v6 = e.address.isIPv4 ? 0 : 1
        withUnsafeMutableBytes(of: &ip) { _ = e.address.write(to: $0.baseAddress!) }
    }

    var endpoint: Endpoint {
        var copy = ip
        let addr = withUnsafeBytes(of: &copy) { is_v6 != 0 ? IPAddress(ipv6Bytes: $0) : IPAddress(ipv4Bytes: $0) }
        return Endpoint(addr, port)
    }
}

private let lwipOutput: @convention(c) (UnsafeMutableRawPointer?, Int32, UnsafePointer<UInt8>?, Int) -> Void = { ctx, netif, data, len in
    // Per packet out: the stack is used in place (it outlives its lwIP part), no reference counted.
    Unmanaged<Netstack>.fromOpaque(ctx!)._withUnsafeGuaranteedRef {
        $0.emit(UnsafeRawBufferPointer(start: data, count: len), netif: Int(netif))
    }
}

private let lwipAccepted: @convention(c) (UnsafeMutableRawPointer?, OpaquePointer?, Int32, UnsafePointer<clwip_endpoint>?,
                                          UnsafePointer<clwip_endpoint>?) -> UInt = { ctx, pcb, netif, src, dst in
    guard let pcb, let src, let dst else { return 0 }
    let stack = netstack(ctx)
    let key = FlowKey(netif: Int(netif), source: src.pointee.endpoint, destination: dst.pointee.endpoint)
    guard let flow = stack.flows.tcp[key], flow.state == .handshaking else { return 0 }
    flow.accepted(pcb)
    return UInt(bitPattern: Unmanaged.passUnretained(flow as LwipStream).toOpaque())
}

// The token is the flow's LwipStream, alive while its pcb has callbacks (close and abort
// detach them first).
@inline(__always)
private func stream(_ token: UInt) -> LwipStream {
    Unmanaged<LwipStream>.fromOpaque(UnsafeRawPointer(bitPattern: token)!).takeUnretainedValue()
}

/// The stream of `token` in place, for a call that cannot end it (it only queues its events).
@inline(__always)
private func withStream(_ token: UInt, _ body: (LwipStream) -> Void) {
    Unmanaged<LwipStream>.fromOpaque(UnsafeRawPointer(bitPattern: token)!)._withUnsafeGuaranteedRef(body)
}

private let lwipReceived: @convention(c) (UInt, OpaquePointer?) -> Void = { token, p in
    withStream(token) { $0.received(p) }
}

private let lwipSent: @convention(c) (UInt, UInt16) -> Void = { token, _ in
    withStream(token) { $0.sent() }
}

private let lwipError: @convention(c) (UInt, Int32) -> Void = { token, err in
    // The failure can end the flow that holds the stream: keep it alive for the call.
    let s = stream(token)
    withExtendedLifetime(s) { s.lwipFailed(err) }
}

private let lwipConnected: @convention(c) (UInt) -> Void = { token in
    stream(token).connected()
}

private let lwipLinkUDP: @convention(c) (UInt, UnsafePointer<clwip_endpoint>?, OpaquePointer?) -> Void = { token, src, p in
    guard let p else { return }
    guard let src else { clwip_pbuf_free(p); return }
    let a = Unmanaged<LinkAssociation>.fromOpaque(UnsafeRawPointer(bitPattern: token)!).takeUnretainedValue()
    withExtendedLifetime(a) { a.received(from: src.pointee.endpoint, p) }
}

private let lwipUDP: @convention(c) (UnsafeMutableRawPointer?, Int32, UnsafePointer<clwip_endpoint>?, UnsafePointer<clwip_endpoint>?,
                                     OpaquePointer?) -> Void = { ctx, netif, src, dst, p in
    guard let p else { return }
    guard let src, let dst else { clwip_pbuf_free(p); return }
    netstack(ctx).udpReceived(netif: Int(netif), source: src.pointee.endpoint, destination: dst.pointee.endpoint, pbuf: p)
}
