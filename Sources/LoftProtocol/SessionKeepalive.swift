import LoftCore

/// Keepalive: a PING each interval, a carrier dead after two silent ones; idle streams give
/// their receive storage back.
extension SessionEngine {
    // MARK: keepalive

    func tick(now: UInt64) -> Bool {
        for st in streams.values {
            if !st.recvTouched && st.recv.isEmpty && st.recv.capacity > 0 { st.recv.removeAll(keepingCapacity: false) }
            st.recvTouched = false
        }
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
