import CLwIP
import LoftCore

// MARK: - C callbacks

// lwIP is one global instance; its callbacks find the stack through this (loop thread only).
// It does not own the stack: set by init, cleared by shutdown() or deinit.
nonisolated(unsafe) unowned(unsafe) var activeNetstack: Netstack?

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

private let lwipOutput: @convention(c) (Int32, UnsafePointer<UInt8>?, Int) -> Void = { netif, data, len in
    activeNetstack?.emit(UnsafeRawBufferPointer(start: data, count: len), netif: Int(netif))
}

private let lwipAccepted: @convention(c) (OpaquePointer?, Int32, UnsafePointer<clwip_endpoint>?, UnsafePointer<clwip_endpoint>?) -> UInt = { pcb, netif, src, dst in
    guard let stack = activeNetstack, let pcb, let src, let dst else { return 0 }
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

private let lwipReceived: @convention(c) (UInt, OpaquePointer?) -> Void = { token, p in
    stream(token).received(p)
}

private let lwipSent: @convention(c) (UInt, UInt16) -> Void = { token, _ in
    stream(token).sent()
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

private let lwipUDP: @convention(c) (Int32, UnsafePointer<clwip_endpoint>?, UnsafePointer<clwip_endpoint>?, OpaquePointer?) -> Void = { netif, src, dst, p in
    guard let p else { return }
    guard let stack = activeNetstack, let src, let dst else { clwip_pbuf_free(p); return }
    stack.udpReceived(netif: Int(netif), source: src.pointee.endpoint, destination: dst.pointee.endpoint, pbuf: p)
}
