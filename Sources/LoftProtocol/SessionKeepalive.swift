import LoftCore

/// Keepalive: a PING each interval, a carrier dead after two silent ones; idle streams give
/// their receive storage back. The embedder calls `tick` at `nextTick`, a deadline on its
/// loop's timer heap.
extension SessionEngine {
    // MARK: keepalive

    /// When `tick` next has something to do, or nil for nothing until the session changes: at
    /// once before the silence clock runs, the next PING, the moment two intervals have passed
    /// silent, and a second from now while streams are open (one quiet for a whole second gives
    /// its receive storage back). Heard bytes only move the silence deadline later, so a
    /// deadline armed earlier is never late.
    func nextTick(now: UInt64) -> UInt64? {
        // A second from now also while received bytes wait for their ACK (§8.1).
        let storage: UInt64? = streams.isEmpty && (!replay || !ackOwed) ? nil : now &+ 1000
        guard keepaliveMs > 0, !failed else { return storage }
        if lastHeard == nil || heardSinceTick || pongUnresolved { return now }
        var due = lastHeard! &+ 2 * keepaliveMs
        if pingEnabled { due = min(due, lastPingAt.map { $0 &+ keepaliveMs } ?? now) }
        return min(due, storage ?? .max)
    }

    func tick(now: UInt64) -> Bool {
        for st in streams.values {
            if !st.recvTouched && st.recv.isEmpty && st.recv.capacity > 0 { st.recv.removeAll(keepingCapacity: false) }
            st.recvTouched = false
        }
        if replay && !parked { acknowledge(force: true); signal() }
        guard keepaliveMs > 0, !failed else { return true }
        if heardSinceTick || lastHeard == nil { lastHeard = now; heardSinceTick = false }
        if pongUnresolved, let p = pingOutstanding {
            rttMs = now >= p.at ? now - p.at : 0
            pongUnresolved = false
            pingOutstanding = nil
        }
        let heard = lastHeard!
        if now >= heard && now - heard >= 2 * keepaliveMs { return false }
        if pingEnabled, lastPingAt.map({ now < $0 || now - $0 >= keepaliveMs }) ?? true {
            pingSeq += 1
            queueControl(.ping(pingSeq))
            lastPingAt = now
            pingOutstanding = (pingSeq, now)
            counters.pingsSent += 1
            signal()
        }
        return true
    }
}
