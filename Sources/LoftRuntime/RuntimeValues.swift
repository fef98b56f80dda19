// Where the config becomes the runtime: each section's YAML-layer settings (LoftConfig) turned
// into the value the part that runs it takes (`loft run` and a reload). The inputs and the router
// never see LoftConfig.
import LoftConfig
import LoftInputs
import LoftNetstack
import LoftRouting

extension TunInput.Options {
    public init(_ s: TunSettings) {
        self.init(name: s.name, netns: s.netns, mtu: s.mtu, ipv4: s.ipv4, ipv6: s.ipv6,
                  routeAll: s.routeAll, dns: s.dns, offload: s.offload == .auto)
    }
}

extension BridgeInput.Options {
    public init(_ s: BridgeSettings) {
        self.init(peerPort: s.peerPort, extensionPort: s.extensionPort, mtu: s.mtu)
    }
}

extension Socks5Server.Options {
    public init(_ s: Socks5Settings) {
        self.init(listen: s.listen, maxClients: s.maxClients)
    }
}

extension Rule.Action {
    public init(_ a: RuleAction) {
        switch a {
        case .direct: self = .direct
        case .drop(let reset): self = .drop(reset: reset)
        case .via(let outbound): self = .via(outbound: outbound)
        }
    }
}

extension Rule {
    public init(_ s: RuleSettings) {
        self.init(action: Action(s.action), to: s.to, ports: s.ports, network: s.network, domains: s.domains)
    }
}

extension Netstack.Sniffing {
    public init(_ s: SniffSettings) {
        self.init()
        enabled = s.enabled
        let (seconds, atto) = s.wait.components
        waitMs = UInt64(seconds) * 1000 + UInt64(atto / 1_000_000_000_000_000)
        maxBytes = s.maxBytes
        if let ranges = s.skipPorts { skipPorts = Netstack.PortSet(ranges.flatMap { Array($0) }) }
    }
}
