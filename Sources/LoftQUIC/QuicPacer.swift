
/// The QUIC sender's pacer: a token bucket filled at the congestion controller's pacing rate
/// (ngtcp2's BBR), at most `depthNs` worth of it (and never less than `minPackets` packets).
///
/// ngtcp2 0.12's own pacer (`ngtcp2_conn_update_pkt_tx_time`) banks nothing: after each burst
/// the next may go only burst / rate later, counted from the burst's start, so any time the
/// loop spends elsewhere (reading the TUN, lwIP, the other direction) is lost to the sender
/// for good, and a send quantum of 10 packets (its BBR's floor where min_rtt is tens of
/// microseconds) turns into one loop turn per 14 KB. This bucket keeps what accrues while the
/// loop is busy, up to 2 ms of the rate: bursts stay bounded by the rate (about 25 KB at 100
/// Mbit/s, 17 packets; the congestion window alone at loopback rates), and the average never
/// exceeds it. The loop's timers count milliseconds, so an empty bucket waits at least one.
/// (LoftCore's `TokenBucket` counts events at a fixed rate in milliseconds; this one counts
/// bytes in nanoseconds at a rate and depth that follow the congestion controller.)
package struct QuicPacer {
    /// Bytes the sender may send now.
    package private(set) var tokens: Double
    /// When `tokens` was last brought up to date (ns, the loop's `nanoseconds`).
    private var filledAt: UInt64
    package let depthNs: Double
    package let minPackets: Double

    package init(now: UInt64, depthNs: UInt64 = 2_000_000, minPackets: Int = 10, packet: Int = 1_200) {
        self.depthNs = Double(depthNs)
        self.minPackets = Double(minPackets)
        tokens = Double(minPackets * packet)
        filledAt = now
    }

    /// Adds what accrued since the last fill at `rate` (bytes per ns), up to the depth. No
    /// rate (a controller that sets none) paces nothing: the bucket is full.
    package mutating func fill(now: UInt64, rate: Double, packet: Int) {
        let cap = max(rate * depthNs, minPackets * Double(packet))
        if rate <= 0 { tokens = cap } else if now > filledAt { tokens = min(cap, tokens + Double(now - filledAt) * rate) }
        if tokens > cap { tokens = cap }
        filledAt = now
    }

    /// Whole packets of `packet` bytes the bucket allows now.
    package func packets(of packet: Int) -> Int { tokens >= Double(packet) ? Int(tokens / Double(packet)) : 0 }

    /// `bytes` went out.
    package mutating func spend(_ bytes: Int) { tokens -= Double(bytes) }

    /// Milliseconds until one packet of `packet` bytes has accrued at `rate` (at least 1).
    package func waitMs(packet: Int, rate: Double) -> UInt64 {
        guard rate > 0 else { return 1 }
        let ns = (Double(packet) - tokens) / rate
        return max(1, UInt64((ns / 1_000_000).rounded(.up)))
    }
}
