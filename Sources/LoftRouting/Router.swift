import LoftConfig
import LoftCore

/// Joins each new flow to an outbound: the configured rules in order, first match wins, then
/// the default action. Each rule counts the flows it matched.
public final class Router: FlowRouter {
    public struct CompiledRule {
        public let settings: RuleSettings
        public let decision: RouteDecision
        public var matches: UInt64 = 0
    }

    public private(set) var rules: [CompiledRule]
    public private(set) var defaultDecision: RouteDecision
    public private(set) var defaultMatches: UInt64 = 0
    private let outbounds: [String: Outbound]

    public struct UnknownOutbound: Error, CustomStringConvertible {
        public var name: String
        public var description: String { "no outbound named \"\(name)\"" }
    }

    /// `outbounds` holds every outbound by name, including the built-in `direct`.
    public init(rules: [RuleSettings], defaultAction: RuleAction, outbounds: [String: Outbound]) throws {
        self.outbounds = outbounds
        (self.rules, self.defaultDecision) = try Router.compile(rules, defaultAction, outbounds)
    }

    /// Swaps in new rules (`loft reload`); on error the old ones stay.
    public func reload(rules: [RuleSettings], defaultAction: RuleAction) throws {
        (self.rules, self.defaultDecision) = try Router.compile(rules, defaultAction, outbounds)
        defaultMatches = 0
    }

    private static func compile(_ rules: [RuleSettings], _ defaultAction: RuleAction,
                                _ outbounds: [String: Outbound]) throws -> ([CompiledRule], RouteDecision) {
        func decide(_ a: RuleAction) throws -> RouteDecision {
            switch a {
            case .direct:
                guard let d = outbounds["direct"] else { throw UnknownOutbound(name: "direct") }
                return .outbound(d)
            case .drop(let reset):
                return .drop(reset: reset)
            case .via(let name):
                guard let o = outbounds[name] else { throw UnknownOutbound(name: name) }
                return .outbound(o)
            }
        }
        return (try rules.map { CompiledRule(settings: $0, decision: try decide($0.action)) }, try decide(defaultAction))
    }

    /// One line describing a rule, for status.
    public static func summary(_ r: RuleSettings) -> String {
        var parts: [String] = []
        switch r.action {
        case .direct: parts.append("direct")
        case .drop(let reset): parts.append(reset ? "drop(reset)" : "drop")
        case .via(let o): parts.append("via \(o)")
        }
        if let n = r.network { parts.append(n) }
        if !r.to.isEmpty { parts.append(r.to.count <= 2 ? r.to.map(\.description).joined(separator: ",") : "\(r.to.count) prefixes") }
        if !r.ports.isEmpty { parts.append("ports " + r.ports.map { $0.lowerBound == $0.upperBound ? "\($0.lowerBound)" : "\($0.lowerBound)-\($0.upperBound)" }.joined(separator: ",")) }
        if !r.domains.isEmpty { parts.append(r.domains.count <= 2 ? r.domains.joined(separator: ",") : "\(r.domains.count) domains") }
        return parts.joined(separator: " ")
    }

    public func route(_ request: FlowRequest) -> RouteDecision {
        for i in rules.indices where Router.matches(rules[i].settings, request) {
            rules[i].matches &+= 1
            return rules[i].decision
        }
        defaultMatches &+= 1
        return defaultDecision
    }

    /// One rule against one flow: every matcher the rule names must match.
    public static func matches(_ rule: RuleSettings, _ r: FlowRequest) -> Bool {
        if let n = rule.network, n != r.network.rawValue { return false }
        if !rule.ports.isEmpty {
            let p = r.destination.port
            if !rule.ports.contains(where: { $0.contains(p) }) { return false }
        }
        if !rule.to.isEmpty {
            guard case .ip(let e) = r.destination else { return false }
            let address = e.address.unmappedIPv4
            if !rule.to.contains(where: { $0.contains(address) }) { return false }
        }
        if !rule.domains.isEmpty {
            guard case .domain(let name, _) = r.destination else { return false }
            if !rule.domains.contains(where: { domain($0, matches: name) }) { return false }
        }
        return true
    }

    /// `example.com` matches exactly; `*.example.com` matches the name and any subdomain, on
    /// label boundaries only (`badexample.com` never matches).
    public static func domain(_ pattern: String, matches name: String) -> Bool {
        var n = name.lowercased()
        if n.hasSuffix(".") { n.removeLast() }
        if pattern.hasPrefix("*.") {
            let base = String(pattern.dropFirst(2))
            return n == base || n.hasSuffix("." + base)
        }
        return n == pattern
    }
}

extension IPAddress {
    /// ::ffff:a.b.c.d as a.b.c.d, so IPv4 rules apply to IPv4-mapped destinations.
    public var unmappedIPv4: IPAddress {
        if case .v6(0, let lo) = self, lo >> 32 == 0xFFFF { return .v4(UInt32(truncatingIfNeeded: lo)) }
        return self
    }
}
