import Glibc
import LoftCore
import LoftIO
import LoftProtocol

/// Replay on the holder (docs/protocol.md §8.1): while the carrier is gone the session's flows
/// are parked (the app's TCP sees a stall, not a reset) for as long as the front said it keeps
/// them (STATUS grace_ms); a RESUME that continues them lets them go on where they stopped.
extension HolderOutbound {
    /// The carrier was lost and the session parked its streams: the first loss of an outage
    /// starts the timer after which they are given up (the front has given them up by then).
    func parkStreams() {
        guard parkTimer == nil else { return }
        counts.sessionsParked += 1
        let grace = UInt64(session.replayGraceMs)
        Log.info("holder.parked", ["outbound": name, "streams": streams.count, "associations": associations.count,
                                   "held-bytes": session.replayHeldBytes, "grace-ms": grace])
        parkTimer = loop.schedule(after: grace) { [weak self] in
            guard let self else { return }
            self.parkTimer = nil
            guard self.session.isParked else { return }
            self.parkReason = "the front's grace period (\(grace) ms) is over"
            self.session.dropParked()
        }
    }

    func cancelParkTimer() {
        if let t = parkTimer { loop.cancel(t) }
        parkTimer = nil
    }

    /// After STATUS: the parked streams went on (counted) or were lost (`sessionStreamsLost`).
    func parkEnded() {
        cancelParkTimer()
        let continued = session.counters.streamsContinued
        if continued > lastContinued {
            lastContinued = continued
            counts.resumesWithStreams += 1
            Log.info("holder.streams-resumed", ["outbound": name, "streams": streams.count,
                                                "replayed-bytes": session.counters.replayedBytes])
        }
    }

    /// The session's parked streams cannot go on: the flows are reset, said once in the log.
    public func sessionStreamsLost(_ s: ClientSession, count: Int) {
        cancelParkTimer()
        let reason = parkReason ?? "the front no longer has them (restarted, or its grace period is over)"
        parkReason = nil
        let flows = streams.count
        counts.streamsLost += UInt64(flows)
        if count > 0 || flows > 0 {
            Log.warn("holder.streams-lost", ["outbound": name, "streams": flows, "session-streams": count, "reason": reason])
        }
        failAll(.other(ECONNRESET), keepWaiting: true)
    }
}
