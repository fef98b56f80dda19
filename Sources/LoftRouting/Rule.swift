import LoftCore

/// One routing rule as the router runs it: what it matches and what it decides. The config
/// reader turns each `rules` entry into one of these (`loft`'s RuntimeValues.swift); the router
/// knows nothing of YAML or of where in a file a rule was written.
public struct Rule: Sendable, Equatable {
    public enum Action: Sendable, Equatable {
        case direct
        /// Discard; with `reset`, a TCP SYN is answered with an RST.
        case drop(reset: Bool)
        /// Hand the flow to the named outbound.
        case via(outbound: String)
    }

    public var action: Action
    /// Destination prefixes. Empty: any address.
    public var to: [IPPrefix]
    /// Destination port ranges. Empty: any port.
    public var ports: [ClosedRange<UInt16>]
    /// "tcp" or "udp"; nil: both.
    public var network: String?
    /// Lowercased names; `*.example.org` matches every name below example.org. Empty: any.
    public var domains: [String]

    public init(action: Action, to: [IPPrefix] = [], ports: [ClosedRange<UInt16>] = [],
                network: String? = nil, domains: [String] = []) {
        self.action = action
        self.to = to
        self.ports = ports
        self.network = network
        self.domains = domains
    }
}
