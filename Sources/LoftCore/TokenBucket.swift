/// A rate limit: `burst` tokens, refilled at `perSecond`; each event takes one. Time is the
/// loop's clock in milliseconds, passed in (a value type, no clock of its own).
public struct TokenBucket: Sendable {
    public let perSecond: Double
    public let burst: Double
    private var tokens: Double
    private var at: UInt64?

    public init(perSecond: Double, burst: Double) {
        self.perSecond = perSecond
        self.burst = burst
        tokens = burst
    }

    private mutating func refill(_ now: UInt64) {
        if let at { tokens = min(burst, tokens + Double(now &- at) * perSecond / 1000) }
        at = now
    }

    /// Takes a token if there is one.
    public mutating func take(now: UInt64) -> Bool {
        refill(now)
        guard tokens >= 1 else { return false }
        tokens -= 1
        return true
    }

    /// Milliseconds until the next token (0 if one is there).
    public mutating func msUntilNext(now: UInt64) -> UInt64 {
        refill(now)
        return tokens >= 1 ? 0 : UInt64(((1 - tokens) * 1000 / perSecond).rounded(.up))
    }
}
