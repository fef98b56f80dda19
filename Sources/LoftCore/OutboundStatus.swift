/// One outbound's row in `loft status`, as the outbound reports it of itself (built on the loop
/// thread when asked for). Every outbound type fills the same fields, so whoever shows them
/// need not know the type.
public struct OutboundStatus: Sendable {
    public var name: String
    public var type: String             // "loft", "direct", "drop", …
    public var state: String            // "up", "ready", "held", "down", …
    public var detail: String = ""      // free text: the carrier, overlay address, last error, …
    public var flows: UInt64 = 0        // flows opened through it (a drop outbound: flows refused)
    public var liveFlows: Int = 0
    public var bytesUp: UInt64 = 0      // app → remote
    public var bytesDown: UInt64 = 0    // remote → app
    /// Type-specific counters in the order they are shown (a holder's dials, resumes, …).
    public var extra: [(String, UInt64)] = []

    public init(name: String, type: String, state: String) {
        self.name = name; self.type = type; self.state = state
    }

    /// The extra counter of flows and datagrams refused while the outbound was down and held
    /// (fail-closed); `loft status` counts them among the drops, summed over all outbounds.
    public static let holdDrops = "hold-drops"

    /// The extra counter called `name`; nil when this outbound has no such counter.
    public func counter(_ name: String) -> UInt64? { extra.first { $0.0 == name }?.1 }
}
