import LoftCore

/// Joins each new flow to an outbound: the configured rules in order, first match wins, then
/// the default action. Each rule counts the flows it matched.
public final class Router: FlowRouter {
    public struct CompiledRule {
        public let rule: Rule
        public let decision: RouteDecision
        public var matches: UInt64 = 0
        let destinations: PrefixSet
        let exactDomains: Set<String>
        let domainSuffixes: [String]   // "example.com" for "*.example.com"
        let network: FlowNetwork?

        init(rule: Rule, decision: RouteDecision) {
            self.rule = rule
            self.decision = decision
            destinations = PrefixSet(rule.to)
            exactDomains = Set(rule.domains.filter { !$0.hasPrefix("*.") })
            domainSuffixes = rule.domains.filter { $0.hasPrefix("*.") }.map { String($0.dropFirst(2)) }
            network = rule.network.flatMap(FlowNetwork.init(rawValue:))
        }

        /// Every matcher the rule names must match (`anyName`: the name is taken to match).
        func matches(_ r: FlowRequest, anyName: Bool = false) -> Bool {
            if let network, network != r.network { return false }
            if !rule.ports.isEmpty {
                // ICMP has no ports: a rule about ports never matches it.
                if r.network == .icmp { return false }
                let p = r.destination.port
                if !rule.ports.contains(where: { $0.contains(p) }) { return false }
            }
            if !rule.to.isEmpty {
                guard case .ip(let e) = r.destination, destinations.contains(e.address.unmappedIPv4) else { return false }
            }
            if !rule.domains.isEmpty {
                if anyName { return true }
                let name: String
                if case .domain(let n, _) = r.destination { name = n } else if let n = r.name { name = n } else { return false }
                var n = name.lowercased()
                if n.hasSuffix(".") { n.removeLast() }
                if exactDomains.contains(n) { return true }
                return domainSuffixes.contains { n == $0 || n.hasSuffix("." + $0) }
            }
            return true
        }
    }

    public private(set) var rules: [CompiledRule]
    /// No rule has `domains`: no name changes a route (set with the rules).
    private var hasNoDomains = true
    public private(set) var defaultDecision: RouteDecision
    public private(set) var defaultMatches: UInt64 = 0
    private let outbounds: [String: Outbound]

    public struct UnknownOutbound: Error, CustomStringConvertible {
        public var name: String
        public var description: String { "no outbound named \"\(name)\"" }
    }

    /// `outbounds` holds every outbound by name, including the built-in `direct`.
    public init(rules: [Rule], defaultAction: Rule.Action, outbounds: [String: Outbound]) throws {
        self.outbounds = outbounds
        (self.rules, self.defaultDecision) = try Router.compile(rules, defaultAction, outbounds)
        hasNoDomains = Router.noDomains(self.rules)
    }

    /// Swaps in new rules (`loft reload`); on error the old ones stay.
    public func reload(rules: [Rule], defaultAction: Rule.Action) throws {
        (self.rules, self.defaultDecision) = try Router.compile(rules, defaultAction, outbounds)
        hasNoDomains = Router.noDomains(self.rules)
        defaultMatches = 0
    }

    private static func compile(_ rules: [Rule], _ defaultAction: Rule.Action,
                                _ outbounds: [String: Outbound]) throws -> ([CompiledRule], RouteDecision) {
        func decide(_ a: Rule.Action) throws -> RouteDecision {
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
        return (try rules.map { CompiledRule(rule: $0, decision: try decide($0.action)) }, try decide(defaultAction))
    }

    /// One line describing a rule, for status.
    public static func summary(_ r: Rule) -> String {
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

    public func route(_ request: FlowRequest) -> RouteMatch {
        for i in rules.indices where rules[i].matches(request) {
            rules[i].matches &+= 1
            return RouteMatch(rules[i].decision, rule: i)
        }
        defaultMatches &+= 1
        return RouteMatch(defaultDecision, rule: -1)
    }

    /// No rule has `domains` (kept with the rules, not worked out per flow).
    private static func noDomains(_ rules: [CompiledRule]) -> Bool { !rules.contains { !$0.rule.domains.isEmpty } }

    public func nameMayDecide(_ request: FlowRequest) -> Bool {
        guard case .ip = request.destination, !hasNoDomains else { return false }
        for r in rules {
            if !r.rule.domains.isEmpty {
                // Everything but the name matches: some name would.
                if r.matches(request, anyName: true) { return true }
            } else if r.matches(request) {
                return false
            }
        }
        return false
    }

    /// One rule against one flow (for tests and `loft check`).
    public static func matches(_ rule: Rule, _ r: FlowRequest) -> Bool {
        CompiledRule(rule: rule, decision: .drop(reset: false)).matches(r)
    }

    /// Rules that can never match because an earlier rule matches everything they would:
    /// (index of the shadowed rule, index of the rule that shadows it), 0-based.
    public static func shadowed(_ rules: [Rule]) -> [(Int, Int)] {
        let compiled = rules.map { CompiledRule(rule: $0, decision: .drop(reset: false)) }
        var out: [(Int, Int)] = []
        for j in compiled.indices {
            for i in 0..<j where covers(compiled[i], compiled[j]) {
                out.append((j, i))
                break
            }
        }
        return out
    }

    /// Whether every flow `b` matches is also matched by `a`.
    static func covers(_ a: CompiledRule, _ b: CompiledRule) -> Bool {
        if let n = a.network, n != b.network { return false }
        if !a.rule.ports.isEmpty {
            if b.rule.ports.isEmpty { return false }
            for r in b.rule.ports where !a.rule.ports.contains(where: { $0.lowerBound <= r.lowerBound && $0.upperBound >= r.upperBound }) {
                return false
            }
        }
        if !a.rule.to.isEmpty {
            // b must be limited to addresses inside a's set (a rule with only domains never
            // matches an address destination, and the reverse).
            if b.rule.to.isEmpty || !b.rule.domains.isEmpty { return false }
            if !a.destinations.covers(b.destinations) { return false }
        }
        if !a.rule.domains.isEmpty {
            if b.rule.domains.isEmpty || !b.rule.to.isEmpty { return false }
            for d in b.rule.domains {
                let name = d.hasPrefix("*.") ? String(d.dropFirst(2)) : d
                let aCovers = a.exactDomains.contains(d) && !d.hasPrefix("*.")
                    || a.domainSuffixes.contains { name == $0 || name.hasSuffix("." + $0) }
                if !aCovers { return false }
            }
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
