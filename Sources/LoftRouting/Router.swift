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
    public let defaultDecision: RouteDecision
    public private(set) var defaultMatches: UInt64 = 0

    public struct UnknownOutbound: Error, CustomStringConvertible {
        public var name: String
        public var description: String { "no outbound named \"\(name)\"" }
    }

    /// `outbounds` holds every outbound by name, including the built-in `direct`.
    public init(rules: [RuleSettings], defaultAction: RuleAction, outbounds: [String: Outbound]) throws {
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
        self.rules = try rules.map { CompiledRule(settings: $0, decision: try decide($0.action)) }
        self.defaultDecision = try decide(defaultAction)
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
