import LoftCapture
import LoftNetstack

extension Runtime {
    /// Live captures (`loft capture`, docs/capture.md): the TUN and the bridge hand their
    /// packets to one hub, the control socket hands it `capture` requests, the netstack its
    /// drops while a capture asks for them. Nothing when loft has no packet input.
    public func setUpCapture(_ netstack: Netstack) {
        guard tun != nil || bridge != nil else { return }
        let hub = CaptureHub(loop: loop)
        if let tun {
            hub.add(.init(netif: tun.inputIndex, kind: .tun, name: tun.name))
            tun.capture = hub
        }
        if let bridge {
            hub.add(.init(netif: bridge.inputIndex, kind: .bridge, name: "bridge"))
            bridge.capture = hub
        }
        hub.outboundNames = outbounds.keys.sorted()
        hub.flowOf = { [unowned netstack] p, netif, inbound in netstack.flowOf(p, netif: netif, inbound: inbound) }
        hub.flowExists = { [unowned netstack] in netstack.hasFlow(id: $0) }
        hub.activeChanged = { [unowned netstack, unowned hub] on in
            netstack.dropTap = on ? { p, reason, netif in hub.dropped(p, netif: netif, reason: reason.description) } : nil
        }
        control?.captureHandler = { [unowned hub] request, fd in hub.start(request, fd: fd) }
        capture = hub
    }
}
